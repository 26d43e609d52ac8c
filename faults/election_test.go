package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
)

// electionLease is the leader's lease in the election fault tests: renewed
// every third of it, so a leader that dies leaves between two thirds of a
// lease and a whole lease of it.
const electionLease = time.Second

// successor is a Lead of a role, in this process, that waits behind a leader
// elsewhere: ran receives when its function starts (it runs until the end of
// the round).
type successor struct {
	ran  chan time.Time
	term chan uint64
	stop context.CancelFunc
	done chan error
}

// lead starts a Lead of role on c and waits until it waits in the role's
// queue behind the current leader.
func lead(t *testing.T, c *lock.Client, role string) *successor {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	s := &successor{ran: make(chan time.Time, 1), term: make(chan uint64, 1), stop: stop, done: make(chan error, 1)}
	go func() {
		s.done <- c.Lead(ctx, role, func(ctx context.Context) error {
			s.ran <- time.Now()
			l, _ := lock.FromContext(ctx)
			s.term <- l.Token()
			<-ctx.Done()
			return nil
		}, lock.LeadOptions{})
	}()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(context.Background(), role)
		return err == nil && st.Waiters == 1
	}, 10*time.Second, time.Millisecond, "the successor waits for the role")
	return s
}

// end stops the successor's Lead (it resigns) and waits for it.
func (s *successor) end(t *testing.T) {
	t.Helper()
	s.stop()
	select {
	case err := <-s.done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the successor's Lead did not return")
	}
}

// TestElectionFailover measures how long a role is without a running
// leader when its leader, in another process, dies (SIGKILL, at a random
// point of its renewal cycle) or resigns: from the kill, or from the start
// of the Resign, until the function of a Lead waiting in this process runs.
// The successor's Client has the default poll interval (1 s); the leader's
// lease is 1 s. A dead leader's role passes when its record expires (the
// successor, having read its TTL, looks again then): within a lease of the
// kill. A resigned one's passes in the release, at once.
func TestElectionFailover(t *testing.T) {
	rounds := 5
	if os.Getenv("LOCK_LONG_FAULTS") == "1" {
		rounds = 20
	}
	srv := faults.StartRedis(t)
	var seen looks
	c := testenv.NewClient(t, seen.provider(lock.NewRedisProvider(newRedis(t, srv.Addr))))
	stalls := testenv.WatchStalls(t)
	var afterKill, afterResign []time.Duration
	for r := range 2 * rounds {
		kill := r%2 == 0
		ctx := ctxTimeout(t, 30*time.Second)
		role := "failover:" + strconv.Itoa(r)
		ch := startChild(t, "leader", "FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+role, "FAULTS_LEASE="+electionLease.String())
		word, f := faults.Fields(ch.Next(ctx))
		require.Equal(t, "elected", word)
		leaderTerm := atou(t, f["term"])
		stats.grants.Add(1)
		seen.reset()
		s := lead(t, c, role)
		time.Sleep(rand.N(electionLease / 3)) // anywhere in the renewal cycle
		stalls.Reset()

		var from time.Time
		if kill {
			require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGKILL))
			from = time.Now()
			fault(t, "SIGKILL the leader")
		} else {
			ch.Send("resign")
			word, f := faults.Fields(ch.Next(ctx))
			require.Equal(t, "resigned", word)
			require.Equal(t, "<nil>", f["err"], "the leader's Resign")
			from = time.Unix(0, atoi(t, f["at"])) // the wall clocks of one machine
		}
		var ran time.Time
		select {
		case ran = <-s.ran:
		case <-time.After(3 * electionLease):
			t.Fatalf("round %d: no successor ran within %v", r, 3*electionLease)
		}
		stats.grants.Add(1)
		took := ran.Sub(from)
		term := <-s.term
		expect(t, term > leaderTerm, "the successor's term %d is not greater than the leader's %d", term, leaderTerm)
		if kill {
			afterKill = append(afterKill, took)
			expect(t, took <= electionLease+killSlack, "the successor ran %v after the leader was killed, want within its lease (%v) + %v; %s (this process held up %v at most)",
				took, electionLease, killSlack, lookedWhen(seen.all(), from), stalls.Longest().Round(time.Millisecond))
		} else {
			afterResign = append(afterResign, took)
			expect(t, took < electionLease/2, "the successor ran %v after the leader resigned, want at once", took)
		}
		s.end(t)
		_ = ch.Wait(ctx)
	}
	t.Logf("faults: election successor running after SIGKILL: %s (lease %v, poll 1s)", durations(afterKill), electionLease)
	t.Logf("faults: election successor running after Resign: %s", durations(afterResign))
}

// look is one request of a successor's wait (a Queue call): when it was
// sent and answered, and what the reply said.
type look struct {
	sent, answered time.Time
	ttl            time.Duration
	queued         bool
}

// looks records the looks of a Client's waits.
type looks struct {
	mu   sync.Mutex
	list []look
}

// provider returns p, with its Queue calls recorded.
func (ls *looks) provider(p lock.Provider) lock.Provider {
	return &testenv.Hooked{Provider: p, OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
		sent := time.Now()
		rec, err := p.Queue(ctx, key, w)
		if err == nil {
			ls.mu.Lock()
			ls.list = append(ls.list, look{sent: sent, answered: time.Now(), ttl: rec.TTL, queued: rec.Queued})
			ls.mu.Unlock()
		}
		return rec, err
	}}
}

func (ls *looks) reset() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.list = nil
}

func (ls *looks) all() []look {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return slices.Clone(ls.list)
}

// lookedWhen says, for a message, when the successor looked, from the
// kill at from: the last look that left it queued, and what it saw, and
// when it looked next. A look answered with the leader's record and no
// TTL (0: Redis's PTTL in the record's last millisecond, before the fix of
// issue 31 item 11) leaves the successor to its poll interval.
func lookedWhen(ls []look, from time.Time) string {
	since := func(at time.Time) time.Duration { return at.Sub(from).Round(time.Millisecond) }
	for i := len(ls) - 1; i > 0; i-- {
		if prev := ls[i-1]; prev.queued {
			return fmt.Sprintf("its last look that left it queued, at %v, saw a TTL of %v (due at %v), and the next was sent at %v",
				since(prev.sent), prev.ttl, since(prev.answered.Add(prev.ttl)), since(ls[i].sent))
		}
	}
	return fmt.Sprintf("it looked %d times", len(ls))
}

// killSlack is how late, past the lease, a successor may run after its
// leader was killed. A correct library runs it when the record expires,
// 0.67-1.0 s after the kill, and a loaded machine adds to that (a
// PostgreSQL twin of this test saw 1.2 s). A successor that ignored the TTL
// it read and looked only every poll interval (1 s, from when it queued,
// just before the kill's random third of a lease) runs at its first poll
// after the expiry: 1 s - x or 2 s - x after the kill, x < 333 ms, so
// 1.67 s or more whenever the record outlived its first poll; lease + 600
// ms catches that as lease + 200 ms did. So does it catch a successor that
// misses the expiry once, by a poll, which it then runs in the same window,
// (1.67 s, 2 s]. The one failure of this bound (1.725 s, issue 31 item 11)
// fell there, and the library had a way to miss the expiry: a look timed
// by a TTL of a whole lease (the poll interval too, so without the
// millisecond a waiter adds) could reach Redis in the record's last
// millisecond, whose PTTL is 0, which the Redis provider reported as "TTL
// unknown" (TestLookInTheRecordsLastMillisecond). The bound stays: a slow
// machine has not been seen to take more than 1.2 s, and the failure
// message says what the successor's looks saw, which tells the two apart.
const killSlack = 600 * time.Millisecond

// TestElectionFailoverMemory is TestElectionFailover's measure on the
// memory provider, in one process: the leader's death is a Client whose
// renewals stop getting through (its lease timer still ends its term, at
// the latest lateAllowance after the successor ran).
func TestElectionFailoverMemory(t *testing.T) {
	const rounds = 10
	mem := lock.NewMemoryProvider()
	c := testenv.NewClient(t, mem)
	stalls := testenv.WatchStalls(t)
	var afterDeath, afterResign []time.Duration
	for r := range 2 * rounds {
		die := r%2 == 0
		role := "failover-memory:" + strconv.Itoa(r)
		var dead atomic.Bool
		losses, lostAt := lossTimes("")
		leader, err := testenv.NewClient(t, deadRenewals(mem, &dead), losses).Campaign(context.Background(), role, lock.ElectionOptions{Lease: electionLease})
		require.NoError(t, err)
		s := lead(t, c, role)
		time.Sleep(rand.N(electionLease / 3))
		stalls.Reset()
		var from time.Time
		if die {
			dead.Store(true)
			// Its last renewal got through before this: the record lives
			// until a lease after it.
			from = time.Now()
		} else {
			from = time.Now()
			require.NoError(t, leader.Resign(context.Background()))
		}
		var ran time.Time
		select {
		case ran = <-s.ran:
		case <-time.After(3 * electionLease):
			t.Fatalf("round %d: no successor ran within %v", r, 3*electionLease)
		}
		<-s.term
		took := ran.Sub(from)
		if die {
			afterDeath = append(afterDeath, took)
			// The lease timer ends the term 22 ms before the record can
			// expire; a process held up longer runs the successor and the
			// late timer in either order. A term that never ends, or ends
			// only well after the successor ran, still fails.
			lost := toldAt(leader.Context().Done(), lostAt, 5*time.Second)
			held := stalls.Longest()
			allow := lateAllowance(electionLease, held)
			if expect(t, !lost.IsZero(), "round %d: the dead leader's term had not ended 5s after the successor ran", r) {
				expect(t, lost.Sub(ran) < allow, "round %d: the dead leader's term ended %v after the successor ran, want before it or within %v (a tenth of the lease and %v held up)",
					r, lost.Sub(ran).Round(time.Millisecond), allow.Round(time.Millisecond), held.Round(time.Millisecond))
				expect(t, errors.Is(context.Cause(leader.Context()), lock.ErrLost), "round %d: the dead leader's context's cause is %v, want ErrLost", r, context.Cause(leader.Context()))
			}
		} else {
			afterResign = append(afterResign, took)
		}
		s.end(t)
	}
	t.Logf("faults: election (memory) successor running after renewals stop: %s (lease %v, poll 1s)", durations(afterDeath), electionLease)
	t.Logf("faults: election (memory) successor running after Resign: %s", durations(afterResign))
}

// deadRenewals returns p with its renewals failing once dead is set: the
// leader's process is gone, as far as the lock store can tell.
func deadRenewals(p lock.Provider, dead *atomic.Bool) lock.Provider {
	return &testenv.Hooked{Provider: p, OnRenew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
		if dead.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return p.Renew(ctx, key, owner, ttl)
	}}
}

// durations summarizes ds: min, median and max.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	return "n=" + strconv.Itoa(len(s)) + " min=" + r(s[0]) + " p50=" + r(s[len(s)/2]) + " max=" + r(s[len(s)-1])
}

// TestElectionBlackholedLeader cuts a leader off from Redis (a proxy that
// stops forwarding, just after a renewal) while a candidate, connected
// directly, campaigns: the leader's term must end, with ErrLost, before the
// candidate's Campaign returns (its EventLost's Time at most lateAllowance
// after it: a tenth of the lease, plus however long this process was held
// up).
func TestElectionBlackholedLeader(t *testing.T) {
	srv := faults.StartRedis(t)
	p, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	losses, lostAt := lossTimes("")
	cut := newClient(t, rc, lock.WithReleaseTimeout(time.Second), losses)
	stalls := testenv.WatchStalls(t)
	next := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(50*time.Millisecond))
	t.Cleanup(func() { _ = p.Close() })
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 30*time.Second)
	for r := range 3 {
		role := "blackholed-leader:" + strconv.Itoa(r)
		p.Resume()
		leader, err := cut.Campaign(ctx, role, lock.ElectionOptions{Lease: blackholeLease})
		require.NoError(t, err)
		stats.grants.Add(1)
		renewed, ok := renewedAt(t, direct, keyOf(role), blackholeLease)
		require.True(t, ok, "the leader did not renew its lease within %v", blackholeLease)
		select {
		case <-lostAt: // a loss left over from an earlier round
		default:
		}
		p.Pause()
		cutAt := time.Now()
		stalls.Reset()
		fault(t, "blackhole the leader just after a renewal")
		term, err := next.Campaign(ctx, role, lock.ElectionOptions{})
		elected := time.Now()
		require.NoError(t, err)
		stats.grants.Add(1)
		// The lease timer ends the term 26 ms before the record can expire;
		// a process held up longer runs the election and the late timer in
		// either order. A term that never ends, or ends only when a hung
		// call fails (a second or more later), still fails.
		lost := toldAt(leader.Context().Done(), lostAt, 5*time.Second)
		held := stalls.Longest()
		allow := lateAllowance(blackholeLease, held)
		if expect(t, !lost.IsZero(), "round %d: the blackholed leader's term had not ended 5s after the candidate was elected, %v after the cut", r, elected.Sub(cutAt)) {
			expect(t, lost.Sub(elected) < allow, "round %d: the blackholed leader's term ended %v after the candidate was elected (%v after the cut), want before it or within %v (a tenth of the lease and %v held up)",
				r, lost.Sub(elected).Round(time.Millisecond), elected.Sub(cutAt).Round(time.Millisecond), allow.Round(time.Millisecond), held.Round(time.Millisecond))
			expect(t, errors.Is(context.Cause(leader.Context()), lock.ErrLost), "round %d: the leader's context's cause is %v, want ErrLost", r, context.Cause(leader.Context()))
		}
		expect(t, term.Token() > leader.Token(), "round %d: term %d after %d", r, term.Token(), leader.Token())
		told := "never"
		if !lost.IsZero() {
			told = lost.Sub(cutAt).Round(time.Millisecond).String()
		}
		t.Logf("round %d: renewal %v before the cut; candidate elected %v after the cut, leader told %s after it (lease %v; the longest this process was held up: %v)",
			r, cutAt.Sub(renewed).Round(time.Millisecond), elected.Sub(cutAt).Round(time.Millisecond), told, blackholeLease, held.Round(time.Millisecond))
		require.NoError(t, term.Resign(ctx))
	}
}

// roleLeader is the child of TestElectionFailover: it campaigns for
// FAULTS_LOCK with lease FAULTS_LEASE and reports "elected term=T"; then,
// told "resign" on stdin, it reports "resigned at=<Unix ns when Resign was
// called> err=...". Otherwise it leads until it is killed.
func roleLeader(t *testing.T) {
	rc, role := childRedis(t)
	lease := childDuration(t, "FAULTS_LEASE")
	c := newClient(t, rc)
	ctx := ctxTimeout(t, 60*time.Second)
	term, err := c.Campaign(ctx, role, lock.ElectionOptions{Lease: lease})
	require.NoError(t, err)
	report("elected term=%d", term.Token())
	if cmd := readLine(stdin()); cmd != "resign" {
		t.Fatalf("child: want resign on stdin, got %q", cmd)
	}
	at := time.Now().UnixNano()
	err = term.Resign(ctx)
	report("resigned at=%d err=%q", at, errString(err))
}

func init() {
	roles["lead-writer"] = roleLeadWriter
}

// TestElectionStoppedLeaders runs three processes that Lead one role and,
// while they lead, make a fenced write (lock.RedisFence, with the term's
// number) every 10 ms, without looking at their context in between, as a
// leader that does not know it was paused would. Round after round (20,
// lease 400 ms), the test stops the leader (SIGSTOP), waits until another
// process leads and has written, and continues it after two leases:
//   - every write the stopped leader starts after it continues is refused
//     (lock.ErrStaleToken), and its term ends;
//   - the writes that passed the fence ran in the order of their terms (the
//     fence's log never goes down);
//   - each round's new term is greater than the stopped one;
//   - each process's Lead campaigns again after its loss, without a
//     restart: every process leads again later or waits in the queue.
func TestElectionStoppedLeaders(t *testing.T) {
	const (
		procs = 3
		lease = 400 * time.Millisecond
	)
	const rounds = 20
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	obs := newClient(t, direct)
	ctx := ctxTimeout(t, 2*time.Minute)
	const role = "stopped-leaders"
	_, _, log := fenceKeysOf(role)

	var b faults.WriteBoard
	children := make([]*faults.Child, procs)
	for i := range children {
		children[i] = startChild(t, "lead-writer", "FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+role,
			"FAULTS_LEASE="+lease.String(), "FAULTS_NAME="+faults.WriterName(i))
		go b.Follow(i, children[i].Lines)
	}
	leaderOf := func() (int, uint64) {
		st, err := obs.Inspect(ctx, role)
		require.NoError(t, err)
		return faults.WriterIndex(st.Identity, procs), st.Token
	}
	var last uint64
	var stale, staleRefused, inFlight int
	for r := range rounds {
		i, term := b.AwaitLeader(t, r, leaderOf)
		expect(t, term > last, "round %d: term %d after %d", r, term, last)
		last = term
		fault(t, "SIGSTOP the leader")
		next, resumed := b.StopLeader(t, r, children[i], i, term, 2*lease, leaderOf)
		stats.grants.Add(1)
		// A write of the stopped leader's in flight when it was stopped is
		// not counted here: the fence's log says whether it ran before the
		// new leader's writes.
		passed, refused, failed := b.ResumedWrites(term, resumed)
		n := passed + refused + failed
		if n == 0 {
			inFlight++ // its last write was under way when it was stopped
		}
		stale += n
		staleRefused += refused + failed
		expect(t, passed == 0, "round %d: %d of writer-%d's %d writes with term %d started after it continued passed the fence (term %d had written)",
			r, passed, i, n, term, next)
	}
	for _, c := range children {
		c.Send("quit")
	}
	for _, c := range children {
		require.NoError(t, c.Wait(ctx), "child failed:\n%s", c.Out())
	}
	terms, err := direct.LRange(ctx, log, 0, -1).Result()
	require.NoError(t, err)
	var prev uint64
	for k, s := range terms {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		expect(t, n >= prev, "the fence let term %d write after term %d (write %d of %d)", n, prev, k, len(terms))
		prev = n
	}
	elected := b.ElectedBy()
	for i := range procs {
		expect(t, elected[i] >= 2, "writer-%d led %d terms: it did not campaign again after its losses", i, elected[i])
	}
	t.Logf("faults: election stopped leaders: rounds=%d fenced_writes_passed=%d writes_after_resume=%d refused=%d rounds_ending_on_a_write_in_flight=%d terms_led_per_process=%v",
		rounds, len(terms), stale, staleRefused, inFlight, elected)
}

// roleLeadWriter is the child of TestElectionStoppedLeaders: it Leads
// FAULTS_LOCK (lease FAULTS_LEASE, identity FAULTS_NAME) and, while it
// leads, writes through the fence every 10 ms, reporting "elected term=T",
// "write term=T result=ok|stale|error start=<Unix ns>" and "ended term=T"
// (read by a faults.WriteBoard); a refused or failed write, or a write made
// once the term's context has ended, ends the term. "quit" on stdin ends
// its Lead.
func roleLeadWriter(t *testing.T) {
	rc, role := childRedis(t)
	lease := childDuration(t, "FAULTS_LEASE")
	c := newClient(t, rc, lock.WithIdentity(childEnv(t, "FAULTS_NAME")), lock.WithPollInterval(50*time.Millisecond))
	fence, data, log := fenceKeysOf(role)
	ctx, quit := context.WithCancel(context.Background())
	go func() {
		readLine(stdin())
		quit()
	}()
	err := c.Lead(ctx, role, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		for {
			start := time.Now()
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := fenceWrite.Run(wctx, rc, fence, l.Token(), []string{data, log}, strconv.FormatUint(l.Token(), 10)).Err()
			cancel()
			report("write term=%d result=%s start=%d", l.Token(), faults.WriteResult(err), start.UnixNano())
			switch {
			case err != nil:
				return err
			case ctx.Err() != nil:
				return context.Cause(ctx)
			}
			time.Sleep(10 * time.Millisecond) // not watching ctx: a leader that may be paused anywhere
		}
	}, lock.LeadOptions{
		ElectionOptions: lock.ElectionOptions{Lease: lease},
		Pause:           50 * time.Millisecond,
		OnElected:       func(term *lock.Term) { report("elected term=%d", term.Token()) },
		OnStopped:       func(term *lock.Term, _ error) { report("ended term=%d", term.Token()) },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("child: Lead returned %v", err)
	}
}

// TestLookInTheRecordsLastMillisecond: a waiter whose look reaches Redis in
// the last millisecond of the record it waits behind still takes the lock
// when that record expires, not a poll interval later (issue 31, item 11).
// Redis's PTTL rounds what is left down, so such a look is answered with a
// TTL of 0, which a Record reads as "unknown", and a waiter that knows no
// TTL looks again at its next poll. TestElectionFailover's successor ran
// 1.725 s after its leader's SIGKILL, most likely that way: its look, timed by a TTL of
// a whole lease (1 s, the poll interval too, so without the millisecond a
// waiter adds), most likely landed in the expiry's millisecond. Here the
// waiter's first look is held by a hooked provider until it reaches Redis
// in the record's expiry millisecond (PEXPIRETIME, less half a round trip):
// a round whose look came to Redis before or after it (a reply with more
// than 1ms left, or none) says nothing, and rounds are tried until 5 land,
// 50 at most. A waiter answered with a TTL of 0 looks again a poll
// interval (1 s) after it; one answered with 1ms, at once.
func TestLookInTheRecordsLastMillisecond(t *testing.T) {
	const (
		poll    = time.Second
		ttl     = 200 * time.Millisecond
		landing = 5
	)
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	rp := lock.NewRedisProvider(newRedis(t, srv.Addr))
	var aim atomic.Int64 // when the round's first look is sent, Unix ns: 0 once it was
	var landed atomic.Bool
	hooked := &testenv.Hooked{Provider: rp, OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
		if ns := aim.Swap(0); ns > 0 {
			at := time.Unix(0, ns)
			time.Sleep(time.Until(at) - 2*time.Millisecond)
			for time.Now().Before(at) { // a sleep overshoots: spin the last part
			}
			rec, err := rp.Queue(ctx, key, w)
			landed.Store(err == nil && rec.Queued && rec.Owner != "" && rec.TTL <= time.Millisecond)
			return rec, err
		}
		return rp.Queue(ctx, key, w)
	}}
	c := testenv.NewClient(t, hooked, lock.WithPollInterval(poll))
	ctx := ctxTimeout(t, time.Minute)
	judged := 0
	for r := 0; judged < landing && r < 10*landing; r++ {
		name := "last-ms:" + strconv.Itoa(r)
		_, err := rp.Acquire(ctx, keyOf(name), "gone-holder", ttl) // nobody renews it
		require.NoError(t, err)
		ms, err := direct.Do(ctx, "PEXPIRETIME", recordKey(keyOf(name))).Int64()
		require.NoError(t, err)
		sent := time.Now()
		require.NoError(t, direct.Ping(ctx).Err())
		// A third of a millisecond into the expiry's millisecond, when the
		// call reaches Redis half a round trip after it is sent.
		aim.Store(time.UnixMilli(ms).Add(time.Millisecond/3 - time.Since(sent)/2).UnixNano())
		landed.Store(false)
		l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 5 * time.Second})
		require.NoError(t, err)
		took := time.Since(time.UnixMilli(ms))
		require.NoError(t, l.Release(ctx))
		if !landed.Load() {
			t.Logf("round %d: the look missed the expiry's millisecond; the lock was taken %v after it", r, took.Round(time.Millisecond))
			continue
		}
		judged++
		t.Logf("round %d: the look came in the record's last millisecond; the lock was taken %v after it", r, took.Round(time.Millisecond))
		expect(t, took < poll/2, "round %d: a waiter whose look came in the record's last millisecond took the lock %v after it expired, want at once, not at its next poll (%v)",
			r, took.Round(time.Millisecond), poll)
	}
	require.Equal(t, landing, judged, "looks that landed in the expiry's millisecond")
}
