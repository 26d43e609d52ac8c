package lock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// fuzzValidKey and fuzzValidOwner are the documented limits on keys and owners.
func fuzzValidKey(key string) bool { return key != "" && len(key) <= lock.MaxKeyLen }

func fuzzValidOwner(owner string) bool {
	return owner != "" && len(owner) <= lock.MaxOwnerLen && !strings.ContainsAny(owner, ", \t\r\n\v\f")
}

// FuzzMemoryProvider feeds keys, owners and TTLs to the memory provider:
// invalid input fails with ErrInvalidArgument and stores nothing; valid input
// stores a record owned by owner, which others see, and which its owner can
// update and release.
func FuzzMemoryProvider(f *testing.F) {
	sec := int64(time.Second)
	f.Add("lock:a", "owner-1", sec)
	f.Add("", "owner", sec)
	f.Add("k", "", sec)
	f.Add("k", "a,b", sec)
	f.Add("k", "a b", sec)
	f.Add("k", "a\tb", sec)
	f.Add("k", "a\r\nb", sec)
	f.Add("k", "\f", sec)
	f.Add("k", "a\vb", sec)
	f.Add("k", "ünïcödé\x00\xff", sec)
	f.Add(strings.Repeat("k", lock.MaxKeyLen), "o", sec)
	f.Add(strings.Repeat("k", lock.MaxKeyLen+1), "o", sec)
	f.Add("k", strings.Repeat("o", lock.MaxOwnerLen), sec)
	f.Add("k", strings.Repeat("o", lock.MaxOwnerLen+1), sec)
	f.Add("k", "o", int64(time.Millisecond))
	f.Add("k", "o", int64(time.Millisecond-1))
	f.Add("k", "o", int64(0))
	f.Add("k", "o", int64(-1))
	f.Add("k", "o", int64(math.MaxInt64))
	f.Add("k", "o", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, key, owner string, ttlNanos int64) {
		ctx := context.Background()
		ttl := time.Duration(ttlNanos)
		// A clock that never moves: no record expires during a fuzz input.
		p := lock.NewMemoryProvider(lock.MemoryClock(testenv.NewClock(time.Unix(1_700_000_000, 0))))
		rec, err := p.Acquire(ctx, key, owner, ttl)
		if !fuzzValidKey(key) || !fuzzValidOwner(owner) || ttl < time.Millisecond {
			require.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire(%q, %q, %v)", key, owner, ttl)
			require.Zero(t, lock.MemoryLen(p), "invalid input stored a record")
			require.ErrorIs(t, p.Renew(ctx, key, owner, ttl), lock.ErrInvalidArgument)
			err = p.Release(ctx, key, owner)
			if fuzzValidKey(key) && fuzzValidOwner(owner) {
				assert.ErrorIs(t, err, lock.ErrLost, "Release with nothing stored")
			} else {
				assert.ErrorIs(t, err, lock.ErrInvalidArgument)
			}
			require.Zero(t, lock.MemoryLen(p), "invalid input stored a record")
			return
		}
		require.NoError(t, err, "Acquire(%q, %q, %v)", key, owner, ttl)
		require.Equal(t, owner, rec.Owner)
		require.NotZero(t, rec.Token)
		require.False(t, rec.GracePeriod)
		require.Equal(t, ttl, rec.TTL)
		require.Equal(t, 1, lock.MemoryLen(p))

		other := "someone-else"
		if owner == other {
			other = "another-one"
		}
		seen, err := p.Acquire(ctx, key, other, time.Second)
		require.NoError(t, err)
		since := time.Unix(1_700_000_000, 0)
		require.Equal(t, lock.Record{Owner: owner, Token: rec.Token, TTL: ttl, Since: since}, seen, "another owner sees the record")
		require.ErrorIs(t, p.Release(ctx, key, other), lock.ErrLost, "another owner released the record")
		require.ErrorIs(t, p.Renew(ctx, key, other, time.Second), lock.ErrLost, "another owner updated the record")

		require.NoError(t, p.Renew(ctx, key, owner, ttl))
		require.NoError(t, p.Release(ctx, key, owner))
		require.Zero(t, lock.MemoryLen(p))
		require.ErrorIs(t, p.Release(ctx, key, owner), lock.ErrLost)
	})
}

// fuzzStored is what Redis holds under a key: its type, value and TTL.
type fuzzStored struct {
	typ   string
	value string
	ttl   time.Duration
}

func fuzzSnapshot(t *testing.T, mr *miniredis.Miniredis, key string) fuzzStored {
	t.Helper()
	s := fuzzStored{typ: mr.Type(key), ttl: mr.TTL(key)}
	switch s.typ {
	case "string":
		s.value, _ = mr.Get(key)
	case "list":
		l, _ := mr.List(key)
		s.value = strings.Join(l, "\x00")
	case "hash":
		s.value = mr.HGet(key, "f")
	}
	return s
}

// fuzzParseRecord parses a stored value as the library's record, by the rules of
// its doc: "owner,token,since", "owner,token,since,q" or
// "owner,token,since,ended", owner valid, token 1 to 19 digits without a
// leading zero, since 1 to 15 digits.
func fuzzParseRecord(v string) (owner string, token uint64, ended bool, ok bool) {
	ended = strings.HasSuffix(v, ",ended")
	body := strings.TrimSuffix(v, ",ended")
	if !ended {
		body = strings.TrimSuffix(body, ",q")
	}
	parts := strings.Split(body, ",")
	if len(parts) != 3 || !fuzzValidOwner(parts[0]) {
		return "", 0, false, false
	}
	tok, since := parts[1], parts[2]
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || token == 0 || len(tok) > 19 || tok[0] == '0' {
		return "", 0, false, false
	}
	if since == "" || len(since) > 15 || strings.Trim(since, "0123456789") != "" {
		return "", 0, false, false
	}
	return parts[0], token, ended, true
}

const fuzzOwner = "me"

// FuzzRedisRecord stores a raw value under the record key K (a string, a
// list, a hash, or nothing) in miniredis and runs Acquire, Release, Update,
// Inspect and ForceRelease on it: they never panic, return a valid outcome for a record and an error
// matching ErrCorruptRecord otherwise, and never change a value that is not a
// record.
func FuzzRedisRecord(f *testing.F) {
	for _, v := range []string{
		"me,1,9", "me,1,9,ended", "other,5,9", "other,5,9,ended", "me,1795000000000000,1795000000000",
		"me,1,9,q", "other,5,9,q", "me,1,9,q,ended", "me,1,9,ended,q", "me,1,9,q,q", "me,1,9,",
		"", "garbage", "me", "me,", ",1,9", "me,-1,9", "me,1,", "me,1,9,ended,ended", "me,1,9ended",
		"me,007,9", "me,18446744073709551615,9", "me,0,9", "me,18446744073709551616,9",
		"me x,1,9", "other x,1,9", "me\n,1,9", "me,1,9\n", "a,b,c", "\x00,1,9", "me,\uff11,9",
		strings.Repeat("x", lock.MaxOwnerLen+1) + ",1,9",
		"me,1", "me,1,ended", "me,1,q", "me,1,-9", "me,1,+9", "me,1,0", "me,1,1234567890123456",
		"me,1,123456789012345", "me,1,\uff19", "me,1, 9",
		"me,4503599627370497,9", "other,4503599627370497,9", "me,6300000000000000,1795000000000,q",
		"other,6300000000000000,1795000000000,q", "other,4503599627370497,9,ended",
	} {
		f.Add(v, uint8(0))
	}
	f.Add("me,1,9", uint8(1))
	f.Add("me,1,9", uint8(2))
	f.Add("", uint8(3))
	mr := miniredis.RunT(f)
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	f.Cleanup(func() { _ = rc.Close() })
	p := lock.NewRedisProvider(rc)
	const key = "lock:{k}"
	const rkey = key // a key with a hash tag is stored as it is

	f.Fuzz(func(t *testing.T, raw string, kind uint8) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kind %= 4
		put := func() fuzzStored {
			mr.FlushAll()
			switch kind {
			case 0:
				require.NoError(t, mr.Set(rkey, raw))
			case 1:
				_, err := mr.Push(rkey, raw)
				require.NoError(t, err)
			case 2:
				mr.HSet(rkey, "f", raw)
			case 3:
				return fuzzSnapshot(t, mr, rkey)
			}
			mr.SetTTL(rkey, time.Hour)
			return fuzzSnapshot(t, mr, rkey)
		}
		owner, token, ended, isRecord := fuzzParseRecord(raw)
		isRecord = isRecord && kind == 0
		var problems []string
		bad := func(format string, args ...any) {
			problems = append(problems, strconv.Quote(raw)+": "+fmt.Sprintf(format, args...))
		}
		// unchanged checks that an operation on a value that is not a record
		// failed with ErrCorruptRecord and left the value as it was.
		unchanged := func(op string, before fuzzStored, err error) {
			if !errors.Is(err, lock.ErrCorruptRecord) {
				bad("%s on a value that is not a record returned %v, want ErrCorruptRecord", op, err)
			}
			if after := fuzzSnapshot(t, mr, rkey); after != before {
				bad("%s changed a value that is not a record: %+v -> %+v", op, before, after)
			}
		}
		lostOrNil := func(op string, err error) {
			if err != nil && !errors.Is(err, lock.ErrLost) {
				bad("%s on a record returned %v, want nil or ErrLost", op, err)
			}
		}

		// Acquire
		before := put()
		rec, err := p.Acquire(ctx, key, fuzzOwner, time.Minute)
		switch {
		case kind == 3:
			if err != nil || rec.Owner != fuzzOwner || rec.Token == 0 || rec.GracePeriod {
				bad("Acquire of a free key returned %+v, %v", rec, err)
			}
		case !isRecord:
			unchanged("Acquire", before, err)
		case !ended && token < 1<<52:
			// A live record of a version before 0.2.0 (see tokenBase).
			if !errors.Is(err, lock.ErrIncompatible) {
				bad("Acquire on a record with a token below 2^52 returned %v, want ErrIncompatible", err)
			}
			// (Its own record, which no earlier version can have made, has
			// its TTL reset as any record of its own.)
			if after := fuzzSnapshot(t, mr, rkey); after.value != before.value || owner != fuzzOwner && after != before {
				bad("Acquire changed a record of an earlier version: %+v -> %+v", before, after)
			}
		case err != nil:
			bad("Acquire on a record returned %v", err)
		default:
			if rec.Owner != owner || rec.Token != token || rec.GracePeriod != ended {
				bad("Acquire returned %+v, want the stored record", rec)
			}
			after := fuzzSnapshot(t, mr, rkey)
			if after.value != before.value {
				bad("Acquire changed a held record: %q -> %q", before.value, after.value)
			}
			if owner != fuzzOwner || ended {
				if after.ttl != before.ttl {
					bad("Acquire changed the TTL of a record it does not hold: %v -> %v", before.ttl, after.ttl)
				}
			}
		}

		// Release
		before = put()
		err = p.Release(ctx, key, fuzzOwner)
		switch {
		case kind == 3:
			if !errors.Is(err, lock.ErrLost) {
				bad("Release of a free key returned %v, want ErrLost", err)
			}
		case !isRecord:
			unchanged("Release", before, err)
		default:
			lostOrNil("Release", err)
			gone := fuzzSnapshot(t, mr, rkey).typ == ""
			if mine := owner == fuzzOwner; (err == nil) != mine || gone != mine {
				bad("Release by %s of %q returned %v and deleted it: %v", fuzzOwner, raw, err, gone)
			}
		}

		// Renew and Finish
		for _, end := range []bool{false, true} {
			before = put()
			op := "Renew"
			if end {
				op = "Finish"
				err = p.Finish(ctx, key, fuzzOwner, 2*time.Minute)
			} else {
				err = p.Renew(ctx, key, fuzzOwner, 2*time.Minute)
			}
			after := fuzzSnapshot(t, mr, rkey)
			switch {
			case kind == 3:
				if !errors.Is(err, lock.ErrLost) || after.typ != "" {
					bad("%s of a free key returned %v and stored %+v", op, err, after)
				}
			case !isRecord:
				unchanged(op, before, err)
			default:
				lostOrNil(op, err)
				if mine := owner == fuzzOwner && !ended; (err == nil) != mine {
					bad("%s by %s of %q returned %v", op, fuzzOwner, raw, err)
				} else if !mine && after != before {
					bad("%s changed a record it does not hold: %+v -> %+v", op, before, after)
				} else if mine && end && after.value != strings.TrimSuffix(raw, ",q")+",ended" {
					bad("%s left %q, want it ended", op, after.value)
				}
			}
		}

		// Inspect: changes nothing
		before = put()
		rec, err = p.Inspect(ctx, key)
		switch {
		case kind == 3:
			if err != nil || rec != (lock.Record{}) {
				bad("Inspect of a free key returned %+v, %v", rec, err)
			}
		case !isRecord:
			unchanged("Inspect", before, err)
		case err != nil || rec.Owner != owner || rec.Token != token || rec.GracePeriod != ended:
			bad("Inspect of a record returned %+v, %v", rec, err)
		default:
			if after := fuzzSnapshot(t, mr, rkey); after.value != before.value {
				bad("Inspect changed a record: %q -> %q", before.value, after.value)
			}
		}

		// ForceRelease
		before = put()
		rec, err = p.ForceRelease(ctx, key)
		switch {
		case kind == 3:
			if err != nil || rec != (lock.Record{}) {
				bad("ForceRelease of a free key returned %+v, %v", rec, err)
			}
		case !isRecord:
			unchanged("ForceRelease", before, err)
		case err != nil || rec.Owner != owner || rec.Token != token || rec.GracePeriod != ended:
			bad("ForceRelease of a record returned %+v, %v", rec, err)
		default:
			if after := fuzzSnapshot(t, mr, rkey); after.typ != "" {
				bad("ForceRelease left %+v", after)
			}
		}

		if len(problems) == 0 {
			return
		}
		t.Fatal(strings.Join(problems, "\n"))
	})
}

// FuzzOptions feeds durations to Client.Acquire and Do on the memory
// provider: a negative one, or a lease under 3ms once defaults apply, fails
// with ErrInvalidArgument, runs nothing and stores nothing (a GracePeriod
// under 1ms may fail so too); others grant the lock, which releases cleanly.
func FuzzOptions(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(int64(0), int64(0), int64(0), false)
	f.Add(int64(time.Minute), int64(time.Second), int64(0), true)
	f.Add(int64(-1), int64(0), int64(0), false)
	f.Add(int64(0), int64(-1), int64(0), false)
	f.Add(int64(0), int64(0), int64(-1), true)
	f.Add(int64(math.MinInt64), int64(math.MinInt64), int64(math.MinInt64), false)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), false)
	f.Add(int64(0), 3*ms, int64(0), false)
	f.Add(int64(0), 3*ms-1, int64(0), false)
	f.Add(2*ms, int64(0), int64(0), false)
	f.Add(int64(0), int64(time.Second), 5*ms, false)
	f.Add(int64(0), int64(time.Second), int64(1), false)
	f.Add(int64(0), int64(time.Second), ms-1, true)
	f.Fuzz(func(t *testing.T, maxNanos, leaseNanos, graceNanos int64, wait bool) {
		o := lock.Options{
			Wait:        wait,
			MaxDuration: time.Duration(maxNanos),
			Lease:       time.Duration(leaseNanos),
			GracePeriod: time.Duration(graceNanos),
		}
		p := lock.NewMemoryProvider()
		c, err := lock.NewClient(p)
		require.NoError(t, err)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		invalid := o.MaxDuration < 0 || o.Lease < 0 || o.GracePeriod < 0
		if !invalid {
			maxD, lease := cmp.Or(o.MaxDuration, lock.DefaultMaxDuration), cmp.Or(o.Lease, lock.DefaultLease)
			invalid = min(lease, maxD) < 3*time.Millisecond
		}

		l, err := c.Acquire(ctx, "fuzz", o)
		// A GracePeriod under a millisecond, which providers cannot store, may
		// be refused up front; if it is accepted, the release must still work.
		if o.GracePeriod > 0 && o.GracePeriod < time.Millisecond && errors.Is(err, lock.ErrInvalidArgument) {
			invalid = true
		}
		ran := false
		doErr := c.Do(ctx, "fuzz-do", o, func(context.Context) error { ran = true; return nil })
		if invalid {
			require.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire with %+v", o)
			require.Nil(t, l)
			require.ErrorIs(t, doErr, lock.ErrInvalidArgument, "Do with %+v", o)
			require.False(t, ran, "Do ran its handler with %+v", o)
			require.Zero(t, lock.MemoryLen(p), "invalid options stored a record")
			return
		}
		// A lease of a few milliseconds can run out before the grant reaches
		// the caller (a loaded machine, the race detector): Acquire then
		// hands the grant back and returns a NotAcquiredError that says so
		// (issue 31, item 8; the loss itself, in the instant between that
		// check and the lease timer), holds nothing, and Do does not run.
		late := func(err error) bool {
			return errors.Is(err, lock.ErrNotAcquired) && errors.Is(err, lock.ErrGrantedLate)
		}
		if errors.Is(err, lock.ErrLost) || late(err) {
			require.Nil(t, l)
		} else {
			require.NoError(t, err, "Acquire with %+v", o)
			require.NotZero(t, l.Token())
		}
		if !ran && !late(doErr) {
			require.ErrorIs(t, doErr, lock.ErrLost, "Do did not run its handler with %+v", o)
		}
		// A very short MaxDuration may end the hold before the release.
		if doErr != nil && !errors.Is(doErr, lock.ErrLost) && !late(doErr) {
			t.Fatalf("Do with %+v returned %v, want nil, ErrLost or a grant too late to hold", o, doErr)
		}
		if l != nil {
			if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrLost) {
				t.Fatalf("Release with %+v returned %v, want nil or ErrLost", o, err)
			}
		}
		if o.GracePeriod == 0 {
			require.Zero(t, lock.MemoryLen(p), "a record is left after the release with %+v", o)
		}
	})
}

// Issue 7, item 4: FuzzKeySlots: for every prefix NewClient accepts and every
// name, the stored keys of the lock (RedisKeys of Client.Key) share one
// Cluster hash slot, the record and the queue start with the prefix and the
// fencing counter with its text before any "{", and the record is Client.Key
// itself; a prefix is refused, with ErrInvalidArgument, only when its first
// "{" opens an empty hash tag.
func FuzzKeySlots(f *testing.F) {
	prefixes := []string{"lock:", "", "{app}:", "x{", "}", "{", "{}", "a{b", "a}b{c}", "{}x:", "a{}"}
	names := []string{"x", "", "}", "}x", "}{", "{", "{}", "a{b", "a}b{c}", "{x}", "}}{{", "a{}b", "{}}", "x}"}
	for _, p := range prefixes {
		for _, n := range names {
			f.Add(p, n)
		}
	}
	f.Fuzz(func(t *testing.T, prefix, name string) {
		emptyTag := false
		if i := strings.IndexByte(prefix, '{'); i >= 0 {
			emptyTag = strings.HasPrefix(prefix[i+1:], "}")
		}
		c, err := lock.NewClient(lock.NewMemoryProvider(), lock.WithPrefix(prefix))
		if err != nil {
			require.ErrorIs(t, err, lock.ErrInvalidArgument, "prefix %q", prefix)
			require.True(t, emptyTag, "prefix %q refused, but its first \"{\" opens no empty hash tag: %v", prefix, err)
			return
		}
		defer c.Close()
		require.False(t, emptyTag, "prefix %q opens an empty hash tag, and was accepted", prefix)
		if name == "" {
			return // Acquire refuses an empty name before it makes a key.
		}
		key := c.Key(name)
		r, fence, q, err := lock.RedisKeys(key)
		require.NoError(t, err, "RedisKeys(%q) (prefix %q, name %q)", key, prefix, name)
		assert.Equal(t, key, r, "the record is stored under Client.Key")
		slot := clusterSlot(r)
		// The fencing counter is shared by the locks of a slot: it starts
		// with the text of the prefix before any hash tag in it.
		head, _, _ := strings.Cut(prefix, "{")
		assert.True(t, strings.HasPrefix(fence, head), "fencing counter %q does not start with %q (prefix %q)", fence, head, prefix)
		assert.True(t, strings.HasSuffix(fence, "}:fence"), "fencing counter %q", fence)
		for _, k := range []string{r, fence, q} {
			assert.True(t, k == fence || strings.HasPrefix(k, prefix), "stored key %q does not start with prefix %q", k, prefix)
			assert.Equal(t, slot, clusterSlot(k), "key %q is in slot %d, the record %q in %d (prefix %q, name %q)",
				k, clusterSlot(k), r, slot, prefix, name)
		}
		assert.NotEqual(t, r, fence)
		assert.NotEqual(t, r, q)
		assert.NotEqual(t, fence, q)
	})
}
