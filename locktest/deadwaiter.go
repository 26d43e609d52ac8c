package locktest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The checks of a waiter whose process died while it waited (issue 38): it
// holds up the waiters behind it for its own queue entry's lease (its look
// interval and handoff window), not until a holder leaves.

// deadWaiterPoll is the poll interval of the dying Clients (see
// suite.dying), and deadWaiterBound how long a dead waiter may hold up
// those behind it: its look interval and its handoff window, with a poll of
// the live waiter's.
const (
	deadWaiterPoll  = 100 * time.Millisecond
	deadWaiterBound = deadWaiterPoll + handoffWindow + deadWaiterPoll
)

// rwDeadWriter: a reader holds an RWMutex for long; a writer queues behind
// it, and its process dies. A reader that asks after that is granted
// beside the long reader once the dead writer's entry has run out, not
// when the long reader leaves (issue 38: 4.78 s later, when it released).
func (s *suite) rwDeadWriter(t *testing.T) {
	cd, dead, cs := s.deadAndLive(t, "a dead writer's queue entry runs out")
	if cd == nil {
		return
	}
	name := uniqueName(t)
	m := holdsOf(t, []*lock.Client{cd, cs[0], cs[1]}, name, 12, (*lock.Client).RWMutex)
	long, err := m[1].RLock(s.ctx, lock.Options{Lease: 5 * time.Second})
	require.NoError(t, err)
	go func() {
		h, err := m[0].Lock(s.ctx, lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: 5 * time.Second})
		if err == nil {
			_ = h.Release(s.ctx)
		}
	}()
	queuedFor(t, s.ctx, m[1].Inspect)
	time.Sleep(2 * deadWaiterPoll) // it looks at least once more
	dead.Store(true)
	died := time.Now()
	time.Sleep(200 * time.Millisecond)

	// The long reader holds until the reader behind the dead writer is
	// granted, or for 20 s.
	const holdFor = 20 * time.Second
	read := goTake(t, "the reader behind the dead writer", func() (*lock.Hold, error) {
		return m[2].RLock(s.ctx, lock.Options{Wait: true, MaxWait: holdFor + 10*time.Second, Lease: 5 * time.Second})
	})
	var h *lock.Hold
	select {
	case h = <-read:
	case <-time.After(holdFor):
		require.NoError(t, long.Release(s.ctx))
		h = receive(t, read, 10*time.Second, "the reader behind the dead writer was not granted after the long reader left")
		long = nil
	}
	took := time.Since(died)
	bound := deadWaiterBound + s.b.TTLGranularity + s.b.MinLease
	t.Logf("the reader behind the dead writer was granted %v after the writer died (bound %v)", took.Round(time.Millisecond), bound)
	assert.NotNil(t, long, "the reader was granted beside the long reader, not after it left")
	assert.Less(t, took, bound+5*time.Second, "granted within the dead writer's queue lease (%v) and a margin", bound)
	if h != nil {
		assert.NoError(t, h.Release(s.ctx))
	}
	if long != nil {
		assert.NoError(t, long.Release(s.ctx))
	}
}

// lockDeadWaiter: a holder holds a lock; a waiter queues behind it and its
// process dies, and a live waiter queues behind that one. When the holder
// releases, the live waiter gets the lock within the dead waiter's claim
// window and a poll (the release hands the lock to the dead waiter, or
// passes over it), not a lease later.
func (s *suite) lockDeadWaiter(t *testing.T) {
	cd, dead, cs := s.deadAndLive(t, "a dead waiter's grant runs out")
	if cd == nil {
		return
	}
	name := uniqueName(t)
	const lease = 20 * time.Second
	h, err := cs[0].Acquire(s.ctx, name, lock.Options{Lease: lease})
	require.NoError(t, err)
	go func() {
		l, err := cd.Acquire(s.ctx, name, lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: lease})
		if err == nil {
			_ = l.Release(s.ctx)
		}
	}()
	waitersAre(t, s.ctx, cs[0], name, 1)
	live := make(chan *lock.Lock, 1)
	go func() {
		l, err := cs[1].Acquire(s.ctx, name, lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: lease})
		assert.NoError(t, err, "the live waiter")
		live <- l
	}()
	waitersAre(t, s.ctx, cs[0], name, 2)
	dead.Store(true)
	time.Sleep(deadWaiterBound) // the dead waiter's entry, if the provider keeps one a while, has run out
	released := time.Now()
	require.NoError(t, h.Release(s.ctx))
	l := receive(t, live, 25*time.Second, "the live waiter did not get the lock")
	took := time.Since(released)
	bound := deadWaiterBound + s.b.TTLGranularity + s.b.MinLease
	t.Logf("the waiter behind the dead one got the lock %v after the release (bound %v)", took.Round(time.Millisecond), bound)
	assert.Less(t, took, bound+5*time.Second, "granted within the dead waiter's handoff window and a poll, not its lease of %v", lease)
	if l != nil {
		assert.NoError(t, l.Release(context.WithoutCancel(s.ctx)))
	}
}

// deadAndLive returns a Client that dies when dead is set (see dying) and
// two live callers; nil where the backend's records do not expire. It
// skips with -short: each check it serves takes about 2 s, as why says.
func (s *suite) deadAndLive(t *testing.T, why string) (cd *lock.Client, dead *atomic.Bool, cs []*lock.Client) {
	testenv.SkipShort(t, "a conformance check of 2 s ("+why+")")
	if !s.expires(t) {
		return nil, nil, nil
	}
	cd, dead = s.dying(t)
	return cd, dead, s.callers(t, 2)
}
