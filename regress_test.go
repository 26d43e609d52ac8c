package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Regression tests for faults found in review, each on a memory provider with
// one call made to misbehave as a network would.

// hookedProvider is a MemoryProvider whose Update, Transfer and AcquireQueued
// can be replaced.
type hookedProvider struct {
	*lock.MemoryProvider
	update        func(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error
	transfer      func(ctx context.Context, key, from, to string, ttl time.Duration) (lock.Record, error)
	acquireQueued func(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Record, error)
}

func (p *hookedProvider) Update(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
	if p.update != nil {
		return p.update(ctx, key, owner, ttl, ended)
	}
	return p.MemoryProvider.Update(ctx, key, owner, ttl, ended)
}

func (p *hookedProvider) Transfer(ctx context.Context, key, from, to string, ttl time.Duration) (lock.Record, error) {
	if p.transfer != nil {
		return p.transfer(ctx, key, from, to, ttl)
	}
	return p.MemoryProvider.Transfer(ctx, key, from, to, ttl)
}

func (p *hookedProvider) AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Record, error) {
	if p.acquireQueued != nil {
		return p.acquireQueued(ctx, key, owner, ttl, wait)
	}
	return p.MemoryProvider.AcquireQueued(ctx, key, owner, ttl, wait)
}

// An Extend whose provider call hangs must not keep the holder from being
// told, at the end of its lease, that the lock is lost (it used to hold the
// renewal mutex, so the lease timer could not declare the loss while another
// client took the lock).
func TestHungExtendDoesNotHideLoss(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var hanging atomic.Bool
	p := &hookedProvider{MemoryProvider: mem}
	p.update = func(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
		if !hanging.Load() {
			return mem.Update(ctx, key, owner, ttl, ended)
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

// A fair waiter whose first attempt joined the provider's queue but got no
// reply must not stay at the head of the queue: the next release would be
// announced to it, and the lock would sit free for three poll intervals.
func TestFailedFairAttemptLeavesNoQueueEntry(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var failOnce atomic.Bool
	failOnce.Store(true)
	p := &hookedProvider{MemoryProvider: mem}
	p.acquireQueued = func(ctx context.Context, key, owner string, ttl, wait time.Duration) (lock.Record, error) {
		if wait > 0 && failOnce.CompareAndSwap(true, false) {
			_, _ = mem.AcquireQueued(ctx, key, owner, ttl, wait) // stored; the reply is lost
			return lock.Record{}, errors.New("i/o timeout")
		}
		return mem.AcquireQueued(ctx, key, owner, ttl, wait)
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

// A transfer to a local waiter that happened but whose reply was lost must not
// be reported as a lost lock.
func TestTransferWithLostReplyIsNotALoss(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &hookedProvider{MemoryProvider: mem}
	p.transfer = func(ctx context.Context, key, from, to string, ttl time.Duration) (lock.Record, error) {
		_, _ = mem.Transfer(ctx, key, from, to, ttl) // done; the reply is lost
		return lock.Record{}, errors.New("i/o timeout")
	}
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	rec := newRecorder()
	c := newClient(t, p, rec.option())
	l, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	got := make(chan *lock.Lock, 1)
	go func() {
		l2, err := c.Acquire(ctx, name, lock.Options{Wait: true})
		assert.NoError(t, err)
		got <- l2
	}()
	waitEvent(t, rec, lock.EventContended)
	err = l.Release(ctx)
	assert.NotErrorIs(t, err, lock.ErrLost, "a handover whose reply was lost is not a loss")
	l2 := <-got
	require.NotNil(t, l2, "the waiter finds the lock is its own")
	assert.NoError(t, l2.Release(ctx))
	assert.Zero(t, mem.Len(), "nothing left held")
}

// An Extend that fails with a transient error while the lease timer is due
// must not leave the lease unrenewed until it runs out: the timer retries as
// after any failed renewal.
func TestFailedExtendDoesNotStopRenewal(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var failing atomic.Bool
	p := &hookedProvider{MemoryProvider: mem}
	p.update = func(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
		if failing.Load() {
			time.Sleep(150 * time.Millisecond) // slow, then a transient error
			return errors.New("connection reset")
		}
		return mem.Update(ctx, key, owner, ttl, ended)
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
	p.update = func(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
		if err := mem.Update(ctx, key, owner, ttl, ended); err != nil {
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

// A transfer that the provider refuses (ErrInvalidArgument: nothing changed)
// must not leave the released lock held until its lease runs out.
func TestRefusedTransferStillReleases(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &hookedProvider{MemoryProvider: mem}
	p.transfer = func(ctx context.Context, key, from, to string, ttl time.Duration) (lock.Record, error) {
		return lock.Record{}, fmt.Errorf("unsupported: %w", lock.ErrInvalidArgument)
	}
	ctx := ctxTimeout(t, 20*time.Second)
	name := uniqueName(t)
	rec := newRecorder()
	c := newClient(t, p, rec.option())
	l, err := c.Acquire(ctx, name, lock.Options{Lease: 5 * time.Second})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx, name, lock.Options{Wait: true})
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	waitEvent(t, rec, lock.EventContended)
	released := time.Now()
	assert.NoError(t, l.Release(ctx), "the release frees the lock when the transfer is refused")
	require.NoError(t, <-got)
	assert.Less(t, time.Since(released), 2*time.Second, "the waiter gets the lock at once, not after the 5s lease")
	assert.Zero(t, mem.Len())
}
