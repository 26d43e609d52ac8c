package locktest

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

// runElection checks the elections of a lock.Client on the provider
// (Campaign, Term, Lead, Observe), which rest on its queue, its handoff in
// Release, its TTLs and Inspect: each candidate is a Client on a provider
// of its own (b.New), as a process would be.
func (s *suite) runElection(t *testing.T) {
	t.Run("ElectionOneLeaderAtATime", s.oneLeaderAtATime)
	t.Run("ElectionResignHandsOverInArrivalOrder", s.resignHandsOverInArrivalOrder)
	t.Run("ElectionEndedCandidateNeverLeads", s.endedCandidateNeverLeads)
	t.Run("ElectionTermEndsBeforeSuccessorIsElected", s.termEndsBeforeSuccessor)
	t.Run("ElectionLeadCampaignsAgainAfterLoss", s.leadCampaignsAgainAfterLoss)
	t.Run("ElectionObserveSeesEveryTerm", s.observeSeesEveryTerm)
}

// candidates returns n Clients, each on a provider of its own, with the
// identities cand-0, cand-1... and the given poll interval.
func (s *suite) candidates(t *testing.T, n int, poll time.Duration) []*lock.Client {
	cs := make([]*lock.Client, n)
	for i := range cs {
		cs[i] = newClient(t, s.b.New(t), lock.WithIdentity(fmt.Sprintf("cand-%d", i)), lock.WithPollInterval(poll))
	}
	return cs
}

// waitersAre waits until n candidates wait for role.
func waitersAre(t *testing.T, ctx context.Context, c *lock.Client, role string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(ctx, role)
		return err == nil && st.Waiters == n
	}, 10*time.Second, 2*time.Millisecond, "%d candidates wait for the role", n)
}

// oneLeaderAtATime: candidates on several Clients campaign for one role,
// lead a short term each and resign, round after round: never two leaders
// at once, every term's number greater than the one before, no campaign
// or resign failed.
func (s *suite) oneLeaderAtATime(t *testing.T) {
	n, terms := 4, int64(60)
	if s.b.Remote {
		n, terms = 3, 24
	}
	role := uniqueName(t)
	cs := s.candidates(t, n, 50*time.Millisecond)
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	var (
		inside, led atomic.Int64
		mu          sync.Mutex
		numbers     []uint64 // in the order the terms began
		wg          sync.WaitGroup
	)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				term, err := c.Campaign(ctx, role, lock.ElectionOptions{})
				if err != nil {
					assert.Nil(t, term, "candidate %d: a failed campaign returns no term", i)
					if ctx.Err() == nil {
						assert.NoError(t, err, "candidate %d campaigns", i)
					}
					return
				}
				// A term won as ctx ends (Campaign checked it before) is led
				// and resigned as any other.
				assert.EqualValues(t, 1, inside.Add(1), "candidate %d: one leader at a time", i)
				mu.Lock()
				numbers = append(numbers, term.Token())
				mu.Unlock()
				assert.NoError(t, term.Err(), "candidate %d: its term is not lost", i)
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				assert.NoError(t, term.Resign(s.ctx), "candidate %d resigns", i)
				if led.Add(1) >= terms {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, int64(len(numbers)), terms)
	for i := 1; i < len(numbers); i++ {
		assert.Greater(t, numbers[i], numbers[i-1], "term %d's number is greater than term %d's", i, i-1)
	}
	// A candidate that gave up as the role was handed to it hands it back.
	assert.Eventually(t, func() bool {
		st, err := cs[0].Inspect(s.ctx, role)
		return err == nil && st.Free() && st.Waiters == 0
	}, 10*time.Second, 5*time.Millisecond, "every candidate resigned or gave up: the role ends vacant")
}

// resignHandsOverInArrivalOrder: three candidates queue one after the other
// behind a leader; each Resign hands the role to the next of them in the
// order they came, at once: they look again only every hour, so only the
// handoff in the release can elect them.
func (s *suite) resignHandsOverInArrivalOrder(t *testing.T) {
	ctx := s.ctx
	role := uniqueName(t)
	cs := s.candidates(t, 4, time.Hour)
	leader, err := cs[0].Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)
	type won struct {
		i    int
		term *lock.Term
		err  error
		at   time.Time
	}
	wins := make(chan won, 3)
	for i := 1; i < 4; i++ {
		go func() {
			term, err := cs[i].Campaign(ctx, role, lock.ElectionOptions{})
			wins <- won{i, term, err, time.Now()}
		}()
		waitersAre(t, ctx, cs[0], role, i)
	}
	prev := leader
	for want := 1; want < 4; want++ {
		resigned := time.Now()
		require.NoError(t, prev.Resign(ctx))
		assert.Error(t, prev.Context().Err(), "the resigned term's context has ended")
		var w won
		select {
		case w = <-wins:
		case <-time.After(10 * time.Second):
			t.Fatalf("no candidate was elected within 10s of a Resign (candidate %d expected)", want)
		}
		require.NoError(t, w.err)
		assert.Equal(t, want, w.i, "the next candidate in arrival order leads")
		assert.Greater(t, w.term.Token(), prev.Token(), "the new term's number is greater")
		t.Logf("candidate %d elected %v after the Resign", w.i, w.at.Sub(resigned).Round(10*time.Microsecond))
		prev = w.term
	}
	require.NoError(t, prev.Resign(ctx))
	st, err := cs[0].Inspect(ctx, role)
	require.NoError(t, err)
	assert.True(t, st.Free(), "the last Resign, with nobody waiting, leaves the role vacant")
}

// endedCandidateNeverLeads: a candidate whose context ends while it waits
// gets an error matching ErrNotAcquired and the context's, and no term; the
// role goes to the candidate behind it. Then, again and again, the leader
// resigns just as a waiting candidate's context is cancelled: the candidate
// either returns a term it holds or an error, and then never holds the
// role (the grant it may have been handed passes on).
func (s *suite) endedCandidateNeverLeads(t *testing.T) {
	testenv.SkipShort(t, "a conformance check of 2 s (a candidate waits out a 2 s context)")
	ctx := s.ctx
	role := uniqueName(t)
	cs := s.candidates(t, 3, 50*time.Millisecond)
	leader, err := cs[0].Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err)

	gone := make(chan error, 1)
	go func() {
		// Long enough for the test to see it queued on a loaded machine
		// (with 300 ms, a slow Queue and a slow look could miss it).
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		term, err := cs[1].Campaign(wctx, role, lock.ElectionOptions{})
		assert.Nil(t, term, "a candidate whose context ended gets no term")
		gone <- err
	}()
	waitersAre(t, ctx, cs[0], role, 1)
	next := make(chan *lock.Term, 1)
	go func() {
		term, err := cs[2].Campaign(ctx, role, lock.ElectionOptions{})
		assert.NoError(t, err)
		next <- term
	}()
	err = <-gone
	assert.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, leader.Resign(ctx))
	successor := <-next
	require.NotNil(t, successor)
	st, err := cs[0].Inspect(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, "cand-2", st.Identity, "the role passed over the candidate that gave up")
	assert.Equal(t, successor.Owner(), st.Owner)

	rounds := 10
	if s.b.Remote {
		rounds = 5
	}
	leader = successor
	for r := range rounds {
		wctx, cancel := context.WithCancel(ctx)
		type result struct {
			term *lock.Term
			err  error
		}
		got := make(chan result, 1)
		go func() {
			term, err := cs[1].Campaign(wctx, role, lock.ElectionOptions{})
			got <- result{term, err}
		}()
		waitersAre(t, ctx, cs[0], role, 1)
		go cancel()
		require.NoError(t, leader.Resign(ctx), "round %d", r)
		res := <-got
		if res.err == nil {
			st, err := cs[0].Inspect(ctx, role)
			require.NoError(t, err)
			assert.Equal(t, res.term.Owner(), st.Owner, "round %d: a campaign that returned a term holds the role", r)
			assert.NoError(t, res.term.Context().Err(), "round %d: the term returned is live", r)
			require.NoError(t, res.term.Resign(ctx))
		} else {
			assert.ErrorIs(t, res.err, lock.ErrNotAcquired, "round %d", r)
			assert.ErrorIs(t, res.err, context.Canceled, "round %d", r)
			assert.Eventually(t, func() bool {
				st, err := cs[0].Inspect(ctx, role)
				return err == nil && st.Free()
			}, 10*time.Second, 5*time.Millisecond, "round %d: a grant to the candidate that gave up passes on: the role is vacant", r)
		}
		leader, err = cs[0].Campaign(ctx, role, lock.ElectionOptions{})
		require.NoError(t, err, "round %d", r)
	}
	require.NoError(t, leader.Resign(ctx))
}

// termEndsBeforeSuccessor: a leader whose renewals stall (cut off from the
// backend) has its term's context ended, with a *lock.LostError as cause,
// by its lease timer, before the candidate waiting behind it is elected
// (which happens when the record expires, by the backend's clock).
//
// The timer ends the term 2% + 2 ms of the lease (14 ms here) before the
// record can expire, and the leader and the candidate share this process:
// a process that is not scheduled for longer than that (a loaded machine, a
// stop of the runtime) runs the candidate's election and the late timer in
// either order once it resumes. A round in which a canary goroutine
// (testenv.Stalls) was held up for half that margin or more, and the candidate won, proves
// nothing about the order: it is logged, its leader's context must still
// end (with the loss) within a few seconds, and another round is run, up to
// maxRounds. A candidate elected before the leader's lease could have run
// out (the record removed by something else, or a backend whose TTLs are
// short) always fails the check. So does a Campaign that returns the loss
// of its grant (ErrLost), unless the process was held up for 450 ms or
// more: then the round is logged as saying nothing, as above.
func (s *suite) termEndsBeforeSuccessor(t *testing.T) {
	testenv.SkipShort(t, "a conformance check of 2 s or more (rounds of 600 ms leases that run out)")
	if !s.expires(t) {
		return
	}
	ctx := s.ctx
	const (
		lease     = 600 * time.Millisecond
		margin    = lease/50 + 2*time.Millisecond // the lease timer's, before the record's expiry
		conclude  = 3                             // rounds in which the order is checked
		maxRounds = 8
	)
	role := uniqueName(t)
	cut := newClient(t, stalledRenewals(s.b.New(t)), lock.WithIdentity("cut-off"))
	// The successor's record lives for its handoff window until its first
	// renewal: 5 s, not the default 1 s, so that a CI machine too loaded to
	// renew within a second does not take the successor's term from it
	// while the round is checked (seen once, with two CI runs at once).
	next := newClient(t, s.b.New(t), lock.WithPollInterval(20*time.Millisecond), lock.WithHandoffWindow(5*time.Second))
	stall := testenv.WatchStalls(t)
	checked := 0
	for round := 0; checked < conclude && round < maxRounds; round++ {
		stall.Reset()
		before := time.Now()
		leader, err := cut.Campaign(ctx, role, lock.ElectionOptions{Lease: lease})
		if lostHeldUp(t, err, stall.Longest(), round, "the leader") {
			continue
		}
		if errors.Is(err, errStalled) {
			// A grant that reached the candidate late is confirmed by a
			// renewal first, which this Client cannot make.
			t.Logf("round %d: the leader's grant came late, and its confirmation stalled (%v): the round says nothing", round, err)
			continue
		}
		require.NoError(t, err)
		elected := time.Now()
		var ended atomic.Int64 // since elected, when the leader's context ended
		context.AfterFunc(leader.Context(), func() { ended.Store(int64(time.Since(elected))) })
		stall.Reset()
		successor, err := next.Campaign(ctx, role, lock.ElectionOptions{})
		endedBefore := leader.Context().Err() != nil
		won := time.Now()
		got := won.Sub(elected)
		held := stall.Longest()
		if lostHeldUp(t, err, held, round, "the successor") {
			_ = leader.Resign(ctx)
			continue
		}
		require.NoError(t, err)
		assert.GreaterOrEqual(t, won.Sub(before), lease-margin,
			"round %d: the candidate was elected before the leader's lease could have run out: the record was removed (by another client?) or expired early", round)
		assert.Greater(t, successor.Token(), leader.Token(), "round %d", round)
		require.Eventually(t, func() bool { return ended.Load() != 0 }, 5*time.Second, time.Millisecond,
			"round %d: the cut-off leader's context ends", round)
		assert.ErrorIs(t, context.Cause(leader.Context()), lock.ErrLost, "round %d: the term's context's cause is the loss", round)
		assert.ErrorIs(t, leader.Err(), lock.ErrLost, "round %d", round)
		t.Logf("round %d: after the election, the leader's context ended at %v, the successor was elected at %v (lease %v; the longest this process was held up: %v)",
			round, time.Duration(ended.Load()).Round(time.Millisecond), got.Round(time.Millisecond), lease, held.Round(time.Millisecond))
		switch {
		case endedBefore:
			checked++
		case held >= margin/2:
			t.Logf("round %d: the process was held up for %v, against a margin of %v: the order of the two says nothing in this round", round, held.Round(time.Millisecond), margin)
		default:
			checked++
			assert.Fail(t, "the cut-off leader's context had not ended when the successor was elected",
				"round %d: the successor was elected at %v, the leader's context ended at %v, and the process was held up for %v at most",
				round, got.Round(time.Millisecond), time.Duration(ended.Load()).Round(time.Millisecond), held.Round(time.Millisecond))
		}
		_ = leader.Resign(ctx)
		require.NoError(t, successor.Resign(ctx))
	}
	if checked < conclude {
		t.Logf("the order was checked in %d rounds of %d: the process was held up longer than the margin in the others", checked, maxRounds)
	}
}

// lostHeldUp reports whether err, a Campaign's, is the loss of a grant
// that the process was held up long enough to lose before Campaign
// returned (a grant is taken with half its TTL left at least: 500 ms of a
// waiter's one-second handoff window, 600 ms of the leader's lease), and
// logs it: the round says nothing. Such a loss without a hold-up of 450 ms
// fails the check later, at the NoError.
func lostHeldUp(t *testing.T, err error, held time.Duration, round int, who string) bool {
	t.Helper()
	if !errors.Is(err, lock.ErrLost) || held < 450*time.Millisecond {
		return false
	}
	t.Logf("round %d: %s's grant was lost before its Campaign returned (%v), the process held up for %v: the round says nothing", round, who, err, held.Round(time.Millisecond))
	return true
}

// leadCampaignsAgainAfterLoss: a Lead whose role is taken from it (an
// operator's ForceRelease, three times) campaigns again without a restart
// and leads a new term, with a greater number; its function never runs
// twice at once, runs under the term's Lock, and its context ends with the
// loss; OnElected and OnStopped are called once for each term it led, in
// order, and for no other; when Lead's context ends, it resigns and
// returns the context's error.
func (s *suite) leadCampaignsAgainAfterLoss(t *testing.T) {
	const losses = 3
	role := uniqueName(t)
	c := newClient(t, s.b.New(t), lock.WithPollInterval(20*time.Millisecond))
	op := newClient(t, s.b.New(t))
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	var (
		running          atomic.Int32
		mu               sync.Mutex
		elected, stopped []uint64 // by the hooks
		ran              []uint64 // by the function
		stopErrs, causes []error
		leading          = make(chan uint64, losses+2)
		returned         = make(chan error, 1)
	)
	go func() {
		returned <- c.Lead(ctx, role, func(ctx context.Context) error {
			assert.EqualValues(t, 1, running.Add(1), "the function never runs twice at once")
			defer running.Add(-1)
			l, ok := lock.FromContext(ctx)
			if !assert.True(t, ok, "the function's context carries the term's lock") {
				return nil
			}
			mu.Lock()
			ran = append(ran, l.Token())
			mu.Unlock()
			leading <- l.Token()
			<-ctx.Done()
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return context.Cause(ctx)
		}, lock.LeadOptions{
			ElectionOptions: lock.ElectionOptions{Lease: 600 * time.Millisecond},
			Pause:           20 * time.Millisecond,
			OnElected: func(term *lock.Term) {
				mu.Lock()
				defer mu.Unlock()
				elected = append(elected, term.Token())
			},
			OnStopped: func(term *lock.Term, err error) {
				mu.Lock()
				defer mu.Unlock()
				stopped = append(stopped, term.Token())
				stopErrs = append(stopErrs, err)
				select {
				case <-term.Done():
				default:
					assert.Fail(t, "OnStopped is called once the term has ended")
				}
			},
		})
	}()
	var last uint64
	for i := 0; i <= losses; i++ {
		var token uint64
		select {
		case token = <-leading:
		case err := <-returned:
			t.Fatalf("Lead returned %v before its context ended", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("Lead did not lead term %d within 20s", i+1)
		}
		assert.Greater(t, token, last, "term %d's number is greater than the last", i+1)
		last = token
		if i < losses {
			_, err := op.ForceRelease(s.ctx, role)
			require.NoError(t, err)
		}
	}
	stop()
	select {
	case err := <-returned:
		assert.ErrorIs(t, err, context.Canceled, "Lead returns its context's error")
	case <-time.After(20 * time.Second):
		t.Fatal("Lead did not return within 20s of its context's end")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, ran, elected, "OnElected is called for each term the function ran in, in order")
	assert.Equal(t, elected, stopped, "OnStopped is called for each term OnElected was, in order, and no other")
	require.Len(t, causes, losses+1)
	for i := range losses {
		assert.ErrorIs(t, causes[i], lock.ErrLost, "term %d: the function's context ends with the loss", i+1)
		assert.ErrorIs(t, stopErrs[i], lock.ErrLost, "term %d: OnStopped is told of the loss", i+1)
	}
	assert.ErrorIs(t, causes[losses], context.Canceled, "the last term's function ends with Lead's context")
	st, err := op.Inspect(s.ctx, role)
	require.NoError(t, err)
	assert.True(t, st.Free(), "Lead resigned when its context ended: the role is vacant, found %+v", st)
}

// observeSeesEveryTerm: an observer sees the role vacant, then each of three
// terms, in order, with the leader's identity and term number, then vacant
// again after the last Resign; no term is reported twice, and nothing
// vacant between terms that Resign handed over.
func (s *suite) observeSeesEveryTerm(t *testing.T) {
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	role := uniqueName(t)
	cs := s.candidates(t, 3, 50*time.Millisecond)
	watcher := newClient(t, s.b.New(t), lock.WithPollInterval(10*time.Millisecond))
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	next := func(what string) lock.Leader { t.Helper(); return nextLeader(t, seen, what) }
	first := next("the state now")
	assert.True(t, first.Vacant(), "nobody leads yet: %+v", first)
	assert.Equal(t, role, first.Role)

	terms := make([]*lock.Term, 3)
	var err0 error
	terms[0], err0 = cs[0].Campaign(ctx, role, lock.ElectionOptions{})
	require.NoError(t, err0)
	got := make(chan *lock.Term, 2)
	for i := 1; i < 3; i++ {
		go func() {
			term, err := cs[i].Campaign(ctx, role, lock.ElectionOptions{})
			assert.NoError(t, err)
			got <- term
		}()
		waitersAre(t, ctx, watcher, role, i)
	}
	for i := range terms {
		if i > 0 {
			terms[i] = <-got
		}
		l := next(fmt.Sprintf("term %d", i+1))
		assert.Equal(t, terms[i].Token(), l.Term, "term %d is observed, in order", i+1)
		assert.Equal(t, terms[i].Owner(), l.Owner, "term %d's owner", i+1)
		assert.Equal(t, fmt.Sprintf("cand-%d", i), l.Identity, "term %d's leader's identity", i+1)
		assert.False(t, l.Since.IsZero(), "term %d: since when", i+1)
		time.Sleep(100 * time.Millisecond) // ten polls of the watcher
		require.NoError(t, terms[i].Resign(ctx))
	}
	last := next("nobody, after the last Resign")
	assert.True(t, last.Vacant(), "after the last Resign nobody leads: %+v", last)
	stop()
	for l := range seen {
		assert.Fail(t, "nothing is observed after the context ends", "%+v", l)
	}
}
