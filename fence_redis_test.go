package lock_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// fencedSet sets KEYS[1] to ARGV[1] and appends ARGV[1] to the list
// KEYS[2]: the list is the order in which the writes that passed the fence
// ran.
var fencedSet = lock.NewRedisFence(`
	redis.call('SET', KEYS[1], ARGV[1])
	redis.call('RPUSH', KEYS[2], ARGV[1])
	return redis.call('LLEN', KEYS[2])
`)

// redisBackends runs fn against miniredis and the real Redis (required in
// CI), with the keys of the test removed from the real one at its end.
func redisBackends(t *testing.T, fn func(t *testing.T, b backend)) {
	eachBackend(t, func(t *testing.T, b backend) {
		if b.raw == nil {
			t.Skip("the memory provider: no Redis to write to")
		}
		fn(t, b)
	})
}

// fenceKeys returns, for a resource of the test, its fence, its data and
// its log, all with one hash tag.
func fenceKeys(t *testing.T) (fence, data, log string) {
	tag := "{" + uniqueName(t) + "}"
	return tag + ":fence", tag + ":data", tag + ":log"
}

// TestRedisFenceRejectsStaleHolder: a holder whose lock was taken from it
// (here by ForceRelease, as a lease that ran out during a pause would) and
// given to another cannot write once the other has: its write returns a
// StaleTokenError and the resource keeps the newer holder's data. The newer
// holder writes again with the same token; a third holder's greater token
// moves the mark.
func TestRedisFenceRejectsStaleHolder(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		fence, data, log := fenceKeys(t)
		name := uniqueName(t)
		cs := replicas(t, b, 3)

		a, err := cs[0].Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = cs[2].ForceRelease(ctx, name)
		require.NoError(t, err)
		bl, err := cs[1].Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the lock after A lost it")
		require.Greater(t, bl.Token(), a.Token())

		n, err := fencedSet.Run(ctx, b.raw, fence, bl.Token(), []string{data, log}, "B").Int()
		require.NoError(t, err, "B's write")
		assert.Equal(t, 1, n, "the body's reply")

		err = fencedSet.Run(ctx, b.raw, fence, a.Token(), []string{data, log}, "A").Err()
		require.ErrorIs(t, err, lock.ErrStaleToken, "A's write after B's")
		var stale *lock.StaleTokenError
		require.ErrorAs(t, err, &stale)
		assert.Equal(t, lock.StaleTokenError{Fence: fence, Token: a.Token(), Mark: bl.Token()}, *stale)
		assert.Equal(t, "B", b.raw.Get(ctx, data).Val(), "the data after A's stale write")
		assert.Equal(t, []string{"B"}, b.raw.LRange(ctx, log, 0, -1).Val(), "the writes that ran")

		n, err = fencedSet.Run(ctx, b.raw, fence, bl.Token(), []string{data, log}, "B again").Int()
		require.NoError(t, err, "B writes again with the token of the mark")
		assert.Equal(t, 2, n)
		assert.Equal(t, "B again", b.raw.Get(ctx, data).Val())
		assert.Equal(t, strconv.FormatUint(bl.Token(), 10), b.raw.Get(ctx, fence).Val(), "the mark")

		require.NoError(t, bl.Release(ctx))
		c, err := cs[2].Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		require.NoError(t, fencedSet.Run(ctx, b.raw, fence, c.Token(), []string{data, log}, "C").Err())
		assert.Equal(t, strconv.FormatUint(c.Token(), 10), b.raw.Get(ctx, fence).Val(), "the mark after a greater token")
		assert.ErrorIs(t, fencedSet.Run(ctx, b.raw, fence, bl.Token(), []string{data, log}, "B late").Err(), lock.ErrStaleToken)
		assert.Equal(t, "C", b.raw.Get(ctx, data).Val())
		require.NoError(t, c.Release(ctx))
		assert.ErrorIs(t, a.Release(ctx), lock.ErrLost, "A's release")
	})
}

// TestRedisFenceConcurrentTokens has goroutines write with tokens handed
// out in a random order, so that lower and higher tokens interleave: the
// writes that pass the fence run in an order of non-decreasing tokens (no
// lower token overwrites a higher one), the greatest token always passes,
// every refused token is below the mark it was refused by, and the data is
// the last write's.
func TestRedisFenceConcurrentTokens(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		fence, data, log := fenceKeys(t)
		const goroutines, writes = 8, 400 // a multiple of 16
		// Tokens near 2^53, where Lua's numbers lose precision, and across
		// a change in the number of digits.
		base := uint64(1<<53) - writes/2
		refused := testenv.RaceTokens(t, goroutines, writes, base, func(_ int, tok uint64) error {
			return fencedSet.Run(ctx, b.raw, fence, tok, []string{data, log}, strconv.FormatUint(tok, 10)).Err()
		})

		ran := b.raw.LRange(ctx, log, 0, -1).Val()
		require.NotEmpty(t, ran)
		assert.Equal(t, writes, len(ran)+refused, "writes that ran plus writes refused")
		prev := uint64(0)
		for i, s := range ran {
			tok, err := strconv.ParseUint(s, 10, 64)
			require.NoError(t, err)
			if tok < prev {
				t.Fatalf("write %d of %d ran with token %d after token %d had written", i, len(ran), tok, prev)
			}
			prev = tok
		}
		last := strconv.FormatUint(base+writes-1, 10)
		assert.Equal(t, last, ran[len(ran)-1], "the last write that ran: the greatest token")
		assert.Equal(t, last, b.raw.Get(ctx, data).Val(), "the data")
		assert.Equal(t, last, b.raw.Get(ctx, fence).Val(), "the mark")
		t.Logf("%d writes ran, %d refused", len(ran), refused)
	})
}

// TestRedisFenceComparesExactly: tokens compare as numbers, exactly, where
// Lua's numbers cannot (above 2^53) and where strings would not (9 and 10).
func TestRedisFenceComparesExactly(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		for _, c := range []struct{ mark, token uint64 }{
			{10, 9},
			{1<<53 + 1, 1 << 53},
			{math.MaxUint64, math.MaxUint64 - 1},
			{1e19, 9999999999999999999},
		} {
			fence, data, log := fenceKeys(t)
			require.NoError(t, fencedSet.Run(ctx, b.raw, fence, c.mark, []string{data, log}, "new").Err(), "mark %d", c.mark)
			err := fencedSet.Run(ctx, b.raw, fence, c.token, []string{data, log}, "stale").Err()
			assert.ErrorIs(t, err, lock.ErrStaleToken, "token %d after mark %d", c.token, c.mark)
			var stale *lock.StaleTokenError
			if assert.ErrorAs(t, err, &stale) {
				assert.Equal(t, c.mark, stale.Mark)
			}
			assert.NoError(t, fencedSet.Run(ctx, b.raw, fence, c.mark, []string{data, log}, "same").Err(), "the mark's own token %d", c.mark)
			assert.Equal(t, "same", b.raw.Get(ctx, data).Val())
		}
	})
}

// TestRedisFenceSlots: the fence and the body's keys must share a hash
// slot, on every client: a key in another slot is refused before anything
// is sent; keys with the fence's hash tag pass.
func TestRedisFenceSlots(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := ctxTimeout(t, 10*time.Second)
	set := lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)

	for _, c := range []struct {
		fence string
		keys  []string
	}{
		{"fence", []string{"data"}},
		{"{a}:fence", []string{"{b}:data"}},
		{"{a}:fence", []string{"{a}:data", "{b}:data"}},
		{"{a}:fence", []string{"a:data"}},     // hashes "a:data", not "a"
		{"{}:fence", []string{"{}:data"}},     // an empty tag is no tag: the whole keys hash
		{"a{b}:fence", []string{"{a}b:data"}}, // the first tag counts
	} {
		err := set.Run(ctx, rdb, c.fence, 7, c.keys, "v").Err()
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "fence %q, keys %q", c.fence, c.keys)
	}
	assert.Empty(t, mr.Keys(), "the refused writes sent nothing")

	for _, c := range []struct {
		fence string
		keys  []string
	}{
		{"{a}:fence", []string{"{a}:data"}},
		{"order:{42}:fence", []string{"order:{42}", "{42}"}},
		{"{a}b:fence", []string{"x{a}"}},
	} {
		assert.NoError(t, set.Run(ctx, rdb, c.fence, 7, c.keys, "v").Err(), "fence %q, keys %q", c.fence, c.keys)
	}
	assert.Equal(t, "v", rdb.Get(ctx, "order:{42}").Val(), "a write that passed")
}

// TestRedisFenceMisuse: an empty fence key and token 0 are refused before
// anything is sent; a fence that holds something else than a token is a
// RecordError and stays as it is; a body's error comes back as it is, with
// the mark moved (Redis does not roll a script back); an empty body only
// moves the mark.
func TestRedisFenceMisuse(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		fence, data, log := fenceKeys(t)

		assert.ErrorIs(t, fencedSet.Run(ctx, b.raw, "", 7, nil).Err(), lock.ErrInvalidArgument, "empty fence key")
		assert.ErrorIs(t, fencedSet.Run(ctx, b.raw, fence, 0, []string{data, log}, "v").Err(), lock.ErrInvalidArgument, "token 0")
		assert.Zero(t, b.raw.Exists(ctx, fence, data, log).Val(), "keys after refused calls")

		for _, v := range []string{"not a token", "07", "18446744073709551616", ""} {
			require.NoError(t, b.raw.Set(ctx, fence, v, 0).Err())
			err := fencedSet.Run(ctx, b.raw, fence, 7, []string{data, log}, "v").Err()
			var rec *lock.RecordError
			if assert.ErrorAs(t, err, &rec, "fence holding %q", v) {
				assert.Equal(t, lock.RecordError{Key: fence, Value: v}, *rec)
			}
			assert.ErrorIs(t, err, lock.ErrCorruptRecord)
			assert.Equal(t, v, b.raw.Get(ctx, fence).Val(), "the fence is left as it was")
		}
		assert.Zero(t, b.raw.Exists(ctx, data, log).Val(), "nothing written behind a corrupt fence")
		require.NoError(t, b.raw.Del(ctx, fence).Err())

		require.NoError(t, b.raw.Set(ctx, data, "not a number", 0).Err())
		incr := lock.NewRedisFence(`return redis.call('INCR', KEYS[1])`)
		err := incr.Run(ctx, b.raw, fence, 9, []string{data}).Err()
		require.Error(t, err, "INCR of a string")
		assert.NotErrorIs(t, err, lock.ErrStaleToken)
		assert.Equal(t, "9", b.raw.Get(ctx, fence).Val(), "the mark after the body's error")
		require.NoError(t, b.raw.Set(ctx, data, "41", 0).Err())
		n, err := incr.Run(ctx, b.raw, fence, 9, []string{data}).Int()
		require.NoError(t, err)
		assert.Equal(t, 42, n, "the body's reply")

		cmd := lock.NewRedisFence("").Run(ctx, b.raw, fence, 10, nil)
		require.NoError(t, cmd.Err(), "an empty body: its nil reply is no error")
		assert.Nil(t, cmd.Val())
		assert.Equal(t, "10", b.raw.Get(ctx, fence).Val(), "the mark after an empty body")
		assert.ErrorIs(t, incr.Run(ctx, b.raw, fence, 9, []string{data}).Err(), lock.ErrStaleToken, "token 9 after an empty body with 10")
		assert.Equal(t, "42", b.raw.Get(ctx, data).Val())

		// The body's own KEYS and ARGV, without the fence and the token.
		echo := lock.NewRedisFence(`return {#KEYS, #ARGV, KEYS[1], ARGV[1], ARGV[2]}`)
		v, err := echo.Run(ctx, b.raw, fence, 10, []string{data}, "x", "y").Slice()
		require.NoError(t, err)
		assert.Equal(t, []any{int64(1), int64(2), data, "x", "y"}, v)
	})
}

// TestRedisFenceWithDo: a holder paused past its MaxDuration inside Do
// (the lock's context ended; it writes with a context of its own, as code
// that does not look at the lock's context would) is refused once the next
// holder, who waited for the lock, has written.
func TestRedisFenceWithDo(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		if !canExpire(t, b) {
			return // A's lock would not end at its MaxDuration
		}
		ctx := ctxTimeout(t, 20*time.Second)
		fence, data, log := fenceKeys(t)
		name := uniqueName(t)
		cs := replicas(t, b, 2, lock.WithPollInterval(20*time.Millisecond))

		var stale error
		held, written := make(chan struct{}), make(chan struct{})
		errA := make(chan error, 1)
		go func() {
			errA <- cs[0].Do(ctx, name, lock.Options{MaxDuration: 300 * time.Millisecond}, func(hctx context.Context) error {
				l, _ := lock.FromContext(hctx)
				close(held)
				<-written // paused until the next holder has written
				stale = fencedSet.Run(ctx, b.raw, fence, l.Token(), []string{data, log}, "A").Err()
				return stale
			})
		}()
		<-held
		err := cs[1].Do(ctx, name, lock.Options{Wait: true}, func(hctx context.Context) error {
			l, _ := lock.FromContext(hctx)
			return fencedSet.Run(hctx, b.raw, fence, l.Token(), []string{data, log}, "B").Err()
		})
		require.NoError(t, err, "B's Do")
		close(written)
		err = <-errA
		assert.ErrorIs(t, err, lock.ErrStaleToken, "A's Do")
		assert.ErrorIs(t, err, lock.ErrLost, "A's Do")
		assert.ErrorIs(t, stale, lock.ErrStaleToken, "A's write")
		assert.Equal(t, "B", b.raw.Get(ctx, data).Val())
	})
}

// BenchmarkRedisFence is the cost of a fenced SET on the real Redis.
func BenchmarkRedisFence(b *testing.B) {
	rdb := realRedis(b)
	ctx := context.Background()
	tag := fmt.Sprintf("{BenchmarkRedisFence:%d}", rand.Int())
	b.Cleanup(func() { rdb.Del(context.Background(), tag+":fence", tag+":data", tag+":log") })
	set := lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)
	b.ReportAllocs()
	for i := range b.N {
		if err := set.Run(ctx, rdb, tag+":fence", uint64(i+1), []string{tag + ":data"}, "v").Err(); err != nil {
			b.Fatal(err)
		}
	}
}
