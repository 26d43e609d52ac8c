package locktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// Workload is a run of several Clients on one backend, each on a provider
// of its own (a process), that take locks, semaphore holds and an
// election's terms, write the holder's token through a fence, and observe
// the role, with every operation recorded in a History for the checker
// (CheckHistory). Run and Start run it; its zero fields are the defaults.
type Workload struct {
	// New returns a provider over the backend, one per Client, as
	// Backend.New does. Required.
	New func(t testing.TB) lock.Provider

	// Fence is the fenced resource the holders write through; nil for one
	// in this process's memory (NewMemoryFence), which checks the tokens.
	Fence Fence

	// Clients is the number of Clients: 3 when zero (at least 3 with
	// Faults).
	Clients int

	// Rounds is how many locks, holds and terms each Client takes, of each
	// kind: 8 when zero, 3 under -short. The run also ends with its context.
	Rounds int

	// Lease is the lease of every hold: 600ms when zero.
	Lease time.Duration

	// Pace is a pause between two rounds of a Client: none when zero. A run
	// that must last through faults (Stop ends it) paces its rounds so
	// that its history stays small.
	Pace time.Duration

	// Prefix is put before the names the run uses ("lock0", "lock1",
	// "sem", "role"): the test's unique name and ":" when empty.
	Prefix string

	// Faults makes two Clients fail, each once, on its first lock: one
	// stalls (its renewals hang until it is told its lock is lost, then it
	// writes with its stale token and releases), one dies (every call of
	// its provider fails from then on, and it never releases). It needs a
	// backend whose records expire in real time.
	Faults bool

	// ClientOptions are given to every Client, after the workload's own
	// (a poll interval of a fifth of the lease).
	ClientOptions []lock.ClientOption
}

// The names a Workload uses, under a prefix of the test's.
const (
	wlLocks     = 2 // lock names, each with its fence
	wlSemLimit  = 2 // the semaphore's limit; holds take 1 or 2
	wlMaxWeight = 2
)

// Running is a Workload under way.
type Running struct {
	t      testing.TB
	h      *History
	cancel context.CancelFunc
	wg     sync.WaitGroup
	grants atomic.Int64
}

// History returns the History the run records in.
func (r *Running) History() *History { return r.h }

// Grants returns how many locks, holds and terms the run's Clients have
// been granted so far.
func (r *Running) Grants() int64 { return r.grants.Load() }

// Wait waits until every Client has done its rounds, or the run's context
// has ended, and returns the History.
func (r *Running) Wait() *History {
	r.wg.Wait()
	return r.h
}

// Stop ends the run (the Clients stop at their next step: an acquisition
// under way gives up) and waits for it, and returns the History.
func (r *Running) Stop() *History {
	r.cancel()
	return r.Wait()
}

// Run runs w to its end (every Client's rounds, within two minutes) and
// returns its History, unchecked.
func (w Workload) Run(t *testing.T) *History {
	t.Helper()
	return w.Start(t).Wait()
}

// Start starts w and returns at once. Its Clients are closed at the end of
// the test; Stop or Wait before checking the History.
func (w Workload) Start(t *testing.T) *Running {
	t.Helper()
	require.NotNil(t, w.New, "locktest: Workload.New is nil")
	if w.Clients == 0 {
		w.Clients = 3
	}
	if w.Faults {
		w.Clients = max(w.Clients, 3)
	}
	if w.Rounds == 0 {
		w.Rounds = 8
		if testing.Short() {
			w.Rounds = 3
		}
	}
	if w.Lease == 0 {
		w.Lease = 600 * time.Millisecond
	}
	h := NewHistory()
	fence := w.Fence
	if fence == nil {
		fence = NewMemoryFence()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r := &Running{t: t, h: h, cancel: cancel}
	prefix := w.Prefix
	if prefix == "" {
		prefix = uniqueName(t) + ":"
	}
	var workers sync.WaitGroup
	for i := range w.Clients {
		wc := &wlClient{w: &w, r: r, i: i, prefix: prefix, fence: h.Fence(fence), proc: h.Process()}
		p := w.New(t)
		if w.Faults && i == 1 {
			p = stallable(p, &wc.stalled)
		}
		if w.Faults && i == 2 {
			p = silenced(p, &wc.dead)
		}
		opts := append([]lock.ClientOption{lock.WithPollInterval(w.Lease / 5)}, w.ClientOptions...)
		c, err := lock.NewClient(h.Provider(p), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		wc.c = c
		if i == 0 {
			ch, err := c.Observe(ctx, prefix+"role")
			require.NoError(t, err)
			done := h.Observe(c, prefix+"role", ch)
			r.wg.Add(1)
			go func() { defer r.wg.Done(); <-done }()
		}
		for _, kind := range []func(context.Context, int){wc.lockRound, wc.semaphoreRound, wc.termRound} {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for round := range w.Rounds {
					if ctx.Err() != nil || wc.dead.Load() {
						return
					}
					kind(ctx, round)
					if w.Pace > 0 {
						select {
						case <-time.After(w.Pace):
						case <-ctx.Done():
						}
					}
				}
			}()
		}
	}
	// The Observe ends with the run's context: once every Client is done.
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		workers.Wait()
		cancel()
	}()
	return r
}

// wlClient is one Client of a Workload, a process.
type wlClient struct {
	w       *Workload
	r       *Running
	c       *lock.Client
	i       int
	prefix  string
	fence   Fence
	proc    int
	stalled atomic.Bool // its renewals hang
	dead    atomic.Bool // its provider fails every call
	faulted atomic.Bool // its fault was played
}

// pause sleeps up to 10ms, or until ctx ends.
func pause(ctx context.Context) {
	select {
	case <-time.After(time.Duration(rand.IntN(10)) * time.Millisecond):
	case <-ctx.Done():
	}
}

// lockRound takes one of the lock names, each in turn (waiting for it in
// two rounds of three; a grace period in one of four), writes through its fence and
// reads it back, extends it in every other round, and releases it. The
// stalled and the dead Client play their fault on their first lock.
func (wc *wlClient) lockRound(ctx context.Context, round int) {
	h, lease := wc.r.h, wc.w.Lease
	name := fmt.Sprintf("%slock%d", wc.prefix, round%wlLocks)
	o := lock.Options{Wait: round%3 != 0, MaxWait: 4 * lease, Lease: lease}
	if round%4 == 3 {
		o.GracePeriod = 20 * time.Millisecond
	}
	call := h.Now()
	l, err := wc.c.Acquire(ctx, name, o)
	if err != nil {
		return
	}
	wc.r.grants.Add(1)
	h.Track(wc.proc, call, l.Owner(), l)
	value := fmt.Sprintf("c%d-%d", wc.i, round)
	_ = wc.fence.Write(ctx, name, l.Token(), value)
	_, _ = wc.fence.Read(ctx, name)
	if wc.w.Faults && wc.faulted.CompareAndSwap(false, true) {
		switch wc.i {
		case 1:
			wc.stall(ctx, l, name, value)
			return
		case 2:
			wc.dead.Store(true) // it dies holding the lock: nothing more from it
			wc.r.t.Logf("fault: client 2 died holding %s (token %d)", name, l.Token())
			return
		}
	}
	if round%2 == 0 {
		_ = l.Extend(ctx, lease)
	}
	pause(ctx)
	call = h.Now()
	h.Released(wc.proc, l.Owner(), call, l.Release(ctx))
}

// stall plays a holder whose renewals hang (a process cut off from the
// backend, or paused): it waits until its Client tells it the lock is lost
// (within a lease) and a later holder has written through the fence (for
// up to four leases), then writes with its stale token, as a holder that
// did not look would, and releases.
func (wc *wlClient) stall(ctx context.Context, l *lock.Lock, name, value string) {
	wc.stalled.Store(true)
	defer wc.stalled.Store(false)
	select {
	case <-l.Done():
	case <-ctx.Done():
	}
	for end := time.Now().Add(4 * wc.w.Lease); time.Now().Before(end) && ctx.Err() == nil; {
		if v, err := wc.fence.Read(ctx, name); err == nil && v != value {
			break
		}
		time.Sleep(wc.w.Lease / 10)
	}
	werr := wc.fence.Write(ctx, name, l.Token(), value+"-stale")
	call := wc.r.h.Now()
	rerr := l.Release(ctx)
	wc.r.h.Released(wc.proc, l.Owner(), call, rerr)
	wc.r.t.Logf("fault: client 1 stalled holding %s (token %d): told %v; its late write: %v; its release: %v",
		name, l.Token(), l.Err(), werr, rerr)
}

// semaphoreRound takes a hold of weight 1 or 2 of the semaphore, waiting
// for it, and releases it.
func (wc *wlClient) semaphoreRound(ctx context.Context, _ int) {
	h := wc.r.h
	sem, err := wc.c.Semaphore(wc.prefix+"sem", wlSemLimit)
	if err != nil {
		return
	}
	call := h.Now()
	hd, err := sem.Acquire(ctx, 1+rand.IntN(wlMaxWeight), lock.Options{Wait: true, MaxWait: 4 * wc.w.Lease, Lease: wc.w.Lease})
	if err != nil {
		return
	}
	wc.r.grants.Add(1)
	owner := hd.Locks()[0].Owner()
	h.Track(wc.proc, call, owner, hd)
	pause(ctx)
	call = h.Now()
	h.Released(wc.proc, owner, call, hd.Release(ctx))
}

// termRound campaigns for the role (for up to four leases), writes through
// the role's fence with the term's number, and resigns.
func (wc *wlClient) termRound(ctx context.Context, _ int) {
	h, role := wc.r.h, wc.prefix+"role"
	cctx, cancel := context.WithTimeout(ctx, 4*wc.w.Lease)
	call := h.Now()
	term, err := wc.c.Campaign(cctx, role, lock.ElectionOptions{Lease: wc.w.Lease})
	cancel()
	if err != nil {
		return
	}
	wc.r.grants.Add(1)
	h.Track(wc.proc, call, term.Owner(), term)
	_ = wc.fence.Write(ctx, role, term.Token(), term.Owner())
	pause(ctx)
	call = h.Now()
	h.Released(wc.proc, term.Owner(), call, term.Resign(ctx))
}

// stallable returns p with renewals that hang, while stalled is set, until
// their context ends.
func stallable(p lock.Provider, stalled *atomic.Bool) lock.Provider {
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	return &testenv.Hooked{
		Provider: p,
		OnRenew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if stalled.Load() {
				return hang(ctx)
			}
			return p.Renew(ctx, key, owner, ttl)
		},
		OnRenewClaim: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if stalled.Load() {
				return hang(ctx)
			}
			return p.RenewClaim(ctx, key, owner, ttl)
		},
	}
}

// runHistory runs a Workload on the backend, with a stalled and a dead
// Client when its records expire, and checks its History: every
// operation, as the Clients saw it, has a linearization in the models of
// a lock, a counted name, a fenced resource, an Observe and a hold.
func (s *suite) runHistory(t *testing.T) {
	t.Run("HistoryIsLinearizable", func(t *testing.T) {
		w := Workload{New: s.b.New, Faults: s.b.Expires}
		if s.b.Fence != nil {
			w.Fence = s.b.Fence(t)
		}
		if s.b.Remote {
			w.Rounds = testenv.ShortSize(t, 5, 3, "a smaller history")
		}
		// A lease the backend keeps as asked: etcd's are whole seconds.
		w.Lease = max(600*time.Millisecond, s.b.MinLease, 2*s.b.TTLGranularity)
		h := w.Run(t)
		CheckHistory(t, h)
	})
}
