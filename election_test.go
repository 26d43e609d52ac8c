package lock_test

// Elections (Campaign, Term, Lead, Observe) where the provider does not
// matter: options, contexts, hooks, pauses, errors. What every backend must
// do for them is checked by the conformance suite (locktest/election.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestCampaignHasNoHoldLimit: a term's lock is held with NoHoldLimit as its
// MaxDuration, not DefaultMaxDuration's hour, and waits with no MaxWait of
// its own; a TermLimit set in ElectionOptions ends the term with
// LostMaxDuration, as the cause of its context.
func TestCampaignHasNoHoldLimit(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	var acquired atomic.Pointer[lock.Event]
	c := testenv.NewClient(t, lock.NewMemoryProvider(), lock.WithEvents(func(e lock.Event) {
		if e.Kind == lock.EventAcquired {
			acquired.Store(&e)
		}
	}))
	role := testenv.Name(t)
	term, err := c.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	assert.Equal(t, lock.NoHoldLimit, acquired.Load().MaxDuration, "a term has no hold limit by default")
	assert.Equal(t, lock.DefaultLease, acquired.Load().Lease)
	assert.Equal(t, role, term.Role())
	require.NoError(t, term.Resign(ctx))

	testenv.SkipShort(t, "the rest waits out a term's 3 s TermLimit")
	// A renewed term: renewals every third of the 1s lease, each of which may
	// come some 600ms late on a loaded machine before the lease runs out
	// (LostLeaseRanOut) ahead of the 3s TermLimit. Were ElectionOptions'
	// TermLimit dropped, the term would have no hold limit and not end.
	term, err = c.Campaign(ctx, role, lock.ElectionOptions{Lease: time.Second, TermLimit: 3 * time.Second})
	require.NoError(t, err)
	select {
	case <-term.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a term with a TermLimit of 3s did not end")
	}
	var le *lock.LostError
	require.ErrorAs(t, context.Cause(term.Context()), &le, "the term's context ends with the loss")
	assert.Equal(t, lock.LostMaxDuration, le.Reason)
	<-term.Done()
	assert.ErrorIs(t, term.Err(), lock.ErrLost)
	assert.ErrorIs(t, term.Resign(ctx), lock.ErrLost, "Resign after a loss returns the loss")
}

// TestTermOutlivesCampaignContext: Campaign's context bounds the wait
// only: the term lasts after it ends. The term's context has its values,
// and FromContext finds the term's lock in it, with the term's number.
func TestTermOutlivesCampaignContext(t *testing.T) {
	type key struct{}
	c := testenv.NewClient(t, lock.NewMemoryProvider())
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "request-7"))
	term, err := c.Campaign(ctx, testenv.Name(t), lock.ElectionOptions{})
	require.NoError(t, err)
	cancel()
	time.Sleep(10 * time.Millisecond)
	assert.NoError(t, term.Context().Err(), "the term outlives Campaign's context")
	assert.NoError(t, term.Err())
	assert.Equal(t, "request-7", term.Context().Value(key{}), "the term's context has Campaign's values")
	l, ok := lock.FromContext(term.Context())
	require.True(t, ok, "FromContext finds the term's lock")
	assert.Equal(t, term.Token(), l.Token())
	assert.Equal(t, term.Owner(), l.Owner())
	assert.False(t, term.Since().IsZero())
	require.NoError(t, term.Resign(context.Background()))
}

// TestResignEndsContextBeforeHandover: by the time the next candidate's
// Campaign returns, the resigned term's context has ended (context.Canceled:
// Resign cancels it before it releases), Done is closed and Err is nil; a
// second Resign says ErrReleased.
func TestResignEndsContextBeforeHandover(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	p := lock.NewMemoryProvider()
	a := testenv.NewClient(t, p)
	b := testenv.NewClient(t, p, lock.WithPollInterval(time.Hour))
	role := testenv.Name(t)
	first, err := a.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	type won struct {
		term       *lock.Term
		err        error
		firstEnded error // first's context's error when the Campaign returned
	}
	got := make(chan won, 1)
	go func() {
		term, err := b.Campaign(ctx, role, lock.ElectionOptions{})
		got <- won{term, err, first.Context().Err()}
	}()
	awaitWaiters(t, a, role, 1, "candidates wait for the role")
	require.NoError(t, first.Resign(ctx))
	w := <-got
	require.NoError(t, w.err)
	assert.ErrorIs(t, w.firstEnded, context.Canceled, "the resigned term's context ended before the successor's Campaign returned")
	assert.ErrorIs(t, context.Cause(first.Context()), context.Canceled, "a Resign's cause is context.Canceled")
	assertClosed(t, first.Done(), "Done is closed after Resign")
	assert.NoError(t, first.Err(), "a clean Resign is no loss")
	assert.ErrorIs(t, first.Resign(ctx), lock.ErrReleased, "Resign after Resign")
	assert.Greater(t, w.term.Token(), first.Token())
	require.NoError(t, w.term.Resign(ctx))
}

// grantThenCancel returns a provider over p that calls cancel right after
// it grants a free key (to an Acquire or a Queue): the caller's context
// ends as the role is granted.
func grantThenCancel(p lock.Provider, cancel context.CancelFunc) *hookedProvider {
	return &hookedProvider{
		Provider: p,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			rec, err := p.Acquire(ctx, key, owner, ttl)
			cancel()
			return rec, err
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			rec, err := p.Queue(ctx, key, w)
			cancel()
			return rec, err
		},
	}
}

// TestCampaignEndedAsGrantedHandsOn: a campaign whose context ends just as
// the role is granted returns an error, not the term, and hands the role
// on: it is vacant after.
func TestCampaignEndedAsGrantedHandsOn(t *testing.T) {
	mem := lock.NewMemoryProvider()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testenv.NewClient(t, grantThenCancel(mem, cancel))
	role := testenv.Name(t)
	term, err := c.Campaign(ctx, role, lock.ElectionOptions{})
	assert.Nil(t, term)
	assert.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.Canceled)
	st, err := c.Inspect(context.Background(), role)
	require.NoError(t, err)
	assert.True(t, st.Free(), "the role granted to a campaign that ended is handed on: %+v", st)
}

// TestElectionBadInput: bad roles, options, functions and pauses are
// refused with ErrInvalidArgument, at once.
func TestElectionBadInput(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	c := testenv.NewClient(t, lock.NewMemoryProvider())
	fn := func(context.Context) error { return nil }
	_, err := c.Campaign(ctx, "", lock.ElectionOptions{})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty role")
	_, err = c.Campaign(ctx, "r", lock.ElectionOptions{Lease: -time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a negative lease")
	_, err = c.Campaign(ctx, "r", lock.ElectionOptions{TermLimit: -time.Second})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a negative TermLimit")
	assert.ErrorIs(t, c.Lead(ctx, "r", nil, lock.LeadOptions{}), lock.ErrInvalidArgument, "a nil function")
	assert.ErrorIs(t, c.Lead(ctx, "", fn, lock.LeadOptions{}), lock.ErrInvalidArgument, "an empty role")
	assert.ErrorIs(t, c.Lead(ctx, "r", fn, lock.LeadOptions{Pause: -time.Second}), lock.ErrInvalidArgument, "a negative pause")
	assert.ErrorIs(t, c.Lead(ctx, "r", fn, lock.LeadOptions{ElectionOptions: lock.ElectionOptions{Lease: -1}}), lock.ErrInvalidArgument, "a negative lease")
	_, err = c.Observe(ctx, "")
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty role")
	st, err := c.Inspect(ctx, "r")
	require.NoError(t, err)
	assert.True(t, st.Free(), "nothing was taken")
}

// TestLeadHandsOverWhenFunctionReturns: two Leads of one role on two
// Clients; each function returns nil after a short term. Each return
// resigns the role, which passes to the other Lead at once (it waits in
// the queue while the first pauses); the terms alternate, the functions
// never overlap, and each term is reported to its own Lead's hooks once.
func TestLeadHandsOverWhenFunctionReturns(t *testing.T) {
	p := lock.NewMemoryProvider()
	role := testenv.Name(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		who    []int    // which Lead ran each term, in order
		terms  []uint64 // the terms' numbers, in order
		hooks  [2][]string
		wg     sync.WaitGroup
	)
	for i := range 2 {
		c := testenv.NewClient(t, p, lock.WithPollInterval(time.Hour))
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Lead(ctx, role, func(ctx context.Context) error {
				assert.EqualValues(t, 1, inside.Add(1), "one function at a time")
				defer inside.Add(-1)
				l, _ := lock.FromContext(ctx)
				mu.Lock()
				who, terms = append(who, i), append(terms, l.Token())
				n := len(who)
				mu.Unlock()
				if n >= 8 {
					stop()
					return nil
				}
				// Hand over only once the other Lead waits (it may start late).
				assert.True(t, waitUntil(func() bool {
					st, err := c.Inspect(ctx, role)
					return ctx.Err() != nil || err == nil && st.Waiters == 1
				}, 10*time.Second), "the other Lead campaigns")
				return nil
			}, lock.LeadOptions{
				Pause:     50 * time.Millisecond,
				OnElected: func(term *lock.Term) { mu.Lock(); hooks[i] = append(hooks[i], "elected"); mu.Unlock() },
				OnStopped: func(term *lock.Term, err error) {
					assert.NoError(t, err, "a function that returned nil, and a clean handover")
					mu.Lock()
					hooks[i] = append(hooks[i], "stopped")
					mu.Unlock()
				},
			})
			assert.ErrorIs(t, err, context.Canceled)
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, len(who), 8)
	for k := 1; k < len(who); k++ {
		assert.NotEqual(t, who[k-1], who[k], "term %d: the role passed to the other Lead when the function returned", k)
		assert.Greater(t, terms[k], terms[k-1])
	}
	for i := range 2 {
		for k, h := range hooks[i] {
			assert.Equal(t, []string{"elected", "stopped"}[k%2], h, "Lead %d's hooks alternate", i)
		}
		assert.Len(t, hooks[i], 2*countOf(who, i), "Lead %d: two hooks per term it ran", i)
	}
}

func countOf(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// failingCampaigns returns a memory provider whose Acquire and Queue fail
// the first n times, as an unreachable server would, and send the time of
// every call to calls.
func failingCampaigns(n int32, calls chan<- time.Time) *hookedProvider {
	mem := lock.NewMemoryProvider()
	var left atomic.Int32
	left.Store(n)
	fail := func() bool {
		calls <- time.Now()
		return left.Add(-1) >= 0
	}
	return &hookedProvider{
		Provider: mem,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if fail() {
				return lock.Record{}, errElectionDown
			}
			return mem.Acquire(ctx, key, owner, ttl)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			if fail() {
				return lock.Record{}, errElectionDown
			}
			return mem.Queue(ctx, key, w)
		},
	}
}

var errElectionDown = errors.New("dial tcp 10.0.0.9:6379: connect: connection refused")

// TestLeadPausesAfterFailedCampaigns: campaigns that fail (the provider
// down) are tried again after Pause, doubled for each failure in a row,
// and logged at warning level; the first that succeeds elects Lead, whose
// hooks were called for no failed campaign.
func TestLeadPausesAfterFailedCampaigns(t *testing.T) {
	const pause = 20 * time.Millisecond
	calls := make(chan time.Time, 64)
	p := failingCampaigns(3, calls)
	logs := &syncBuffer{}
	c := testenv.NewClient(t, p, lock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx, stop := context.WithCancel(context.Background())
	var elected, stopped atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Lead(ctx, testenv.Name(t), func(ctx context.Context) error {
			stop()
			<-ctx.Done()
			return nil
		}, lock.LeadOptions{
			Pause:     pause,
			OnElected: func(*lock.Term) { elected.Add(1) },
			OnStopped: func(*lock.Term, error) { stopped.Add(1) },
		})
	}()
	assert.ErrorIs(t, leadReturned(t, done, 20*time.Second, "Lead did not end"), context.Canceled)
	close(calls)
	var at []time.Time
	for c := range calls {
		at = append(at, c)
	}
	require.GreaterOrEqual(t, len(at), 4, "three failed campaigns and one that succeeded")
	for k, want := range []time.Duration{pause, 2 * pause, 4 * pause} {
		assert.GreaterOrEqual(t, at[k+1].Sub(at[k]), want, "campaign %d came after a pause of %v", k+2, want)
	}
	assert.EqualValues(t, 1, elected.Load(), "OnElected for the one term won")
	assert.EqualValues(t, 1, stopped.Load())
	assert.Len(t, logs.lines("lock: campaign failed"), 3, "each failed campaign is logged")
}

// ledByAnother returns a memory provider and a role on it that a Client of
// its own (returned) leads until the test ends.
func ledByAnother(t *testing.T) (lock.Provider, string, *lock.Client) {
	t.Helper()
	p := lock.NewMemoryProvider()
	role := testenv.Name(t)
	holder := testenv.NewClient(t, p)
	term, err := holder.Campaign(context.Background(), role, lock.ElectionOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = term.Resign(context.Background()) })
	return p, role, holder
}

// leadReturned returns the error a Lead sent on done, or fails the test
// with msg when none comes within d.
func leadReturned(t *testing.T, done <-chan error, d time.Duration, msg string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatal(msg)
		return nil
	}
}

// TestLeadNeverCallsHooksForATermItDidNotLead: a Lead whose context ends
// while it waits behind another leader calls neither hook and never runs
// its function; it returns its context's cause.
func TestLeadNeverCallsHooksForATermItDidNotLead(t *testing.T) {
	p, role, holder := ledByAnother(t)
	c := testenv.NewClient(t, p)
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	var calls atomic.Int32
	go func() {
		done <- c.Lead(ctx, role, func(context.Context) error { calls.Add(1); return nil }, lock.LeadOptions{
			OnElected: func(*lock.Term) { calls.Add(1) },
			OnStopped: func(*lock.Term, error) { calls.Add(1) },
		})
	}()
	awaitWaiters(t, holder, role, 1, "candidates wait for the role")
	cancel(cause)
	err := leadReturned(t, done, 10*time.Second, "Lead did not return when its context ended")
	assert.ErrorIs(t, err, cause, "Lead returns its context's cause")
	assert.Zero(t, calls.Load(), "no hook and no function for a term Lead did not lead")
}

// TestLeadStopsWhenClientCloses: Close ends a Lead that campaigns with an
// error matching ErrClosed.
func TestLeadStopsWhenClientCloses(t *testing.T) {
	p, role, holder := ledByAnother(t)
	c, err := lock.NewClient(p)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- c.Lead(context.Background(), role, func(context.Context) error { return nil }, lock.LeadOptions{})
	}()
	awaitWaiters(t, holder, role, 1, "candidates wait for the role")
	require.NoError(t, c.Close())
	assert.ErrorIs(t, leadReturned(t, done, 10*time.Second, "Lead did not return when its Client closed"), lock.ErrClosed)
}

// TestLeadResignsWhenFunctionPanics: a panic in the leader's function is
// not recovered, and the role is resigned on the way out; OnStopped is not
// called.
func TestLeadResignsWhenFunctionPanics(t *testing.T) {
	c := testenv.NewClient(t, lock.NewMemoryProvider())
	role := testenv.Name(t)
	var stopped atomic.Int32
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_ = c.Lead(context.Background(), role, func(context.Context) error { panic("leader bug") },
			lock.LeadOptions{OnStopped: func(*lock.Term, error) { stopped.Add(1) }})
	}()
	assert.Equal(t, "leader bug", <-recovered, "the panic goes on")
	st, err := c.Inspect(context.Background(), role)
	require.NoError(t, err)
	assert.True(t, st.Free(), "the role was resigned: %+v", st)
	assert.Zero(t, stopped.Load())
}

// TestLeadReportsFunctionError: an error of the leader's function reaches
// OnStopped and the log (warning), and Lead campaigns again.
func TestLeadReportsFunctionError(t *testing.T) {
	logs := &syncBuffer{}
	c := testenv.NewClient(t, lock.NewMemoryProvider(), lock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	boom := errors.New("boom")
	var runs atomic.Int32
	errs := make(chan error, 4)
	err := c.Lead(ctx, testenv.Name(t), func(context.Context) error {
		if runs.Add(1) == 2 {
			stop()
		}
		return boom
	}, lock.LeadOptions{Pause: time.Millisecond, OnStopped: func(_ *lock.Term, err error) { errs <- err }})
	assert.ErrorIs(t, err, context.Canceled)
	assert.EqualValues(t, 2, runs.Load(), "Lead campaigned again after the function failed")
	assert.ErrorIs(t, <-errs, boom)
	assert.ErrorIs(t, <-errs, boom)
	assert.Len(t, logs.lines("lock: leader's function failed"), 1, "a failure of its own is logged; the second ended with Lead's context")
}

// flakyInspect returns a provider over mem whose Inspect fails while fail
// is set, and counts its calls in calls.
func flakyInspect(mem lock.Provider, fail *atomic.Bool, calls *atomic.Int32) *hookedProvider {
	return &hookedProvider{Provider: mem, OnInspect: func(ctx context.Context, key string) (lock.Record, error) {
		calls.Add(1)
		if fail.Load() {
			return lock.Record{}, errElectionDown
		}
		return mem.Inspect(ctx, key)
	}}
}

// TestObserveReadsAgainAfterErrors: reads that fail are reported once (Err
// set, the last state kept), and the first read that succeeds after them is
// sent, so that a change made meanwhile is not missed; the channel closes
// when the context ends, and when the Client closes.
func TestObserveReadsAgainAfterErrors(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var fail atomic.Bool
	var calls atomic.Int32
	p := flakyInspect(mem, &fail, &calls)
	role := testenv.Name(t)
	watcher := testenv.NewClient(t, p, lock.WithPollInterval(5*time.Millisecond))
	a := testenv.NewClient(t, mem, lock.WithIdentity("a"))
	b := testenv.NewClient(t, mem, lock.WithIdentity("b"))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	next := func() lock.Leader { t.Helper(); return observed(t, seen) }
	assert.True(t, next().Vacant())
	ta, err := a.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	l := next()
	assert.Equal(t, "a", l.Identity)
	assert.Equal(t, ta.Token(), l.Term)

	fail.Store(true)
	failed := next()
	assert.ErrorIs(t, failed.Err, errElectionDown, "a failed read is reported")
	assert.Equal(t, l.Owner, failed.Owner, "with the last state")
	// The role changes hands while reads fail; several reads fail.
	require.NoError(t, ta.Resign(ctx))
	tb, err := b.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	before := calls.Load()
	require.Eventually(t, func() bool { return calls.Load() >= before+3 }, 10*time.Second, time.Millisecond)
	fail.Store(false)
	l = next()
	assert.NoError(t, l.Err, "a failure is reported once, then the next read that succeeds")
	assert.Equal(t, "b", l.Identity, "the change made while reads failed is seen")
	assert.Equal(t, tb.Token(), l.Term)
	stop()
	for range seen {
	}
	require.NoError(t, tb.Resign(context.Background()))

	// Closing the Client closes the channel too.
	c, err := lock.NewClient(mem)
	require.NoError(t, err)
	seen, err = c.Observe(context.Background(), role)
	require.NoError(t, err)
	assert.True(t, (<-seen).Vacant())
	require.NoError(t, c.Close())
	select {
	case _, ok := <-seen:
		assert.False(t, ok, "nothing changed: the channel is closed")
	case <-time.After(10 * time.Second):
		t.Fatal("the channel was not closed when the Client closed")
	}
}

// TestRoleIsNotALock (issue 31, item 7): a role's owner is marked, so that
// Inspect, List and PartOf say "role", and a role is not mixed with a lock
// of the same name: Campaign on a name held with Acquire, and Acquire (with
// or without Wait) or Do on a role held by a Campaign, fail at once with
// ErrInvalidArgument instead of waiting out their deadline.
func TestRoleIsNotALock(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	mem := lock.NewMemoryProvider()
	c, other := testenv.NewClient(t, mem), testenv.NewClient(t, mem)

	term, err := c.Campaign(ctx, "scheduler", lock.ElectionOptions{})
	require.NoError(t, err)
	st, err := c.Inspect(ctx, "scheduler")
	require.NoError(t, err)
	assert.Equal(t, "role", st.Kind)
	assert.Equal(t, "scheduler", st.Of)
	kind, of, _ := lock.PartOf(c.Key("scheduler"), term.Owner())
	assert.Equal(t, []string{"role", "scheduler"}, []string{kind, of})
	all, _, err := c.List(ctx, 10)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, "role", all[0].Kind)

	start := time.Now()
	for _, o := range []lock.Options{{}, {Wait: true, MaxWait: 10 * time.Second}, {Wait: true, Fair: true, MaxWait: 10 * time.Second}} {
		_, err = other.Acquire(ctx, "scheduler", o)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire %+v on a role", o)
		assert.ErrorContains(t, err, "election role")
	}
	err = other.Do(ctx, "scheduler", lock.Options{Wait: true}, func(context.Context) error { return nil })
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Do on a role")
	require.NoError(t, term.Resign(ctx))

	l, err := other.Acquire(ctx, "job", lock.Options{})
	require.NoError(t, err)
	_, err = c.Campaign(ctx, "job", lock.ElectionOptions{})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Campaign on a lock")
	assert.ErrorContains(t, err, "in use as a lock")
	assert.Less(t, time.Since(start), 5*time.Second, "refused at once, not at a deadline")
	st, err = c.Inspect(ctx, "job")
	require.NoError(t, err)
	assert.Empty(t, st.Kind, "a plain lock")
	assert.Zero(t, st.Waiters, "the refused candidate left the queue")
	require.NoError(t, l.Release(ctx))
}

// TestLeadStopsWhenClosedDuringPause: Close ends a Lead that pauses
// between terms with ErrClosed at once, as its doc says; pauseLead watched
// only ctx, so Lead returned only when the pause was over.
func TestLeadStopsWhenClosedDuringPause(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	c, err := lock.NewClient(lock.NewMemoryProvider())
	require.NoError(t, err)
	elected := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Lead(ctx, "pausing", func(context.Context) error {
			elected <- struct{}{}
			return nil // the term ends at once: Lead pauses an hour
		}, lock.LeadOptions{Pause: time.Hour})
	}()
	<-elected
	require.NoError(t, c.Close())
	assert.ErrorIs(t, leadReturned(t, done, 5*time.Second, "Lead went on pausing after Close"), lock.ErrClosed)
}

// notifyCounter passes every call on, counting Notify and Watch, and
// failing the first failWatches calls of Watch.
type notifyCounter struct {
	lock.Provider
	notified, watches atomic.Int32
	failWatches       int32
}

func (p *notifyCounter) Notify(ctx context.Context, key string, n lock.Notice) error {
	p.notified.Add(1)
	return p.Provider.Notify(ctx, key, n)
}

func (p *notifyCounter) Watch(ctx context.Context, key string, deliver func(lock.Notice)) (func(), error) {
	if p.watches.Add(1) <= p.failWatches {
		return nil, errElectionDown
	}
	return p.Provider.Watch(ctx, key, deliver)
}

// TestOnlyRolesNotify: plain locks, waits and handoffs tell no Watch (their
// cycle costs what it did); a term tells its start and its end; a forced
// release tells its end.
func TestOnlyRolesNotify(t *testing.T) {
	ctx := context.Background()
	p := &notifyCounter{Provider: lock.NewMemoryProvider()}
	c := testenv.NewClient(t, p)
	name := testenv.Name(t)
	for range 3 {
		require.NoError(t, c.Do(ctx, name, lock.Options{Wait: true}, func(context.Context) error { return nil }))
	}
	l, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	got := acquireAndRelease(ctx, c, name, lock.Options{Wait: true})
	awaitWaiters(t, c, name, 1, "a waiter queues")
	require.NoError(t, l.Release(ctx)) // a handoff
	require.NoError(t, <-got)
	assert.Zero(t, p.notified.Load(), "a lock's acquire, wait, handoff and release notify nobody")

	term, err := c.Campaign(ctx, name+"-role", lock.ElectionOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.notified.Load(), "a term won is told")
	require.NoError(t, term.Resign(ctx))
	assert.EqualValues(t, 2, p.notified.Load(), "its end is told")
	_, err = c.Campaign(ctx, name+"-role", lock.ElectionOptions{})
	require.NoError(t, err)
	_, err = c.ForceRelease(ctx, name+"-role")
	require.NoError(t, err)
	assert.EqualValues(t, 4, p.notified.Load(), "a forced release is told")
}

// TestObservePollsWhenWatchFails: a provider whose Watch fails is read
// every poll interval: Observe still sees each term that lasts longer
// than one.
func TestObservePollsWhenWatchFails(t *testing.T) {
	mem := lock.NewMemoryProvider()
	watcher := testenv.NewClient(t, &notifyCounter{Provider: mem, failWatches: math.MaxInt32}, lock.WithPollInterval(5*time.Millisecond))
	leader := testenv.NewClient(t, mem, lock.WithIdentity("a"))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	role := testenv.Name(t)
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	next := func() lock.Leader { t.Helper(); return observed(t, seen) }
	assert.True(t, next().Vacant())
	term, err := leader.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	l := next()
	assert.Equal(t, term.Token(), l.Term, "the term is read at a poll")
	require.NoError(t, term.Resign(ctx))
	assert.True(t, next().Vacant(), "and its end")
}

// observed returns the next value Observe sends on seen, within 10s.
func observed(t *testing.T, seen <-chan lock.Leader) lock.Leader {
	t.Helper()
	select {
	case l := <-seen:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("nothing observed within 10s")
	}
	return lock.Leader{}
}

// TestObserveWatchesAgainAfterAFailure: a Watch that failed is opened again
// at the next read; then terms too short for any poll are heard.
func TestObserveWatchesAgainAfterAFailure(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &notifyCounter{Provider: mem, failWatches: 1}
	watcher := testenv.NewClient(t, p, lock.WithPollInterval(20*time.Millisecond))
	leader := testenv.NewClient(t, mem)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	role := testenv.Name(t)
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	assert.True(t, observed(t, seen).Vacant())
	require.Eventually(t, func() bool { return p.watches.Load() >= 2 }, 10*time.Second, time.Millisecond,
		"the Watch is tried again")
	for i := range 3 {
		term, err := leader.Campaign(ctx, role, lock.ElectionOptions{})
		require.NoError(t, err)
		require.NoError(t, term.Resign(ctx))
		assert.Equal(t, term.Token(), observed(t, seen).Term, "term %d is heard", i+1)
		assert.True(t, observed(t, seen).Vacant(), "and its end")
	}
	assert.EqualValues(t, 2, p.watches.Load(), "one Watch once it succeeded")
}

// TestObserveSendsATermHeardDuringARead: a term that begins and ends while
// Observe reads the role (its notice heard after Observe took the notices
// it reads for), followed by a term the read finds, is sent before that
// term (issue 38: it was dropped as older than the term sent; under 30
// back-to-back Campaign and Resign rounds on the memory provider, 1 to 8
// terms of 30 went unsent in 3 runs of 8).
func TestObserveSendsATermHeardDuringARead(t *testing.T) {
	ctx := testenv.Context(t, 20*time.Second)
	mem := lock.NewMemoryProvider()
	var hold atomic.Bool
	reading, proceed := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(release)
	watched := &testenv.Hooked{Provider: mem, OnInspect: func(ctx context.Context, key string) (lock.Record, error) {
		if hold.CompareAndSwap(true, false) {
			reading <- struct{}{}
			<-proceed
		}
		return mem.Inspect(ctx, key)
	}}
	cand := testenv.NewClient(t, mem)
	watcher := testenv.NewClient(t, watched, lock.WithPollInterval(time.Hour))
	role := testenv.Name(t)
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	next := func(what string) lock.Leader {
		t.Helper()
		select {
		case l := <-seen:
			require.NoError(t, l.Err, what)
			return l
		case <-ctx.Done():
			t.Fatalf("nothing observed: wanted %s", what)
		}
		return lock.Leader{}
	}
	require.True(t, next("the state now").Vacant())

	hold.Store(true) // the read that a's notice wakes waits until c leads
	a, err := cand.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	select {
	case <-reading:
	case <-ctx.Done():
		t.Fatal("Observe did not read after a's notice")
	}
	require.NoError(t, a.Resign(ctx))
	b, err := cand.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	require.NoError(t, b.Resign(ctx))
	c, err := cand.Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	release()

	for _, term := range []*lock.Term{a, b, c} {
		assert.Equal(t, term.Token(), next(fmt.Sprintf("term %d", term.Token())).Term, "each term, in order")
	}
	require.NoError(t, c.Resign(ctx))
	assert.True(t, next("nobody, after the last Resign").Vacant())
}
