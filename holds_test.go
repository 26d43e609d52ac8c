package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestAllNoDeadlockTenThousand: four callers, each a Client of its own, take
// overlapping sets of locks listed in opposite orders, 10,000 times in all
// (1,000 under -short), on the memory provider and on Redis: every attempt
// is granted within the test's bound (no deadlock), and no lock is ever held
// by two at once.
func TestAllNoDeadlockTenThousand(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "miniredis" {
			continue // its TTLs do not run; the locks are the same as Redis's
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 4*time.Minute)
			base := uniqueName(t)
			names := []string{base + "-a", base + "-b", base + "-c", base + "-d"}
			sets := [][]int{{0, 1, 2}, {2, 1, 0}, {3, 1}, {1, 3, 0}}
			attempts := testenv.ShortSize(t, 10000, 1000, "10,000 attempts take 10-30 s")
			var held [4]atomic.Int64
			var granted, overlaps atomic.Int64
			var wg sync.WaitGroup
			began := time.Now()
			for i, set := range sets {
				c := newClient(t, b.replica(t), lock.WithPollInterval(100*time.Millisecond))
				list := make([]string, len(set))
				for j, k := range set {
					list[j] = names[k]
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := range attempts / len(sets) {
						err := c.DoAll(ctx, list, lock.Options{Wait: true, MaxWait: time.Minute, Lease: 5 * time.Second}, func(context.Context) error {
							for _, k := range set {
								if held[k].Add(1) != 1 {
									overlaps.Add(1)
								}
							}
							granted.Add(1)
							for _, k := range set {
								held[k].Add(-1)
							}
							return nil
						})
						if !assert.NoError(t, err, "caller %d attempt %d", i, r) {
							return
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d multi-lock attempts granted in %v", granted.Load(), time.Since(began).Round(time.Millisecond))
			assert.Equal(t, int64(attempts), granted.Load(), "every attempt granted")
			assert.Zero(t, overlaps.Load(), "a lock held by two callers at once")
		})
	}
}

// TestHoldReleaseTwice: a second Release of a Hold answers as a Lock's
// does (issue 31, item 5: it returned nil after a clean first one): an
// error matching ErrReleased, not ErrLost; Done is closed after the first.
// Release on the nil *Hold and *Lock that failed acquisitions return fails
// with ErrInvalidArgument instead of panicking.
func TestHoldReleaseTwice(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ctx := ctxTimeout(t, 10*time.Second)
	h, err := c.AcquireAll(ctx, []string{"a", "b", "a"}, lock.Options{})
	require.NoError(t, err)
	require.Len(t, h.Locks(), 2, "a name listed twice counts once")
	require.NoError(t, h.Release(ctx))
	select {
	case <-h.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	err = h.Release(ctx)
	assert.ErrorIs(t, err, lock.ErrReleased)
	assert.NotErrorIs(t, err, lock.ErrLost)
	assert.ErrorIs(t, h.Context().Err(), context.Canceled)
	assert.NoError(t, c.DoAll(ctx, []string{"a"}, lock.Options{}, func(ctx context.Context) error {
		h, _ := lock.HoldFromContext(ctx)
		return h.Release(ctx)
	}), "DoAll's own release after fn released the hold is not an error")

	var nilHold *lock.Hold
	assert.ErrorIs(t, nilHold.Release(ctx), lock.ErrInvalidArgument)
	var nilLock *lock.Lock
	assert.ErrorIs(t, nilLock.Release(ctx), lock.ErrInvalidArgument)
	for _, name := range []string{"a", "b"} {
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		assert.True(t, st.Free(), name)
	}
}

// TestHoldBadInput: bad arguments fail at once with ErrInvalidArgument.
func TestHoldBadInput(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ctx := ctxTimeout(t, 10*time.Second)
	_, err := c.AcquireAll(ctx, nil, lock.Options{})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "no names")
	_, err = c.AcquireAll(ctx, []string{"a", ""}, lock.Options{})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty name")
	_, err = c.AcquireAll(ctx, []string{"a"}, lock.Options{Lease: -time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a negative lease")
	_, err = c.RWMutex("m", 0)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "no readers")
	_, err = c.Semaphore("s", lock.MaxLimit+1)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "too many permits")
	m, err := c.RWMutex("m", 2)
	require.NoError(t, err)
	_, err = m.Lock(ctx, lock.Options{OncePer: time.Minute})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "OncePer on a write hold")
	assert.ErrorIs(t, m.Do(ctx, lock.Options{}, nil), lock.ErrInvalidArgument, "a nil function")
	h, err := c.AcquireAll(ctx, []string{"x"}, lock.Options{})
	require.NoError(t, err)
	assert.ErrorIs(t, h.Downgrade(ctx), lock.ErrInvalidArgument, "Downgrade of a multi-lock")
	require.NoError(t, h.Release(ctx))
}

// TestSemaphoreInspect: Inspect shows the semaphore as one thing: its
// limit, the weight held, each hold with its weight and token, and the
// waiters queued.
func TestSemaphoreInspect(t *testing.T) {
	p := lock.NewMemoryProvider()
	c := newClient(t, p)
	ctx := ctxTimeout(t, 10*time.Second)
	sem, err := c.Semaphore("pool", 3)
	require.NoError(t, err)
	h, err := sem.Acquire(ctx, 2, lock.Options{})
	require.NoError(t, err)
	st, err := sem.Inspect(ctx)
	require.NoError(t, err)
	assert.Equal(t, []any{"semaphore", 3, 2, false}, []any{st.Kind, st.Limit, st.Used, st.Free()})
	require.Len(t, st.Holders, 1)
	assert.Equal(t, []any{"permit", 2, h.Token(), h.Locks()[0].Owner()}, []any{st.Holders[0].Kind, st.Holders[0].Weight, st.Holders[0].Token, st.Holders[0].Owner})
	assert.NotZero(t, h.Token())

	waiting := make(chan error, 1)
	go func() {
		h2, err := sem.Acquire(ctx, 2, lock.Options{Wait: true, MaxWait: 5 * time.Second})
		if err == nil {
			err = h2.Release(ctx)
		}
		waiting <- err
	}()
	require.Eventually(t, func() bool {
		st, err := sem.Inspect(ctx)
		return err == nil && len(st.Queue) == 1 && st.Queue[0].Weight == 2 && st.Waiters == 1
	}, 5*time.Second, time.Millisecond, "the waiter is queued, for 2")
	require.NoError(t, h.Release(ctx))
	require.NoError(t, <-waiting)
	st, err = sem.Inspect(ctx)
	require.NoError(t, err)
	assert.True(t, st.Free(), "free once every hold is released")
	assert.Zero(t, lock.MemoryLen(p), "nothing left stored")
}

// TestStatusSaysWhatALockIsPartOf: List shows a Semaphore and an RWMutex
// as one thing each, beside plain locks, and Inspect of a semaphore's name
// does not say it is free while its permits are held.
func TestStatusSaysWhatALockIsPartOf(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ctx := ctxTimeout(t, 10*time.Second)
	sem, err := c.Semaphore("pool", 3)
	require.NoError(t, err)
	p, err := sem.Acquire(ctx, 1, lock.Options{})
	require.NoError(t, err)
	m, err := c.RWMutex("doc", 4)
	require.NoError(t, err)
	r, err := m.RLock(ctx, lock.Options{})
	require.NoError(t, err)
	plain, err := c.Acquire(ctx, "job#1", lock.Options{})
	require.NoError(t, err)
	locks, _, err := c.List(ctx, 10)
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range locks {
		got[s.Name] = fmt.Sprintf("%s %d/%d %d", s.Kind, s.Used, s.Limit, len(s.Holders))
	}
	assert.Equal(t, map[string]string{
		"pool":  "semaphore 1/3 1",
		"doc":   "rwmutex 1/4 1",
		"job#1": " 0/0 0",
	}, got)
	st, err := c.Inspect(ctx, "pool")
	require.NoError(t, err)
	assert.False(t, st.Free(), "a semaphore whose permits are held is not free")
	assert.Equal(t, "semaphore", st.Kind)
	require.NoError(t, r.Release(ctx))
	w, err := m.Lock(ctx, lock.Options{})
	require.NoError(t, err)
	st, err = c.Inspect(ctx, "doc")
	require.NoError(t, err)
	assert.Equal(t, "rwmutex", st.Kind)
	if assert.Len(t, st.Holders, 1) {
		assert.Equal(t, []any{"writer", "doc", 4, 4}, []any{st.Holders[0].Kind, st.Holders[0].Of, st.Holders[0].Limit, st.Holders[0].Weight})
	}
	require.NoError(t, w.Release(ctx))
	require.NoError(t, p.Release(ctx))
	require.NoError(t, plain.Release(ctx))
}

// TestPartOf: PartOf tells an event's hold as Status.Kind does.
func TestPartOf(t *testing.T) {
	for _, tc := range []struct {
		key, owner, kind, of string
		limit                int
	}{
		{"lock:{pool}", "web-1/ab-7~n4", "permit", "pool", 4},
		{"lock:{doc}", "ab-7~w16", "writer", "doc", 16},
		{"lock:{doc}", "ab-7~r16", "reader", "doc", 16},
		{"lock:{vote}", "ab-7~e1", "role", "vote", 0},
		{"lock:{doc}", "ab-7~r", "", "", 0},
		{"lock:{doc}", "ab-7~x3", "", "", 0},
		{"lock:{job}", "ab-7", "", "", 0},
		{"lock:{job#1}", "ab-7", "", "", 0},
		{"x", "ab~n2", "", "", 0},
	} {
		kind, of, limit := lock.PartOf(tc.key, tc.owner)
		assert.Equal(t, []any{tc.kind, tc.of, tc.limit}, []any{kind, of, limit}, "%s %s", tc.key, tc.owner)
	}
}

// TestPartOfDoesNotAllocate: otel calls PartOf for every event.
func TestPartOfDoesNotAllocate(t *testing.T) {
	for _, tc := range [][2]string{
		{"lock:{pool#102}", "ab-7~n400"},
		{"lock:{a#b}", "id~x/ab-7"},
		{"lock:{job}", "ab-7"},
		{"lock:{doc#r3}", "ab-7~r16"},
	} {
		allocs := testing.AllocsPerRun(100, func() { lock.PartOf(tc[0], tc[1]) })
		assert.Zero(t, allocs, "%v", tc)
	}
}

// TestDowngradeOfAReleasedHold: Downgrade after Release fails and changes
// nothing; two Downgrades at once leave one reader's claim, which Release
// frees.
func TestDowngradeOfAReleasedHold(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	mem := lock.NewMemoryProvider()
	c := newClient(t, mem)
	other := newClient(t, mem)
	m, err := c.RWMutex("rw", 4)
	require.NoError(t, err)
	used := func() int {
		st, err := m.Inspect(ctx)
		require.NoError(t, err)
		return st.Used
	}

	h, err := m.Lock(ctx, lock.Options{})
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	assert.ErrorIs(t, h.Downgrade(ctx), lock.ErrInvalidArgument, "after Release")
	assert.Zero(t, used(), "after Release")

	h, err = m.Lock(ctx, lock.Options{})
	require.NoError(t, err)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- h.Downgrade(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a second Downgrade finds a read hold")
		}
	}
	assert.Equal(t, 1, used(), "one reader's claim")
	require.NoError(t, h.Release(ctx))
	assert.Zero(t, used(), "released")
	w, err := other.RWMutex("rw", 4)
	require.NoError(t, err)
	wh, err := w.Lock(ctx, lock.Options{})
	require.NoError(t, err, "a writer after all that")
	require.NoError(t, wh.Release(ctx))
	assert.Zero(t, lock.MemoryLen(mem), "nothing left stored")
}

// TestNoUpgradeWithAWriterQueued: a write lock asked for from a read hold
// fails at once, also when another writer is queued.
func TestNoUpgradeWithAWriterQueued(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	p := lock.NewMemoryProvider()
	c1, c2 := newClient(t, p), newClient(t, p)
	m1, err := c1.RWMutex("rw", 4)
	require.NoError(t, err)
	m2, err := c2.RWMutex("rw", 4)
	require.NoError(t, err)
	wait := lock.Options{Wait: true, MaxWait: 5 * time.Second}
	err = m1.RDo(ctx, wait, func(ctx context.Context) error {
		go func() {
			if h, err := m2.Lock(context.Background(), wait); err == nil {
				_ = h.Release(context.Background())
			}
		}()
		require.Eventually(t, func() bool {
			st, err := m2.Inspect(ctx)
			return err == nil && len(st.Queue) == 1
		}, 5*time.Second, 5*time.Millisecond, "the other writer is queued")
		began := time.Now()
		_, err := m1.Lock(ctx, wait)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "no upgrade")
		_, err = m1.RLock(ctx, wait)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "no second read hold from a read hold's context")
		assert.Less(t, time.Since(began), 2*time.Second, "at once")
		return nil
	})
	require.NoError(t, err)
}

// TestNestedWaitForAMemberFailsAtOnce: inside DoAll, a wait for any of its
// locks (not only the first) fails at once instead of waiting for itself.
func TestNestedWaitForAMemberFailsAtOnce(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	c := newClient(t, lock.NewMemoryProvider())
	wait := lock.Options{Wait: true, MaxWait: 5 * time.Second}
	err := c.DoAll(ctx, []string{"a", "b", "c"}, wait, func(ctx context.Context) error {
		for _, name := range []string{"a", "b", "c"} {
			began := time.Now()
			err := c.Do(ctx, name, wait, func(context.Context) error { return nil })
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, name)
			assert.Less(t, time.Since(began), 2*time.Second, "%s: at once", name)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestHoldFromContext (issue 31, item 6): inside DoAll's function,
// HoldFromContext gives the Hold, whose members each carry their own key
// and token, so that each write can be fenced with its own lock's token
// (FromContext gives the first member only); the same in Semaphore.Do and
// RWMutex.Do and RDo. Outside such a function there is none.
func TestHoldFromContext(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ctx := ctxTimeout(t, 10*time.Second)
	_, ok := lock.HoldFromContext(ctx)
	assert.False(t, ok)
	err := c.DoAll(ctx, []string{"account-2", "account-1"}, lock.Options{}, func(ctx context.Context) error {
		h, ok := lock.HoldFromContext(ctx)
		require.True(t, ok)
		keys := map[string]uint64{}
		for _, l := range h.Locks() {
			keys[l.Key()] = l.Token()
		}
		assert.Len(t, keys, 2)
		for _, name := range []string{"account-1", "account-2"} {
			st, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, st.Token, keys[c.Key(name)], "the member of %s has its lock's own token", name)
		}
		first, ok := lock.FromContext(ctx)
		require.True(t, ok)
		assert.Equal(t, h.Locks()[0], first)
		return nil
	})
	require.NoError(t, err)

	sem, err := c.Semaphore("sem", 2)
	require.NoError(t, err)
	require.NoError(t, sem.Do(ctx, 2, lock.Options{}, func(ctx context.Context) error {
		h, ok := lock.HoldFromContext(ctx)
		require.True(t, ok)
		if assert.Len(t, h.Locks(), 1, "one claim") {
			assert.Equal(t, h.Token(), h.Locks()[0].Token(), "the claim's token is the hold's")
		}
		return nil
	}))
	rw, err := c.RWMutex("rw", 4)
	require.NoError(t, err)
	for _, do := range []func(context.Context, lock.Options, func(context.Context) error) error{rw.Do, rw.RDo} {
		require.NoError(t, do(ctx, lock.Options{}, func(ctx context.Context) error {
			_, ok := lock.HoldFromContext(ctx)
			assert.True(t, ok)
			return nil
		}))
	}
}

// TestWaiterFarBackServesTheQueueWhenTheHeadIsGone: a Semaphore(1) is held
// by a holder that stops renewing (lease 300 ms); 17 waiters queued ahead
// of a live one are gone (nobody listens to their inbox: the provider skips
// them when it serves). The live waiter, 17th in the queue, looks when the
// claim it saw expires, and its look serves the queue: it holds within a
// second or so, not at its next poll by place (two poll intervals of 3 s).
func TestWaiterFarBackServesTheQueueWhenTheHeadIsGone(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	mem := lock.NewMemoryProvider()
	stopped := errors.New("stopped")
	dead := &hookedProvider{Provider: mem,
		OnRenewClaim:   func(context.Context, string, string, time.Duration) error { return stopped },
		OnReleaseClaim: func(context.Context, string, string) error { return stopped },
	}
	holder := newClient(t, dead)
	semH, err := holder.Semaphore("far", 1)
	require.NoError(t, err)
	_, err = semH.Acquire(ctx, 1, lock.Options{Lease: 300 * time.Millisecond})
	require.NoError(t, err)
	key := holder.Key("far")
	for i := range 17 {
		rec, err := mem.QueueClaim(ctx, key, lock.Claim{Owner: fmt.Sprintf("gone-%d", i), Weight: 1, Limit: 1, Kind: lock.KindSemaphore, TTL: time.Minute, Inbox: "nobody-listens"})
		require.NoError(t, err)
		require.True(t, rec.Queued)
	}
	live := newClient(t, mem, lock.WithPollInterval(3*time.Second))
	sem, err := live.Semaphore("far", 1)
	require.NoError(t, err)
	began := time.Now()
	h, err := sem.Acquire(ctx, 1, lock.Options{Wait: true, MaxWait: 15 * time.Second})
	require.NoError(t, err)
	took := time.Since(began)
	t.Logf("granted %v after it queued 17th", took)
	assert.Less(t, took, 3*time.Second, "granted once the holder's claim expired, not at the next poll by place (6 s)")
	require.NoError(t, h.Release(ctx))
}
