package lock_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Acquire without Wait: a grant, a refusal and what it says, bad input,
// keys and prefixes, fencing tokens, mutual exclusion.

func TestAcquireRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)

		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		assert.Equal(t, lock.DefaultPrefix+"{"+name+"}", l.Key(), "the key is the default prefix and the name in braces")
		assert.Equal(t, c.Key(name), l.Key())
		assert.NotZero(t, l.Token(), "a grant carries a fencing token")
		assert.NotEmpty(t, l.Owner())
		assert.NoError(t, l.Err(), "a held lock has no error")
		select {
		case <-l.Done():
			t.Fatal("Done is closed while the lock is held")
		default:
		}
		h := holder(t, b.replica(t), l.Key())
		assert.Equal(t, l.Owner(), h.Owner, "the provider's record is the lock's")
		assert.Equal(t, l.Token(), h.Token)

		require.NoError(t, l.Release(ctx))
		assertClosed(t, l.Done(), "Done is closed after Release")
		assert.NoError(t, l.Err(), "a clean release leaves no error")
		assert.ErrorIs(t, l.Release(ctx), lock.ErrReleased, "Release after a clean Release says it was released")
		assert.NotErrorIs(t, l.Release(ctx), lock.ErrLost, "and not that it was lost")

		l2, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the lock is free after Release")
		assert.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	})
}

func TestAcquireHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		l := mustHold(t, cs[0], name)

		for _, c := range cs { // another replica, and the holder's own client
			start := time.Now()
			_, err := c.Acquire(ctx, name, lock.Options{})
			assert.Less(t, time.Since(start), 2*time.Second, "without Wait, a held lock fails at once")
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, lock.ErrHeld, "the reason is that another owner holds it")
			assert.NotErrorIs(t, err, lock.ErrGracePeriod)
			require.Error(t, err)
			assert.Contains(t, err.Error(), cs[0].Key(name), "the error names the key")
			var na *lock.NotAcquiredError
			if assert.ErrorAs(t, err, &na) {
				assert.Equal(t, cs[0].Key(name), na.Key)
				assert.Positive(t, na.RetryAfter, "RetryAfter is the holder's remaining lease")
				assert.LessOrEqual(t, na.RetryAfter, lock.DefaultLease)
			}
		}
		assert.Equal(t, l.Owner(), holder(t, b.replica(t), l.Key()).Owner, "the failed attempts left the holder's record")
		assert.NoError(t, l.Release(ctx), "the holder still holds the lock")
	})
}

// Issue 22, item 6: a refusal names the holder's identity when its Client set
// one (WithIdentity); an owner without one is a random id, left to Holder.
func TestRefusalNamesTheHoldersIdentity(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		worker := newClient(t, b.replica(t), lock.WithIdentity("worker-1:4242"))
		anonymous := newClient(t, b.replica(t))
		other := newClient(t, b.replica(t))

		name := uniqueName(t)
		l, err := worker.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = other.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner (worker-1:4242)`)
		_, err = other.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 100 * time.Millisecond})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": wait timed out (holder worker-1:4242)`)
		require.NoError(t, l.Release(ctx))

		name = uniqueName(t)
		l, err = anonymous.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = other.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner`)
		var na *lock.NotAcquiredError
		if assert.ErrorAs(t, err, &na) {
			assert.Equal(t, l.Owner(), na.Holder, "the owner is in Holder")
		}
		require.NoError(t, l.Release(ctx))
	})
}

// Issue 38, item 6: a refusal by the caller's own Client (a lock another
// of its acquisitions holds) says so, with the Client's identity, instead
// of "held by another owner"; it still matches ErrHeld, and a refusal by
// another Client reads as before.
func TestRefusalByItsOwnClientSaysSo(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		worker := newClient(t, b.replica(t), lock.WithIdentity("worker-1:4242"))
		anonymous := newClient(t, b.replica(t))

		name := uniqueName(t)
		l, err := worker.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = worker.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by this Client (worker-1:4242)`)
		assert.ErrorIs(t, err, lock.ErrHeld)
		_, err = worker.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 100 * time.Millisecond})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": wait timed out (holder: this Client, worker-1:4242)`)
		_, err = anonymous.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner (worker-1:4242)`)
		require.NoError(t, l.Release(ctx))

		name = uniqueName(t)
		l, err = anonymous.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = anonymous.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by this Client`)
		_, err = worker.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner`)
		require.NoError(t, l.Release(ctx))
	})
}

func TestAcquireBadInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)
		long := strings.Repeat("n", lock.MaxKeyLen-len(lock.DefaultPrefix)+1)
		cases := []struct {
			what string
			name string
			o    lock.Options
		}{
			{"empty name", "", lock.Options{}},
			{"key over MaxKeyLen", long, lock.Options{}},
			{"negative MaxDuration", name, lock.Options{MaxDuration: -time.Second}},
			{"negative Lease", name, lock.Options{Lease: -time.Second}},
			{"negative GracePeriod", name, lock.Options{GracePeriod: -time.Second}},
			{"Lease under 3ms", name, lock.Options{Lease: time.Millisecond}},
		}
		for _, tc := range cases {
			_, err := c.Acquire(ctx, tc.name, tc.o)
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, tc.what)
			assert.ErrorIs(t, c.Do(ctx, tc.name, tc.o, func(context.Context) error {
				t.Errorf("fn ran for %s", tc.what)
				return nil
			}), lock.ErrInvalidArgument, tc.what)
		}
		for _, key := range []string{c.Key(name), c.Key(long)} {
			if b.raw != nil {
				n, err := b.raw.Exists(ctx, rawKey(key), queueKey(key)).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "nothing is stored for bad input")
			}
		}
		if m := b.replica(t); lock.IsMemory(m) {
			assert.Zero(t, lock.MemoryLen(m), "nothing is stored for bad input")
		}
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "the name is free after the rejected calls")
		assert.NoError(t, l.Release(ctx))

		exact := name + strings.Repeat("n", lock.MaxKeyLen-len(c.Key(name)))
		l, err = c.Acquire(ctx, exact, lock.Options{})
		require.NoError(t, err, "a key of exactly MaxKeyLen bytes works")
		assert.NoError(t, l.Release(ctx))
	})
}

func TestPrefix(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		for _, prefix := range []string{"p:", ""} {
			c := newClient(t, b.replica(t), lock.WithPrefix(prefix))
			name := uniqueName(t)
			key := prefix + "{" + name + "}"
			assert.Equal(t, key, c.Key(name))
			l, err := c.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			assert.Equal(t, key, l.Key(), "the key is the prefix and the name in braces")
			h := holder(t, b.replica(t), key)
			assert.Equal(t, l.Owner(), h.Owner, "the record is stored under %q", key)
			assert.Equal(t, l.Token(), h.Token)
			if b.raw != nil {
				n, err := b.raw.Exists(ctx, key).Result()
				require.NoError(t, err)
				assert.EqualValues(t, 1, n, "the Redis record is at the key itself, %s", key)
				pttl, err := b.raw.PTTL(ctx, l.Key()).Result()
				require.NoError(t, err)
				assert.Positive(t, pttl, "PTTL of Lock.Key finds the record")
				keys, err := b.raw.Keys(ctx, globEscape(prefix)+"*"+globEscape(name)+"*").Result()
				require.NoError(t, err)
				for _, k := range keys {
					assert.True(t, strings.HasPrefix(k, prefix), "every stored key starts with the prefix: %q", k)
				}
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}

// Issue 7, item 4: TestKeysOfDistinctNamesDiffer: a name whose braces break
// the hash tag gets a key made from its checksum; that key must not be another
// name's key (it was: "}" and "1y4akgc}" both made "lock:{1y4akgc}}").
func TestKeysOfDistinctNamesDiffer(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	names := []string{"}", "}x", "}{", "{}", "a}", "}}", "x}y", "{", "a{b}", "{a}"}
	seen := map[string]string{}
	check := func(name string) {
		key := c.Key(name)
		if other, dup := seen[key]; dup && other != name {
			t.Errorf("names %q and %q share the key %q", other, name, key)
		}
		seen[key] = name
	}
	for _, n := range names {
		check(n)
		// The plain key of a name that spells out another name's checksum
		// key ("<crc>}" + rest) must differ from that key.
		k := c.Key(n)
		inner := strings.TrimPrefix(k, lock.DefaultPrefix+"{")
		check(strings.TrimSuffix(inner, "}"))
		check(inner)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	l, err := c.Acquire(ctx, "}", lock.Options{})
	require.NoError(t, err)
	defer l.Release(ctx)
	for _, other := range []string{"1y4akgc}", "1y4akgc}}"} {
		l2, err := c.Acquire(ctx, other, lock.Options{})
		require.NoError(t, err, "%q is another lock than %q", other, "}")
		require.NoError(t, l2.Release(ctx))
	}
}

func TestFencingTokensAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cs := replicas(t, b, 2)
		name := uniqueName(t)
		var last uint64
		for i := range 20 {
			l, err := cs[i%2].Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			require.Greater(t, l.Token(), last, "grant %d: tokens strictly increase across replicas", i)
			last = l.Token()
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestMutualExclusion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		cs := replicas(t, b, 4)
		name := uniqueName(t)
		perG := 25
		if b.raw != nil {
			perG = 8
		}
		var inside, maxInside, grants atomic.Int64
		shared := 0 // guarded by the lock alone
		var wg sync.WaitGroup
		for _, c := range cs {
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range perG {
						l, err := c.Acquire(ctx, name, lock.Options{Wait: true})
						if !assert.NoError(t, err) {
							return
						}
						n := inside.Add(1)
						for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
						}
						v := shared // unprotected read-modify-write
						runtime.Gosched()
						time.Sleep(50 * time.Microsecond)
						shared = v + 1
						grants.Add(1)
						inside.Add(-1)
						if !assert.NoError(t, l.Release(ctx)) {
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		assert.EqualValues(t, 1, maxInside.Load(), "at most one holder at any instant")
		assert.EqualValues(t, 16*perG, grants.Load(), "every acquisition was granted")
		assert.EqualValues(t, grants.Load(), shared, "no update was lost")
	})
}
