package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Regression tests for faults found in review, each on a memory provider with
// one call made to misbehave as a network would.

// hookedProvider is a MemoryProvider whose Renew and Queue can be replaced.
type hookedProvider struct {
	*lock.MemoryProvider
	renew func(ctx context.Context, key, owner string, ttl time.Duration) error
	queue func(ctx context.Context, key string, w lock.Waiter) (lock.Record, error)
}

func (p *hookedProvider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.renew != nil {
		return p.renew(ctx, key, owner, ttl)
	}
	return p.MemoryProvider.Renew(ctx, key, owner, ttl)
}

func (p *hookedProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	if p.queue != nil {
		return p.queue(ctx, key, w)
	}
	return p.MemoryProvider.Queue(ctx, key, w)
}

// An Extend whose provider call hangs must not keep the holder from being
// told, at the end of its lease, that the lock is lost (it used to hold the
// renewal mutex, so the lease timer could not declare the loss while another
// client took the lock).
func TestHungExtendDoesNotHideLoss(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var hanging atomic.Bool
	p := &hookedProvider{MemoryProvider: mem}
	p.renew = func(ctx context.Context, key, owner string, ttl time.Duration) error {
		if !hanging.Load() {
			return mem.Renew(ctx, key, owner, ttl)
		}
		<-ctx.Done() // a call that never answers
		return errors.New("i/o timeout")
	}
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	holder, other := newClient(t, p), newClient(t, mem)
	l, err := holder.Acquire(ctx, name, lock.Options{Lease: 300 * time.Millisecond})
	require.NoError(t, err)
	hanging.Store(true)
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(context.Background(), time.Minute) }()

	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told of the loss within 5s of a 300ms lease")
	}
	assert.ErrorIs(t, l.Err(), lock.ErrLost)
	l2, err := other.Acquire(ctx, name, lock.Options{Wait: true})
	require.NoError(t, err, "the lock is free once its lease is over")
	assert.ErrorIs(t, <-extended, lock.ErrLost, "the hung Extend ends with the lease, reporting the loss")
	assert.NoError(t, l2.Release(ctx))
	assert.ErrorIs(t, l.Release(ctx), lock.ErrLost)
}

// A waiter whose first attempt joined the provider's queue but got no reply
// must not stay at the head of the queue: the next release would hand the
// lock to it, and the lock would sit held for nobody.
func TestFailedFairAttemptLeavesNoQueueEntry(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var failOnce atomic.Bool
	failOnce.Store(true)
	p := &hookedProvider{MemoryProvider: mem}
	p.queue = func(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
		if failOnce.CompareAndSwap(true, false) {
			_, _ = mem.Queue(ctx, key, w) // queued; the reply is lost
			return lock.Record{}, errors.New("i/o timeout")
		}
		return mem.Queue(ctx, key, w)
	}
	const poll = 2 * time.Second
	ctx := ctxTimeout(t, 30*time.Second)
	name := uniqueName(t)
	holder := newClient(t, mem, lock.WithPollInterval(poll))
	failing := newClient(t, p, lock.WithPollInterval(poll))
	rec := newRecorder()
	waiter := newClient(t, mem, lock.WithPollInterval(poll), rec.option())

	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	_, err = failing.Acquire(ctx, name, lock.Options{Wait: true, Fair: true})
	require.Error(t, err)
	require.NoError(t, failing.Close()) // waits for its cleanup

	got := make(chan error, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, name, lock.Options{Wait: true, Fair: true})
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	waitEvent(t, rec, lock.EventContended)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	require.NoError(t, <-got)
	assert.Less(t, time.Since(released), poll, "the waiter is woken by the release, not by a poll")
}

// An Extend that fails with a transient error while the lease timer is due
// must not leave the lease unrenewed until it runs out: the timer retries as
// after any failed renewal.
func TestFailedExtendDoesNotStopRenewal(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var failing atomic.Bool
	p := &hookedProvider{MemoryProvider: mem}
	p.renew = func(ctx context.Context, key, owner string, ttl time.Duration) error {
		if failing.Load() {
			time.Sleep(150 * time.Millisecond) // slow, then a transient error
			return errors.New("connection reset")
		}
		return mem.Renew(ctx, key, owner, ttl)
	}
	ctx := ctxTimeout(t, 20*time.Second)
	c := newClient(t, p)
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{Lease: 600 * time.Millisecond})
	require.NoError(t, err)
	time.Sleep(120 * time.Millisecond)
	failing.Store(true)
	err = l.Extend(ctx, time.Second) // spans the renewal due at 200ms
	failing.Store(false)
	require.Error(t, err)
	require.NotErrorIs(t, err, lock.ErrLost)
	select {
	case <-l.Done():
		t.Fatalf("the lock was lost (%v) although renewals succeed again", l.Err())
	case <-time.After(1500 * time.Millisecond):
	}
	assert.NoError(t, l.Release(ctx))
}

// Renewals whose replies are slow (but which the provider applies at once)
// must not lose the lock: the next renewal is timed from when the last one
// was sent, as the lease is.
func TestSlowRenewalRepliesKeepTheLock(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &hookedProvider{MemoryProvider: mem}
	p.renew = func(ctx context.Context, key, owner string, ttl time.Duration) error {
		if err := mem.Renew(ctx, key, owner, ttl); err != nil {
			return err
		}
		select { // applied; the reply takes 200ms
		case <-time.After(200 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx := ctxTimeout(t, 20*time.Second)
	c := newClient(t, p)
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{Lease: 500 * time.Millisecond})
	require.NoError(t, err)
	select {
	case <-l.Done():
		t.Fatalf("the lock was lost (%v) although every renewal was applied", l.Err())
	case <-time.After(2 * time.Second):
	}
	assert.NoError(t, l.Release(ctx))
}

// A Release that failed (the provider was unreachable) is not reported
// clean by a second Release: it returns the first one's error.
func TestSecondReleaseRepeatsFailure(t *testing.T) {
	mem := lock.NewMemoryProvider()
	failing := &releaseFails{MemoryProvider: mem}
	c := newClient(t, failing)
	ctx := ctxTimeout(t, 5*time.Second)
	l, err := c.Acquire(ctx, uniqueName(t), lock.Options{})
	require.NoError(t, err)
	failing.fail.Store(true)
	first := l.Release(ctx)
	require.ErrorIs(t, first, errReleaseDown)
	assert.Equal(t, first, l.Release(ctx), "a second Release says the first failed")
	assert.NoError(t, l.Err(), "a failed release is not a loss")
}

var errReleaseDown = errors.New("provider down")

type releaseFails struct {
	*lock.MemoryProvider
	fail atomic.Bool
}

func (p *releaseFails) Release(ctx context.Context, key, owner string) error {
	if p.fail.Load() {
		return errReleaseDown
	}
	return p.MemoryProvider.Release(ctx, key, owner)
}

// leaveFails is a memory provider whose Leave fails, as during a failover.
type leaveFails struct{ *lock.MemoryProvider }

func (leaveFails) Leave(context.Context, string, lock.Waiter) error {
	return errors.New("connection refused")
}

// A waiter that gave up while its Leave failed (an outage) stays in the
// provider's queue. When a release later hands it the lock, its Client must
// hand the lock back at once: it used to drop the grant, and the lock sat
// held for nobody for a whole lease.
func TestGrantToGoneWaiterIsHandedBack(t *testing.T) {
	mem := lock.NewMemoryProvider()
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	holder := newClient(t, mem)
	gone := newClient(t, leaveFails{mem}) // listens, so the provider does not skip it
	live := newClient(t, mem, lock.WithPollInterval(time.Minute))
	const lease = 10 * time.Second

	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	_, err = gone.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 100 * time.Millisecond, Lease: lease})
	require.ErrorIs(t, err, lock.ErrTimeout, "the first waiter gives up; its Leave fails")

	got := make(chan error, 1)
	go func() {
		l2, err := live.Acquire(ctx, name, lock.Options{Wait: true})
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the live waiter queues behind the gone one
	start := time.Now()
	require.NoError(t, l.Release(ctx)) // hands the lock to the gone waiter
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 2*time.Second, "the lock is passed on at once, not after the gone waiter's lease")
	case <-time.After(lease / 2):
		t.Fatalf("the live waiter did not get the lock within %v: the grant to the waiter that gave up was not handed back", lease/2)
	}
}

func TestScriptsSentAgainAfterFlush(t *testing.T) {
	// A server that forgot the scripts (restarted, or SCRIPT FLUSH) answers
	// EVALSHA with NOSCRIPT; the provider then sends the script in full.
	for _, b := range backends(t) {
		if b.raw == nil {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p := b.replica(t)
			key := "lock:{" + uniqueName(t) + "}"
			flush := func() { require.NoError(t, b.raw.ScriptFlush(ctx).Err()) }

			flush()
			rec, err := p.Acquire(ctx, key, "a", time.Minute)
			require.NoError(t, err)
			require.Equal(t, "a", rec.Owner, "acquired after a flush")
			flush()
			require.NoError(t, p.Renew(ctx, key, "a", time.Minute), "renewed after a flush")
			flush()
			got, err := p.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, rec.Token, got.Token, "inspected after a flush")
			flush()
			require.NoError(t, p.Release(ctx, key, "a"), "released after a flush")
			got, err = p.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Empty(t, got.Owner, "the release freed the key")
		})
	}
	t.Run("WaitForReplicas", func(t *testing.T) {
		// The script and WAIT share a pipeline: on NOSCRIPT the script is
		// loaded and the pipeline sent again. This server has no replica,
		// so the grant is refused as not replicated: never as NOSCRIPT.
		ctx := ctxTimeout(t, 30*time.Second)
		rc := realRedis(t)
		p := lock.NewRedisProvider(rc, lock.WaitForReplicas(1, 10*time.Millisecond))
		key := "lock:{" + uniqueName(t) + "}"
		require.NoError(t, rc.ScriptFlush(ctx).Err())
		_, err := p.Acquire(ctx, key, "a", time.Minute)
		require.ErrorIs(t, err, lock.ErrNotReplicated)
		_ = p.Release(ctx, key, "a")
	})
}

// lateGrants is a provider whose Listen holds the grants it delivers while
// hold is set, until flush: the message of a grant then comes after the
// waiter's own request has found the lock its own.
type lateGrants struct {
	lock.Provider
	mu   sync.Mutex
	hold bool
	held []func()
}

func (p *lateGrants) Listen(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
	return p.Provider.Listen(ctx, inbox, func(g lock.Grant) {
		p.mu.Lock()
		if p.hold && g.Owner != "" {
			p.held = append(p.held, func() { deliver(g) })
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		deliver(g)
	})
}

// flush delivers the grants held, and holds no more.
func (p *lateGrants) flush() int {
	p.mu.Lock()
	held := p.held
	p.held, p.hold = nil, false
	p.mu.Unlock()
	for _, d := range held {
		d()
	}
	return len(held)
}

func TestLateGrantLeavesTheLockToItsHolder(t *testing.T) {
	// A waiter's look again finds the lock handed to it before the grant's
	// message arrives. The message, arriving after the waiter took the lock,
	// must not be handed back: that released the holder's record while it
	// held it, and another process was granted the lock (found by the
	// failover suite with WaitForReplicas, whose confirmation delays the
	// message).
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		p := &lateGrants{Provider: b.replica(t)}
		c := newClient(t, p, lock.WithPollInterval(50*time.Millisecond))
		other := newClient(t, b.replica(t))
		name := uniqueName(t)

		h, err := other.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		type result struct {
			l   *lock.Lock
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := c.Acquire(ctx, name, lock.Options{Wait: true})
			got <- result{l, err}
		}()
		require.Eventually(t, func() bool {
			st, err := other.Inspect(ctx, name)
			return err == nil && st.Waiters == 1
		}, 10*time.Second, 5*time.Millisecond, "the waiter queues")

		p.mu.Lock()
		p.hold = true
		p.mu.Unlock()
		require.NoError(t, h.Release(ctx)) // hands the lock to the waiter
		var r result
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not find the lock its own")
		}
		require.NoError(t, r.err)
		require.Equal(t, 1, p.flush(), "the grant's message was held until now")

		require.Never(t, func() bool {
			st, err := other.Inspect(ctx, name)
			return err != nil || st.Owner != r.l.Owner()
		}, 500*time.Millisecond, 10*time.Millisecond, "the late message took the lock from its holder")
		assert.NoError(t, r.l.Err(), "the holder still holds the lock")
		require.NoError(t, r.l.Release(ctx))
	})
}
