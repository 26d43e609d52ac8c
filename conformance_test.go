package lock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

// TestProviderConformance runs the exported conformance suite, locktest.Run,
// against every built-in backend (memory, miniredis, real Redis), so that they
// prove themselves the way any other backend does; then, on the Redis
// backends, the checks of what the Redis provider stores, which read its keys
// (lock.RedisKeys) and so cannot be part of the generic suite.
func TestProviderConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		locktest.Run(t, locktest.Backend{
			New:             b.replica,
			Expires:         canExpire(t, b),
			SkipsUnlistened: true, // neither Redis backend is a Cluster
			ExclusiveInbox:  b.raw == nil,
			Remote:          b.raw != nil,
		})
		if b.raw != nil {
			redisStorageConformance(t, b)
		}
	})
}

// redisStorageConformance checks the keys and values the Redis provider
// stores, through b.raw: the layout of a record, that corrupt records are
// reported and left alone, and that calls that must change nothing write
// nothing.
func redisStorageConformance(t *testing.T, b backend) {
	p := b.replica(t)
	ctx := ctxTimeout(t, time.Minute)

	t.Run("RedisContenderWritesNothing", func(t *testing.T) {
		key, a, o := uniqueName(t), newOwner(), newOwner()
		mustAcquire(t, p, key, a, 10*time.Second)
		before := readRaw(t, b, key)
		rec, err := p.Acquire(ctx, key, o, time.Hour)
		require.NoError(t, err)
		require.Equal(t, a, rec.Owner, "a held key reports its holder")
		after := readRaw(t, b, key)
		assert.Equal(t, before.value, after.value, "a contender writes nothing to the record")
		// A contender may use up a token (Acquire takes one before it
		// looks, so that a free key costs one write); the next grant's
		// token is still greater (TokensStrictlyIncrease).
		assert.LessOrEqual(t, after.pttl, before.pttl, "a contender does not extend the record's TTL")
		assert.NoError(t, p.Release(ctx, key, a))
	})

	t.Run("RedisUpdateOnAbsentRecordStoresNothing", func(t *testing.T) {
		key, a := uniqueName(t), newOwner()
		require.ErrorIs(t, p.Renew(ctx, key, a, time.Hour), lock.ErrLost, "renewing an absent record")
		require.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost, "ending an absent record")
		n, err := b.raw.Exists(ctx, rawKey(key)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "an update of an absent record does not create one")
	})

	t.Run("RedisBadInputStoresNothing", func(t *testing.T) {
		key := uniqueName(t)
		cases := []struct {
			name, key, owner string
			ttl              time.Duration
		}{
			{"KeyTooLong", strings.Repeat("k", lock.MaxKeyLen+1), newOwner(), time.Second},
			{"EmptyOwner", key, "", time.Second},
			{"OwnerTooLong", key, strings.Repeat("o", lock.MaxOwnerLen+1), time.Second},
			{"OwnerWithComma", key, "a,1", time.Second},
			{"OwnerWithSpace", key, "a b", time.Second},
			{"OwnerWithNewline", key, "a\n", time.Second},
			{"ZeroTTL", key, newOwner(), 0},
			{"TTLUnderOneMillisecond", key, newOwner(), 999 * time.Microsecond},
			{"NegativeTTL", key, newOwner(), -time.Second},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := p.Acquire(ctx, c.key, c.owner, c.ttl)
				require.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire rejects it")
				require.ErrorIs(t, p.Renew(ctx, c.key, c.owner, c.ttl), lock.ErrInvalidArgument, "Update rejects it")
				require.ErrorIs(t, p.Finish(ctx, c.key, c.owner, c.ttl), lock.ErrInvalidArgument, "Update(ended) rejects it")
				if c.ttl >= time.Millisecond {
					require.ErrorIs(t, p.Release(ctx, c.key, c.owner), lock.ErrInvalidArgument, "Release rejects it")
				}
				n, err := b.raw.Exists(ctx, rawKey(c.key), queueKey(c.key)).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "nothing is stored for bad input")
			})
		}
	})

	t.Run("RedisLeaveNotQueuedStoresNothing", func(t *testing.T) {
		free, inbox := uniqueName(t)+":free", "inbox:"+uniqueName(t)
		require.NoError(t, p.Leave(ctx, free, lock.Waiter{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox}))
		require.NoError(t, p.Leave(ctx, free, lock.Waiter{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox, Look: lock.LookAgain}))
		o := newOwner() // the probe: Leave on a free key leaves it free
		mustAcquire(t, p, free, o, 10*time.Second)
		require.NoError(t, p.Release(ctx, free, o))
		n, err := b.raw.Exists(ctx, rawKey(free), queueKey(free)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Leave stored nothing")
	})

	t.Run("RedisQueueBadInputStoresNothing", func(t *testing.T) {
		key, inbox := uniqueName(t), "inbox:"+uniqueName(t)
		good := func() lock.Waiter { return lock.Waiter{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox} }
		cases := []struct {
			name string
			w    func() lock.Waiter
		}{
			{"EmptyOwner", func() lock.Waiter { w := good(); w.Owner = ""; return w }},
			{"OwnerWithComma", func() lock.Waiter { w := good(); w.Owner = "a,1"; return w }},
			{"OwnerWithSpace", func() lock.Waiter { w := good(); w.Owner = "a b"; return w }},
			{"OwnerTooLong", func() lock.Waiter { w := good(); w.Owner = strings.Repeat("o", lock.MaxOwnerLen+1); return w }},
			{"EmptyInbox", func() lock.Waiter { w := good(); w.Inbox = ""; return w }},
			{"InboxWithSpace", func() lock.Waiter { w := good(); w.Inbox = "in box"; return w }},
			{"InboxWithNewline", func() lock.Waiter { w := good(); w.Inbox += "\n"; return w }},
			{"InboxTooLong", func() lock.Waiter { w := good(); w.Inbox = strings.Repeat("i", lock.MaxKeyLen+1); return w }},
			{"ZeroTTL", func() lock.Waiter { w := good(); w.TTL = 0; return w }},
			{"TTLUnderOneMillisecond", func() lock.Waiter { w := good(); w.TTL = 999 * time.Microsecond; return w }},
			{"NegativeTTL", func() lock.Waiter { w := good(); w.TTL = -time.Second; return w }},
		}
		check := func(t *testing.T, held bool) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					for _, flags := range []lock.Waiter{{}, {Look: lock.LookJoin}, {Look: lock.LookFair}, {Look: lock.LookAgain}} {
						w := c.w()
						w.Look = flags.Look
						_, err := p.Queue(ctx, key, w)
						require.ErrorIs(t, err, lock.ErrInvalidArgument, "Queue %+v rejects it", flags)
					}
					require.ErrorIs(t, p.Leave(ctx, key, c.w()), lock.ErrInvalidArgument, "Leave rejects it")
					keys := []string{queueKey(key)}
					if !held {
						keys = append(keys, rawKey(key))
					}
					n, err := b.raw.Exists(ctx, keys...).Result()
					require.NoError(t, err)
					assert.Zero(t, n, "nothing is stored for bad input (held key: %v)", held)
				})
			}
		}
		t.Run("FreeKey", func(t *testing.T) { check(t, false) })
		a := newOwner()
		mustAcquire(t, p, key, a, 10*time.Second)
		t.Run("HeldKey", func(t *testing.T) { check(t, true) })
		require.NoError(t, p.Release(ctx, key, a))
	})

	t.Run("CorruptRecords", func(t *testing.T) {
		values := map[string]string{
			"Garbage":       "hello",
			"Empty":         "",
			"NoToken":       "a,b",
			"AlephaFormat":  "id,2024-01-01T00:00:00Z",
			"AlephaEnded":   "id,2024-01-01T00:00:00Z,2024-01-01T00:00:01Z",
			"BadEndedToken": "a,b,ended",
		}
		ops := func(t *testing.T, key, want string) {
			t.Helper()
			o := newOwner()
			_, err := p.Acquire(ctx, key, o, time.Second)
			assertCorrupt(t, err, key, want, "Acquire")
			assertCorrupt(t, p.Release(ctx, key, o), key, want, "Release")
			assertCorrupt(t, p.Renew(ctx, key, o, time.Second), key, want, "Update")
			assertCorrupt(t, p.Finish(ctx, key, o, time.Second), key, want, "Update(ended)")
			w := lock.Waiter{Owner: o, TTL: time.Second, Inbox: "inbox-" + o}
			_, err = p.Queue(ctx, key, w)
			assertCorrupt(t, err, key, want, "Queue")
			w.Look = lock.LookAgain
			_, err = p.Queue(ctx, key, w)
			assertCorrupt(t, err, key, want, "Queue(Again)")
			// (Acquire takes a token before it looks, so the fencing
			// counter may have moved; the corrupt value may not.)
		}
		for name, v := range values {
			t.Run(name, func(t *testing.T) {
				key := uniqueName(t)
				require.NoError(t, b.raw.Set(ctx, rawKey(key), v, 0).Err())
				t.Cleanup(func() { b.raw.Del(context.Background(), rawKey(key)) })
				ops(t, key, v)
				got, err := b.raw.Get(ctx, rawKey(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, v, got, "a corrupt record is left as it is")
				pttl, err := b.raw.PTTL(ctx, rawKey(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, time.Duration(-1), pttl, "no TTL is put on a corrupt record")
			})
		}
		t.Run("Hash", func(t *testing.T) {
			key := uniqueName(t)
			require.NoError(t, b.raw.HSet(ctx, rawKey(key), "owner", "x").Err())
			t.Cleanup(func() { b.raw.Del(context.Background(), rawKey(key)) })
			ops(t, key, "")
			got, err := b.raw.HGetAll(ctx, rawKey(key)).Result()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"owner": "x"}, got, "a hash at the record key is left as it is")
		})
	})

	t.Run("RedisKeyLayout", func(t *testing.T) {
		// A key as Client.Key makes it is stored as it is.
		name, a := uniqueName(t), newOwner()
		key := "lock:{" + name + "}"
		rk, fk := key, fenceKey(key)
		rec := mustAcquire(t, p, key, a, 10*time.Second)
		n, err := b.raw.Exists(ctx, rk, fk).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 2, n, "Acquire of K writes %q, and its slot's counter %q exists", rk, fk)
		assert.Equal(t, name, hashTag(rk), "the record key's Cluster hash tag is the name")
		assert.Equal(t, clusterSlot(rk), clusterSlot(fk), "the fencing counter %q is in the record's slot", fk)
		assert.True(t, strings.HasPrefix(fk, "lock:{") && strings.HasSuffix(fk, "}:fence"), "the counter is lock:{tag}:fence, not %q", fk)
		counter, err := b.raw.Get(ctx, fk).Uint64()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, rec.Token, uint64(1)<<52, "tokens start above 2^52")
		assert.LessOrEqual(t, rec.Token, counter, "the token came from the slot's counter")
		v, err := b.raw.Get(ctx, rk).Result()
		require.NoError(t, err)
		stored := a + "," + strconv.FormatUint(rec.Token, 10) + "," + strconv.FormatInt(rec.Since.UnixMilli(), 10)
		assert.Equal(t, stored, v, "the record is stored as owner,token,since")
		assert.WithinDuration(t, time.Now(), rec.Since, time.Minute, "since is the grant's time")
		pttl, err := b.raw.PTTL(ctx, rk).Result()
		require.NoError(t, err)
		assertTTL(t, 10*time.Second, pttl, "the record key carries the TTL")

		require.NoError(t, p.Finish(ctx, key, a, 5*time.Second))
		v, err = b.raw.Get(ctx, rk).Result()
		require.NoError(t, err)
		assert.Equal(t, stored+",ended", v, "an ended record is stored as owner,token,since,ended")

		require.NoError(t, p.Release(ctx, key, a))
		n, err = b.raw.Exists(ctx, rk).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Release deletes the record key")
		fpttl, err := b.raw.PTTL(ctx, fk).Result()
		require.NoError(t, err)
		assert.Equal(t, time.Duration(-1), fpttl, "the slot's fencing counter never expires")
		keys, err := b.raw.Keys(ctx, globEscape(key)+"*").Result()
		require.NoError(t, err)
		assert.Empty(t, keys, "nothing of the lock is left after Release")
	})
}

// TestMemoryProviderLen checks that the memory provider keeps nothing behind.
func TestMemoryProviderLen(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	m := lock.NewMemoryProvider()
	o := newOwner()
	for i := range 10 {
		mustAcquire(t, m, fmt.Sprint("k", i), o, time.Minute)
	}
	require.Equal(t, 10, m.Len())
	for i := range 5 {
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o))
	}
	for i := 5; i < 10; i++ {
		require.NoError(t, m.Finish(ctx, fmt.Sprint("k", i), o, time.Minute))
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o), "the owner can delete its ended record")
	}
	assert.Zero(t, m.Len(), "no record is left after every key was released")

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				o := newOwner()
				rec, err := m.Acquire(ctx, "shared", o, time.Minute)
				if assert.NoError(t, err) && rec.Owner == o {
					assert.NoError(t, m.Release(ctx, "shared", o))
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, m.Len(), "no record is left after concurrent acquire/release")
}

// TestMemoryProviderFakeClock expires records by moving a fake clock.
func TestMemoryProviderFakeClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clock := newFakeClock()
	m := lock.NewMemoryProvider(lock.MemoryClock(clock))
	a, o := newOwner(), newOwner()

	mustAcquire(t, m, "k", a, time.Minute)
	clock.Advance(59 * time.Second)
	h := holder(t, m, "k")
	assert.Equal(t, a, h.Owner, "the record lives until its TTL has passed")
	assert.Equal(t, time.Second, h.TTL, "the TTL is measured by the provider's clock")
	clock.Advance(time.Second)
	assert.Zero(t, m.Len(), "the record expires when the clock reaches its deadline")
	mustAcquire(t, m, "k", o, time.Minute)
	assert.ErrorIs(t, m.Release(ctx, "k", a), lock.ErrLost, "the expired owner holds nothing")

	require.NoError(t, m.Finish(ctx, "k", o, 10*time.Second))
	clock.Advance(9 * time.Second)
	rec, err := m.Acquire(ctx, "k", a, time.Minute)
	require.NoError(t, err)
	assert.True(t, rec.Ended, "the grace period lasts its TTL")
	clock.Advance(time.Second)
	rec = mustAcquire(t, m, "k", a, time.Minute)
	assert.False(t, rec.Ended, "the key is free after the grace period")

	require.NoError(t, m.Renew(ctx, "k", a, 30*24*time.Hour))
	clock.Advance(29 * 24 * time.Hour)
	assert.Equal(t, a, holder(t, m, "k").Owner, "a 30-day TTL outlives 29 days")
	clock.Advance(24 * time.Hour)
	assert.Zero(t, m.Len(), "a 30-day TTL expires after 30 days")
}

// --- helpers shared by the test files ---

func newOwner() string { return "o-" + uuid.NewString() }

// rawKey and fenceKey return the Redis keys of the record and the fencing
// counter of key.
func rawKey(key string) string {
	r, _, _, _ := lock.RedisKeys(key)
	return r
}

func fenceKey(key string) string {
	_, f, _, _ := lock.RedisKeys(key)
	return f
}

// queueKey returns the Redis key of key's wait queue.
func queueKey(key string) string {
	_, _, q, _ := lock.RedisKeys(key)
	return q
}

// canExpire reports whether b's records expire in real time. The miniredis
// backend is started without ClockTTL(true), so its TTLs never run out; a test
// that needs expiry skips the rest of itself there.
func canExpire(t *testing.T, b backend) bool {
	t.Helper()
	if b.name == "miniredis" {
		t.Log("miniredis TTLs do not run out in real time (helpers_test.go does not call ClockTTL(true)); expiry not checked")
		return false
	}
	return true
}

func mustAcquire(t testing.TB, p lock.Provider, key, owner string, ttl time.Duration) lock.Record {
	t.Helper()
	rec, err := p.Acquire(context.Background(), key, owner, ttl)
	require.NoError(t, err)
	require.Equal(t, owner, rec.Owner, "Acquire of %q by %s should have been granted", key, owner)
	require.False(t, rec.Ended)
	return rec
}

// holder returns the record that holds key, read by an Acquire of a fresh
// owner that must not be granted.
func holder(t testing.TB, p lock.Provider, key string) lock.Record {
	t.Helper()
	o := newOwner()
	rec, err := p.Acquire(context.Background(), key, o, time.Hour)
	require.NoError(t, err)
	if rec.Owner == o {
		_ = p.Release(context.Background(), key, o)
		require.FailNow(t, "key should have been held", "a probe acquired %q", key)
	}
	return rec
}

// assertTTL checks that got is want, less what a slow machine takes.
func assertTTL(t testing.TB, want, got time.Duration, msg string) {
	t.Helper()
	assert.LessOrEqual(t, got, want, msg)
	assert.Greater(t, got, want-want/10-time.Second/2, msg)
}

func assertCorrupt(t *testing.T, err error, key, value, op string) {
	t.Helper()
	if !assert.ErrorIs(t, err, lock.ErrCorruptRecord, "%s on a corrupt record reports ErrCorruptRecord", op) {
		return
	}
	var re *lock.RecordError
	if assert.ErrorAs(t, err, &re, "%s reports a *RecordError", op) {
		assert.Equal(t, key, re.Key, "%s: the RecordError names the key", op)
		if value != "" {
			assert.Equal(t, value, re.Value, "%s: the RecordError carries the stored value", op)
		}
	}
}

type rawState struct {
	value, fence string
	pttl         time.Duration
}

func readRaw(t *testing.T, b backend, key string) rawState {
	t.Helper()
	ctx := context.Background()
	var s rawState
	var err error
	s.value, err = b.raw.Get(ctx, rawKey(key)).Result()
	require.NoError(t, err)
	s.fence, err = b.raw.Get(ctx, fenceKey(key)).Result()
	require.NoError(t, err)
	s.pttl, err = b.raw.PTTL(ctx, rawKey(key)).Result()
	require.NoError(t, err)
	return s
}

// hashTag returns the part of a Redis key that Cluster hashes: between the
// first "{" and the next "}", when not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// fakeClock is a lock.Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
