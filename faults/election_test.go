package faults_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
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
	c := newClient(t, newRedis(t, srv.Addr))
	var afterKill, afterResign []time.Duration
	for r := range 2 * rounds {
		kill := r%2 == 0
		ctx := ctxTimeout(t, 30*time.Second)
		role := "failover:" + strconv.Itoa(r)
		ch := startChild(t, "leader", "FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+role, "FAULTS_LEASE="+electionLease.String())
		word, f := fields(ch.next(ctx))
		require.Equal(t, "elected", word)
		leaderTerm := atou(t, f["term"])
		stats.grants.Add(1)
		s := lead(t, c, role)
		time.Sleep(rand.N(electionLease / 3)) // anywhere in the renewal cycle

		var from time.Time
		if kill {
			require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
			from = time.Now()
			fault(t, "SIGKILL the leader")
		} else {
			ch.send("resign")
			word, f := fields(ch.next(ctx))
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
			expect(t, took <= electionLease+200*time.Millisecond, "the successor ran %v after the leader was killed, want within its lease (%v)", took, electionLease)
		} else {
			afterResign = append(afterResign, took)
			expect(t, took < electionLease/2, "the successor ran %v after the leader resigned, want at once", took)
		}
		s.end(t)
		_ = ch.wait(ctx)
	}
	t.Logf("faults: election successor running after SIGKILL: %s (lease %v, poll 1s)", durations(afterKill), electionLease)
	t.Logf("faults: election successor running after Resign: %s", durations(afterResign))
}

// TestElectionFailoverMemory is TestElectionFailover's measure on the
// memory provider, in one process: the leader's death is a Client whose
// renewals stop getting through (its lease timer still ends its term).
func TestElectionFailoverMemory(t *testing.T) {
	const rounds = 10
	mem := lock.NewMemoryProvider()
	c := newMemoryClient(t, mem)
	var afterDeath, afterResign []time.Duration
	for r := range 2 * rounds {
		die := r%2 == 0
		role := "failover-memory:" + strconv.Itoa(r)
		dying := &deadRenewals{Provider: mem}
		leader, err := newMemoryClient(t, dying).Campaign(context.Background(), role, lock.ElectionOptions{Lease: electionLease})
		require.NoError(t, err)
		s := lead(t, c, role)
		time.Sleep(rand.N(electionLease / 3))
		var from time.Time
		if die {
			dying.dead.Store(true)
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
			expect(t, leader.Context().Err() != nil, "the dead leader's term had not ended when the successor ran")
		} else {
			afterResign = append(afterResign, took)
		}
		s.end(t)
	}
	t.Logf("faults: election (memory) successor running after renewals stop: %s (lease %v, poll 1s)", durations(afterDeath), electionLease)
	t.Logf("faults: election (memory) successor running after Resign: %s", durations(afterResign))
}

// newMemoryClient returns a Client on p, closed at the end of the test.
func newMemoryClient(t *testing.T, p lock.Provider) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(p)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// deadRenewals is a provider whose renewals fail once dead is set: the
// leader's process is gone, as far as the lock store can tell.
type deadRenewals struct {
	lock.Provider
	dead atomic.Bool
}

func (p *deadRenewals) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.dead.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
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
// directly, campaigns: the leader's term's context must end, with ErrLost,
// before the candidate's Campaign returns.
func TestElectionBlackholedLeader(t *testing.T) {
	srv := faults.StartRedis(t)
	p, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	cut := newClient(t, rc, lock.WithReleaseTimeout(time.Second))
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
		p.Pause()
		cutAt := time.Now()
		fault(t, "blackhole the leader just after a renewal")
		term, err := next.Campaign(ctx, role, lock.ElectionOptions{})
		elected := time.Now()
		endedBefore := leader.Context().Err() != nil
		require.NoError(t, err)
		stats.grants.Add(1)
		expect(t, endedBefore, "round %d: the blackholed leader's term had not ended when the candidate was elected, %v after the cut", r, elected.Sub(cutAt))
		expect(t, errors.Is(context.Cause(leader.Context()), lock.ErrLost), "round %d: the leader's context's cause is %v, want ErrLost", r, context.Cause(leader.Context()))
		expect(t, term.Token() > leader.Token(), "round %d: term %d after %d", r, term.Token(), leader.Token())
		t.Logf("round %d: renewal %v before the cut; candidate elected %v after the cut (lease %v)",
			r, cutAt.Sub(renewed).Round(time.Millisecond), elected.Sub(cutAt).Round(time.Millisecond), blackholeLease)
		require.NoError(t, term.Resign(ctx))
	}
}

// roleLeader is the child of TestElectionFailover: it campaigns for
// FAULTS_LOCK with lease FAULTS_LEASE and reports "elected term=T"; then,
// told "resign" on stdin, it reports "resigned at=<Unix ns when Resign was
// called> err=...". Otherwise it leads until it is killed.
func roleLeader(t *testing.T) {
	addr := childEnv(t, "FAULTS_REDIS")
	role := childEnv(t, "FAULTS_LOCK")
	lease, err := time.ParseDuration(childEnv(t, "FAULTS_LEASE"))
	require.NoError(t, err)
	c := newClient(t, newRedis(t, addr))
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
