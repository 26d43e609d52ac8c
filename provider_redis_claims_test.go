package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// The Redis provider's counted names (provider_redis_claims.go,
// scripts/claim*.lua), on miniredis and real Redis: what a claim call
// grants, queues, serves and tells, and what it leaves in Redis.

// eachRedisBackend runs fn against the miniredis and real Redis backends,
// with a context that ends after 20 s, a provider on the backend and a key
// of the test's own.
func eachRedisBackend(t *testing.T, fn func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string)) {
	eachBackend(t, func(t *testing.T, b backend) {
		if b.raw == nil {
			t.Skip("the memory provider's claims are tested with it")
		}
		fn(t, ctxTimeout(t, 20*time.Second), b, b.replica(t), uniqueName(t))
	})
}

// inbox is a Listen's grants, in a channel.
type inbox struct {
	name   string
	grants chan lock.Notice
}

// listen listens on a new inbox through p until the test ends.
func listen(t *testing.T, p lock.Provider) *inbox {
	t.Helper()
	in := &inbox{name: "inbox:" + uniqueName(t), grants: make(chan lock.Notice, 64)}
	stop, err := p.Listen(context.Background(), in.name, func(g lock.Notice) { in.grants <- g })
	require.NoError(t, err)
	t.Cleanup(stop)
	return in
}

// next returns the inbox's next grant, or fails the test after 5 s.
func (in *inbox) next(t *testing.T) lock.Notice {
	t.Helper()
	select {
	case g := <-in.grants:
		return g
	case <-time.After(5 * time.Second):
		t.Fatalf("no grant on %s within 5s", in.name)
		return lock.Notice{}
	}
}

// quiet checks that no grant arrived on the inbox for a while.
func (in *inbox) quiet(t *testing.T) {
	t.Helper()
	select {
	case g := <-in.grants:
		t.Fatalf("unexpected grant on %s: %+v", in.name, g)
	case <-time.After(100 * time.Millisecond):
	}
}

// claimOf returns a claim of weight out of limit for a new owner, waiting on
// in (when given).
func claimOf(weight, limit int, ttl time.Duration, in *inbox) lock.Claim {
	c := lock.Claim{Owner: newOwner(), Weight: weight, Limit: limit, Kind: lock.KindSemaphore, TTL: ttl}
	if in != nil {
		c.Inbox = in.name
	}
	return c
}

// mustClaim takes c on key, or fails the test.
func mustClaim(t *testing.T, p lock.Provider, key string, c lock.Claim) lock.Record {
	t.Helper()
	rec, err := p.AcquireClaim(context.Background(), key, c)
	require.NoError(t, err)
	require.Equal(t, c.Owner, rec.Owner, "claim of weight %d on %q: %+v", c.Weight, key, rec)
	return rec
}

// mustQueue queues c on key, or fails the test, and returns its place.
func mustQueue(t *testing.T, p lock.Provider, key string, c lock.Claim) int {
	t.Helper()
	rec, err := p.QueueClaim(context.Background(), key, c)
	require.NoError(t, err)
	require.True(t, rec.Queued, "claim of weight %d on %q should queue: %+v", c.Weight, key, rec)
	return rec.Position
}

// claimKeys returns the Redis keys of key's counted name that exist: its
// claims, its queue, and its mark in the record key.
func claimKeys(t *testing.T, rc redis.UniversalClient, key string) []string {
	t.Helper()
	var found []string
	for _, suffix := range []string{":c", ":cq"} {
		k := rawKey(key) + suffix
		n, err := rc.Exists(context.Background(), k).Result()
		require.NoError(t, err)
		if n > 0 {
			found = append(found, k)
		}
	}
	v, err := rc.Get(context.Background(), rawKey(key)).Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
		if strings.HasPrefix(v, "counted ") {
			found = append(found, rawKey(key))
		}
	}
	return found
}

func TestRedisClaimsFitAndRelease(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		a := claimOf(2, 3, time.Minute, nil)
		rec := mustClaim(t, p, key, a)
		assert.Equal(t, 3, rec.Limit)
		assert.Equal(t, 2, rec.Used)
		assert.Equal(t, time.Minute, rec.TTL)
		assert.NotZero(t, rec.Token)
		assert.WithinDuration(t, time.Now(), rec.Since, 2*time.Second)

		// Does not fit: the claim that expires first is shown.
		bc := claimOf(2, 3, time.Minute, nil)
		rec, err := p.AcquireClaim(ctx, key, bc)
		require.NoError(t, err)
		assert.Equal(t, a.Owner, rec.Owner)
		assert.Equal(t, 2, rec.Used)
		assert.False(t, rec.Queued)

		// Fits.
		c := claimOf(1, 3, 30*time.Second, nil)
		rc := mustClaim(t, p, key, c)
		assert.Equal(t, 3, rc.Used)

		// Again by its owner (a lost reply): the same claim, its TTL reset.
		again := mustClaim(t, p, key, c)
		assert.Equal(t, rc.Token, again.Token)
		assert.Equal(t, 30*time.Second, again.TTL)

		cs, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, 3, cs.Limit)
		require.Len(t, cs.Holders, 2)
		assert.Equal(t, []string{a.Owner, c.Owner}, []string{cs.Holders[0].Owner, cs.Holders[1].Owner}, "in grant order")
		assert.Equal(t, []int{2, 1}, cs.Weights)

		// Strangers lose; nothing changes.
		var lost *lock.LostError
		require.ErrorAs(t, p.RenewClaim(ctx, key, bc.Owner, time.Minute), &lost)
		assert.Equal(t, key, lost.Key)
		require.ErrorAs(t, p.ReleaseClaim(ctx, key, bc.Owner), &lost)
		require.ErrorAs(t, p.LowerClaim(ctx, key, bc.Owner, 1), &lost)
		require.ErrorAs(t, p.ReleaseClaim(ctx, uniqueName(t), bc.Owner), &lost)

		require.NoError(t, p.RenewClaim(ctx, key, a.Owner, time.Hour))
		require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
		require.ErrorAs(t, p.ReleaseClaim(ctx, key, a.Owner), &lost, "released twice")
		require.NoError(t, p.ReleaseClaim(ctx, key, c.Owner))

		cs, err = p.InspectClaims(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, lock.Claims{}, cs)
		assert.Empty(t, claimKeys(t, b.raw, key), "nothing left behind")
	})
}

func TestRedisClaimsQueueInOrder(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		in := listen(t, p)
		a := mustClaim(t, p, key, claimOf(2, 3, time.Minute, nil))
		holder := a.Owner

		// The head does not fit; the one behind it would, but never
		// overtakes it; nor does an acquirer.
		q1 := claimOf(2, 3, 40*time.Second, in)
		q2 := claimOf(1, 3, 50*time.Second, in)
		assert.Equal(t, 0, mustQueue(t, p, key, q1))
		assert.Equal(t, 1, mustQueue(t, p, key, q2))
		rec, err := p.AcquireClaim(ctx, key, claimOf(1, 3, time.Minute, nil))
		require.NoError(t, err)
		assert.NotEqual(t, "", rec.Owner)
		assert.Equal(t, holder, rec.Owner, "not granted past the queue")
		q1.Look = lock.LookAgain
		assert.Equal(t, 0, mustQueue(t, p, key, q1), "a look again keeps its place")

		cs, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)
		require.Len(t, cs.Queue, 2)
		q1.Look = 0
		assert.Equal(t, []lock.Claim{q1, q2}, cs.Queue)

		list := map[string]lock.Record{}
		require.NoError(t, p.List(ctx, key, func(k string, r lock.Record, err error) bool {
			require.NoError(t, err)
			list[k] = r
			return true
		}))
		require.Contains(t, list, key)
		assert.Equal(t, 3, list[key].Limit)
		assert.Equal(t, 2, list[key].Used)
		assert.Equal(t, 2, list[key].Waiters)
		assert.Empty(t, list[key].Owner)
		assertTTL(t, time.Minute, list[key].TTL, "the longest TTL left")

		// The release serves both, in order, each with its weight and TTL.
		require.NoError(t, p.ReleaseClaim(ctx, key, holder))
		g1, g2 := in.next(t), in.next(t)
		assert.Equal(t, lock.Notice{Key: key, Owner: q1.Owner, Token: g1.Token, TTL: q1.TTL, Weight: 2}, g1)
		assert.Equal(t, lock.Notice{Key: key, Owner: q2.Owner, Token: g2.Token, TTL: q2.TTL, Weight: 1}, g2)
		assert.Greater(t, g2.Token, g1.Token)
		assert.Greater(t, g1.Token, a.Token)

		// Their looks find the claims theirs.
		q2.Look = lock.LookAgain
		rec, err = p.QueueClaim(ctx, key, q2)
		require.NoError(t, err)
		assert.Equal(t, q2.Owner, rec.Owner)
		assert.Equal(t, g2.Token, rec.Token)
		assert.False(t, rec.Queued)
		assert.Equal(t, 3, rec.Used)

		require.NoError(t, p.ReleaseClaim(ctx, key, q1.Owner))
		require.NoError(t, p.ReleaseClaim(ctx, key, q2.Owner))
		assert.Empty(t, claimKeys(t, b.raw, key), "nothing left behind")
		in.quiet(t)
	})
}

func TestRedisClaimsServedByLeaveLowerAndExpiry(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		in := listen(t, p)

		// A writer holds all 4; a writer waits, readers behind it.
		w := mustClaim(t, p, key, claimOf(4, 4, time.Minute, nil))
		w2 := claimOf(4, 4, time.Minute, in)
		r1 := claimOf(1, 4, time.Minute, in)
		r2 := claimOf(1, 4, time.Minute, in)
		mustQueue(t, p, key, w2)
		mustQueue(t, p, key, r1)
		mustQueue(t, p, key, r2)

		// The waiting writer leaves: the readers are next, and still wait.
		require.NoError(t, p.LeaveClaim(ctx, key, w2))
		in.quiet(t)

		// The writer becomes a reader: both readers fit now.
		require.NoError(t, p.LowerClaim(ctx, key, w.Owner, 1))
		got := map[string]int{}
		for range 2 {
			g := in.next(t)
			got[g.Owner] = g.Weight
		}
		assert.Equal(t, map[string]int{r1.Owner: 1, r2.Owner: 1}, got)
		cs, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, []int{1, 1, 1}, cs.Weights)
		assert.Equal(t, w.Token, cs.Holders[0].Token, "lowered, its token kept")

		// A claim that expires by the server's clock frees its weight for
		// the queue, served by the next call.
		for _, o := range []string{w.Owner, r1.Owner, r2.Owner} {
			require.NoError(t, p.ReleaseClaim(ctx, key, o))
		}
		short := mustClaim(t, p, key, claimOf(4, 4, 200*time.Millisecond, nil))
		next := claimOf(3, 4, time.Minute, in)
		mustQueue(t, p, key, next)
		time.Sleep(300 * time.Millisecond)
		var lost *lock.LostError
		require.ErrorAs(t, p.RenewClaim(ctx, key, short.Owner, time.Minute), &lost, "expired")
		g := in.next(t)
		assert.Equal(t, next.Owner, g.Owner)
		assert.Equal(t, 3, g.Weight)

		// A granted waiter that leaves (it gave up) releases its claim.
		require.NoError(t, p.LeaveClaim(ctx, key, next))
		assert.Empty(t, claimKeys(t, b.raw, key), "nothing left behind")
	})
}

func TestRedisClaimsLimitMismatchChangesNothing(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		in := listen(t, p)
		a := mustClaim(t, p, key, claimOf(1, 3, time.Minute, nil))
		before, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)

		rec, err := p.AcquireClaim(ctx, key, claimOf(1, 5, time.Minute, nil))
		require.NoError(t, err)
		assert.Equal(t, lock.Record{Owner: a.Owner, Token: a.Token, TTL: rec.TTL, Limit: 3, Used: 1, Kind: lock.KindSemaphore}, rec)
		rec, err = p.QueueClaim(ctx, key, claimOf(1, 5, time.Minute, in))
		require.NoError(t, err)
		assert.False(t, rec.Queued)
		assert.Equal(t, 3, rec.Limit)
		rec, err = p.AcquireClaim(ctx, key, lock.Claim{Owner: a.Owner, Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, 3, rec.Limit)

		after, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, before.Limit, after.Limit)
		assert.Equal(t, before.Weights, after.Weights)
		assert.Empty(t, after.Queue)
		assert.LessOrEqual(t, after.Holders[0].TTL, before.Holders[0].TTL, "not renewed")

		// Once it holds nothing, another limit is the name's.
		require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
		rec = mustClaim(t, p, key, claimOf(5, 5, time.Minute, nil))
		assert.Equal(t, 5, rec.Limit)
	})
}

// TestRedisClaimTokensFollowTheLocks: a claim's token comes from the
// counter of the lock of the same key, above every earlier grant's. While
// the name holds the claim, its record key holds the name's mark: a lock's
// Acquire finds the key taken and is told the name's kind, and List lists
// the key once, as the counted name (issue 38). The mark goes with the
// name's last claim.
func TestRedisClaimTokensFollowTheLocks(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		l := mustAcquire(t, p, key, newOwner(), time.Minute)
		require.NoError(t, p.Release(ctx, key, l.Owner))
		c := mustClaim(t, p, key, claimOf(1, 1, time.Minute, nil))
		assert.Greater(t, c.Token, l.Token)

		v, err := b.raw.Get(ctx, rawKey(key)).Result()
		require.NoError(t, err)
		assert.Equal(t, "counted semaphore", v, "the name's mark")
		ttl, err := b.raw.PTTL(ctx, rawKey(key)).Result()
		require.NoError(t, err)
		cttl, err := b.raw.PTTL(ctx, rawKey(key)+":c").Result()
		require.NoError(t, err)
		assert.Equal(t, cttl.Round(time.Second), ttl.Round(time.Second), "the mark expires with the name's keys")
		rec, err := p.Acquire(ctx, key, newOwner(), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, lock.KindSemaphore, rec.Kind, "a lock is refused: %+v", rec)
		assert.Empty(t, rec.Owner)
		ins, err := p.Inspect(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, lock.Record{}, ins, "no lock's record")
		var seen []lock.Record
		require.NoError(t, p.List(ctx, key, func(k string, r lock.Record, err error) bool {
			require.NoError(t, err)
			assert.Equal(t, key, k)
			seen = append(seen, r)
			return true
		}))
		if assert.Len(t, seen, 1, "listed once, as the counted name") {
			assert.Equal(t, lock.Record{Limit: 1, Used: 1, TTL: seen[0].TTL, Kind: lock.KindSemaphore}, seen[0])
		}

		require.NoError(t, p.ReleaseClaim(ctx, key, c.Owner))
		assert.Empty(t, claimKeys(t, b.raw, key), "the mark went with the last claim")
		l2 := mustAcquire(t, p, key, newOwner(), time.Minute)
		assert.Greater(t, l2.Token, c.Token)
		require.NoError(t, p.Release(ctx, key, l2.Owner))
	})
}

// TestRedisClaimsCorrupt: a stored value that is not the scripts' is a
// RecordError, and nothing is written.
func TestRedisClaimsCorrupt(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		a := claimOf(1, 3, time.Minute, nil)
		mustClaim(t, p, key, a)
		require.NoError(t, b.raw.HSet(ctx, rawKey(key)+":c", a.Owner, "junk").Err())
		var rerr *lock.RecordError
		_, err := p.AcquireClaim(ctx, key, a)
		require.ErrorAs(t, err, &rerr)
		assert.Equal(t, "junk", rerr.Value)
		_, err = p.InspectClaims(ctx, key)
		require.ErrorAs(t, err, &rerr)
		require.NoError(t, b.raw.HSet(ctx, rawKey(key)+":c", a.Owner, "1,1,1,9999999999999").Err())
		require.NoError(t, b.raw.HSet(ctx, rawKey(key)+":c", " kind", "Semaphore 2").Err())
		_, err = p.AcquireClaim(ctx, key, a)
		require.ErrorAs(t, err, &rerr, "a kind that is not one")
		assert.Equal(t, "Semaphore 2", rerr.Value)

		other := uniqueName(t)
		require.NoError(t, b.raw.Set(ctx, rawKey(other)+":c", "a string", time.Minute).Err())
		_, err = p.AcquireClaim(ctx, other, a)
		require.ErrorAs(t, err, &rerr)

		// The name's block of tokens (see scripts/claim.lua).
		third := uniqueName(t)
		c := claimOf(1, 3, time.Minute, nil)
		mustClaim(t, p, third, c)
		for _, v := range []string{
			"junk", "12 11", "0 5", "5", "5 9", // not "last max size"
			"12 11 4",                             // last above max
			"5 100 8",                             // more left than the block's size
			"5 10 2000",                           // a block larger than 1,024
			"9007199254740993 9007199254740999 8", // beyond 2^53: Lua's numbers would repeat tokens
		} {
			require.NoError(t, b.raw.HSet(ctx, rawKey(third)+":c", " tok", v).Err())
			_, err = p.AcquireClaim(ctx, third, claimOf(1, 3, time.Minute, nil))
			require.ErrorAs(t, err, &rerr, "tok %q", v)
			assert.Equal(t, v, rerr.Value)
		}
		cs, err := p.InspectClaims(ctx, third)
		require.NoError(t, err)
		require.Len(t, cs.Holders, 1, "nothing written")
		assert.Equal(t, c.Owner, cs.Holders[0].Owner)

		// A waiter's entry and the head's weight carry their deadline
		// (issue 38): without it, or with one that is not a number, they
		// are not the scripts'.
		fourth := uniqueName(t)
		in := listen(t, p)
		h, w := claimOf(2, 2, time.Minute, nil), claimOf(2, 2, time.Minute, in)
		mustClaim(t, p, fourth, h)
		mustQueue(t, p, fourth, w)
		for field, v := range map[string]string{
			" hw":           "2",
			" w " + w.Owner: w.Owner + " 2 60000 " + in.name,
		} {
			good, err := b.raw.HGet(ctx, rawKey(fourth)+":c", field).Result()
			require.NoError(t, err, "field %q", field)
			require.NoError(t, b.raw.HSet(ctx, rawKey(fourth)+":c", field, v).Err())
			_, err = p.QueueClaim(ctx, fourth, w)
			require.ErrorAs(t, err, &rerr, "field %q: %q", field, v)
			assert.Equal(t, v, rerr.Value)
			require.NoError(t, b.raw.HSet(ctx, rawKey(fourth)+":c", field, good).Err())
		}
		require.NoError(t, p.LeaveClaim(ctx, fourth, w))
		require.NoError(t, p.ReleaseClaim(ctx, fourth, h.Owner))
	})
}

// TestRedisClaimTokensInBlocks: a counted name takes its tokens from the
// slot's counter in blocks (1, 2, 4... 1,024) and grants them in turn; they strictly
// increase across blocks, across the name's keys going and coming back, and
// against the locks of its slot's counter before and after.
func TestRedisClaimTokensInBlocks(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		lo := newOwner()
		before, err := p.Acquire(ctx, key, lo, time.Minute)
		require.NoError(t, err)
		require.NoError(t, p.Release(ctx, key, lo))
		last := before.Token
		// One claim keeps the keys alive while 150 others come and go.
		keep := claimOf(1, 2, time.Minute, nil)
		rec := mustClaim(t, p, key, keep)
		require.Greater(t, rec.Token, last)
		last = rec.Token
		for i := range 150 {
			c := claimOf(1, 2, time.Minute, nil)
			rec := mustClaim(t, p, key, c)
			require.Greater(t, rec.Token, last, "grant %d", i)
			last = rec.Token
			require.NoError(t, p.ReleaseClaim(ctx, key, c.Owner))
		}
		require.NoError(t, p.ReleaseClaim(ctx, key, keep.Owner))
		n, err := b.raw.Exists(ctx, rawKey(key)+":c").Result()
		require.NoError(t, err)
		require.Zero(t, n, "the name's keys went with its last claim")
		rec = mustClaim(t, p, key, keep)
		assert.Greater(t, rec.Token, last, "a new block, above the last one's")
		last = rec.Token
		require.NoError(t, p.ReleaseClaim(ctx, key, keep.Owner))
		after, err := p.Acquire(ctx, key, lo, time.Minute)
		require.NoError(t, err)
		assert.Greater(t, after.Token, last, "a lock taken after the claims")
		require.NoError(t, p.Release(ctx, key, lo))
	})
}

// TestRedisClaimCommands counts the Redis commands of an uncontended
// AcquireClaim and ReleaseClaim on a server of the test's own (INFO
// commandstats): two scripts and 8 commands in them, the same at every
// limit.
func TestRedisClaimCommands(t *testing.T) {
	rc, p := ownRedis(t)
	ctx := ctxTimeout(t, 20*time.Second)
	for _, limit := range []int{1, 16, 1024} {
		key := uniqueName(t)
		c := claimOf(1, limit, time.Minute, nil)
		// Warm: the scripts' digests are learned, the counter made.
		mustClaim(t, p, key, c)
		require.NoError(t, p.ReleaseClaim(ctx, key, c.Owner))
		// Others hold claims of the name, for limits above 1.
		for range min(limit-1, 100) {
			mustClaim(t, p, key, claimOf(1, limit, time.Minute, nil))
		}
		require.NoError(t, rc.ConfigResetStat(ctx).Err())
		c = claimOf(1, limit, time.Minute, nil)
		mustClaim(t, p, key, c)
		require.NoError(t, p.ReleaseClaim(ctx, key, c.Owner))
		stats := commandStats(t, ctx, rc)
		scripts := stats["evalsha"] + stats["eval"]
		delete(stats, "evalsha")
		delete(stats, "eval")
		delete(stats, "config|resetstat")
		delete(stats, "config")
		total := 0
		for _, n := range stats {
			total += n
		}
		t.Logf("limit %d: %d scripts, %d commands in them: %v", limit, scripts, total, stats)
		assert.Equal(t, 2, scripts)
		// TIME, HMGET, INCR (the first token of the name's new keys),
		// SET NX of the name's mark in its record key (issue 38: one
		// name, one kind), HSET, PEXPIREAT; TIME, HMGET, DEL when alone;
		// TIME, HMGET, HSET (a token of the name's block) and TIME, HMGET,
		// HDEL, HSET beside others (whose claims' expiry covers the new
		// one's): 9 to 11 commands a hold with the scripts, at most 12.
		assert.LessOrEqual(t, total, 9)
		if limit == 1 {
			assert.Equal(t, 1, stats["set"], "the name's mark, once, as the name is made")
		}
	}
}

// ownRedis starts a Redis of the test's own (what the test counts or
// breaks is nobody else's) and returns its client and a provider on it.
func ownRedis(t *testing.T) (*redis.Client, lock.Provider) {
	t.Helper()
	srv := faults.StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	return rc, lock.NewRedisProvider(rc)
}

// commandStats returns the calls of each command since the last CONFIG
// RESETSTAT.
func commandStats(t *testing.T, ctx context.Context, rc *redis.Client) map[string]int {
	t.Helper()
	info, err := rc.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	stats := map[string]int{}
	for _, line := range strings.Split(info, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, rest, _ := strings.Cut(rest, ":calls=")
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.Atoi(calls)
		require.NoError(t, err)
		if name != "info" {
			stats[name] = n
		}
	}
	return stats
}

// TestRedisClaimsOnACluster: the claims of names on every node of a
// Cluster of three, their grants sent with SPUBLISH on the waiter's shard
// channel, and List over every primary.
func TestRedisClaimsOnACluster(t *testing.T) {
	addrs := startClaimsCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	p := lock.NewRedisProvider(cc)
	ctx := ctxTimeout(t, 30*time.Second)
	in := listen(t, p)
	byNode := map[string]string{}
	for i := 0; len(byNode) < len(addrs) && i < 1000; i++ {
		key := lock.DefaultPrefix + "{" + uniqueName(t) + "-" + strconv.Itoa(i) + "}"
		node, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		if byNode[node.Options().Addr] == "" {
			byNode[node.Options().Addr] = key
		}
	}
	require.Len(t, byNode, len(addrs))
	for node, key := range byNode {
		a := mustClaim(t, p, key, claimOf(2, 2, time.Minute, nil))
		w := claimOf(1, 2, time.Minute, in)
		mustQueue(t, p, key, w)
		require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
		g := in.next(t)
		assert.Equal(t, lock.Notice{Key: key, Owner: w.Owner, Token: g.Token, TTL: time.Minute, Weight: 1}, g, "on %s", node)
		assert.Greater(t, g.Token, a.Token)
	}
	seen := map[string]lock.Record{}
	require.NoError(t, p.List(ctx, lock.DefaultPrefix, func(k string, r lock.Record, err error) bool {
		require.NoError(t, err)
		seen[k] = r
		return true
	}))
	for _, key := range byNode {
		assert.Equal(t, lock.Record{Limit: 2, Used: 1, TTL: seen[key].TTL, Kind: lock.KindSemaphore}, seen[key], key)
	}
}

// startClaimsCluster starts a Redis Cluster of three primaries of the
// test's own and returns their addresses.
func startClaimsCluster(t *testing.T) []string {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	var addrs []string
	var clients []*redis.Client
	for range 3 {
		bus, err := faults.FreePort()
		require.NoError(t, err)
		srv := faults.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus))
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = rc.Close() })
		addrs, clients = append(addrs, srv.Addr), append(clients, rc)
	}
	per := 16384 / len(addrs)
	for i, rc := range clients {
		last := (i+1)*per - 1
		if i == len(clients)-1 {
			last = 16383
		}
		require.NoError(t, rc.ClusterAddSlotsRange(ctx, i*per, last).Err())
	}
	for _, rc := range clients[1:] {
		bus, err := rc.ConfigGet(ctx, "cluster-port").Result()
		require.NoError(t, err)
		host, port, _ := strings.Cut(rc.Options().Addr, ":")
		require.NoError(t, clients[0].Do(ctx, "cluster", "meet", host, port, bus["cluster-port"]).Err())
	}
	for _, rc := range clients {
		for {
			info, err := rc.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("cluster not ok: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return addrs
}

// TestRedisClaimGrantConfirmedByRenewClaim: with WaitForReplicas, a claim
// granted from the queue is confirmed by the claim's renewal (not the
// lock's, which would find no record and drop the grant) before it is
// delivered.
func TestRedisClaimGrantConfirmedByRenewClaim(t *testing.T) {
	primary := faults.StartRedis(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	faults.StartRedis(t, "--replicaof", host, port)
	rc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := ctxTimeout(t, 20*time.Second)
	for {
		info, err := rc.Info(ctx, "replication").Result()
		require.NoError(t, err)
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := lock.NewRedisProvider(rc, lock.WaitForReplicas(1, time.Second))
	key := uniqueName(t)
	in := listen(t, p)
	a := mustClaim(t, p, key, claimOf(1, 1, time.Minute, nil))
	w := claimOf(1, 1, 5*time.Second, in)
	mustQueue(t, p, key, w)
	require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
	g := in.next(t)
	assert.Equal(t, w.Owner, g.Owner)
	assert.Equal(t, 1, g.Weight)
	cs, err := p.InspectClaims(ctx, key)
	require.NoError(t, err)
	require.Len(t, cs.Holders, 1)
	assert.Greater(t, cs.Holders[0].TTL, 4*time.Second)
}

// TestRedisClaimsSkipUnheardWaiters: a waiter whose inbox nobody listens
// to is skipped, and the next one granted.
func TestRedisClaimsSkipUnheardWaiters(t *testing.T) {
	eachRedisBackend(t, func(t *testing.T, ctx context.Context, b backend, p lock.Provider, key string) {
		in := listen(t, p)
		a := mustClaim(t, p, key, claimOf(1, 1, time.Minute, nil))
		deaf := claimOf(1, 1, time.Minute, &inbox{name: "inbox:" + uniqueName(t) + ":deaf"})
		heard := claimOf(1, 1, time.Minute, in)
		mustQueue(t, p, key, deaf)
		mustQueue(t, p, key, heard)
		require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
		assert.Equal(t, heard.Owner, in.next(t).Owner)
		cs, err := p.InspectClaims(ctx, key)
		require.NoError(t, err)
		require.Len(t, cs.Holders, 1)
		assert.Equal(t, heard.Owner, cs.Holders[0].Owner)
		assert.Empty(t, cs.Queue)
		err = p.ReleaseClaim(ctx, key, deaf.Owner)
		assert.True(t, errors.As(err, new(*lock.LostError)), fmt.Sprint(err))
	})
}

// TestRedisClaimTokenFailureKeepsWhatWasGranted: a release that grants one
// waiter from the name's block of tokens, then cannot take a new block for
// the next (the slot's counter is corrupt), stores what it did before it
// reports the error: the claim released, the grant it published (whose
// token is never given again), the next waiter still at the head. On a
// server of the test's own: the counter serves the whole slot.
func TestRedisClaimTokenFailureKeepsWhatWasGranted(t *testing.T) {
	rc, p := ownRedis(t)
	ctx := ctxTimeout(t, 20*time.Second)
	in := listen(t, p)
	key := uniqueName(t)
	a := claimOf(2, 2, time.Minute, nil)
	ra := mustClaim(t, p, key, a)
	first, second := claimOf(1, 2, time.Minute, in), claimOf(1, 2, time.Minute, in)
	mustQueue(t, p, key, first)
	mustQueue(t, p, key, second)

	// The name's block holds one more token, taken from the counter;
	// then the counter is corrupt.
	left, err := rc.Incr(ctx, fenceKey(key)).Uint64()
	require.NoError(t, err)
	require.NoError(t, rc.HSet(ctx, rawKey(key)+":c", " tok", fmt.Sprintf("%d %d 2", ra.Token, left)).Err())
	require.NoError(t, rc.Set(ctx, fenceKey(key), "junk", 0).Err())

	err = p.ReleaseClaim(ctx, key, a.Owner)
	require.ErrorIs(t, err, lock.ErrCorruptRecord, "the counter is corrupt")
	g := in.next(t)
	assert.Equal(t, first.Owner, g.Owner, "the first waiter was granted the block's last token")
	assert.Equal(t, left, g.Token)
	in.quiet(t)
	cs, err := p.InspectClaims(ctx, key)
	require.NoError(t, err)
	if assert.Len(t, cs.Holders, 1, "the grant published is stored, the claim released gone: %+v", cs) {
		assert.Equal(t, first.Owner, cs.Holders[0].Owner)
		assert.Equal(t, left, cs.Holders[0].Token)
	}
	if assert.Len(t, cs.Queue, 1, "the second waiter is still queued: %+v", cs) {
		assert.Equal(t, second.Owner, cs.Queue[0].Owner)
	}

	require.NoError(t, rc.Set(ctx, fenceKey(key), left, 0).Err()) // mended
	require.NoError(t, p.ReleaseClaim(ctx, key, first.Owner))
	g = in.next(t)
	assert.Equal(t, second.Owner, g.Owner)
	assert.Greater(t, g.Token, left, "the token published before the error is not given again")
	require.NoError(t, p.ReleaseClaim(ctx, key, second.Owner))
	assert.Empty(t, claimKeys(t, rc, key), "nothing left behind")
}
