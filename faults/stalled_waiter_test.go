package faults_test

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

const (
	stalledLease  = 2 * time.Second
	stalledWindow = 300 * time.Millisecond
	stalledPoll   = 100 * time.Millisecond
	stalledLive   = 4 // live waiters behind the stopped one
	// stalledFirst bounds when the first live waiter gets the lock after
	// the release: the handoff window and a look (~400 ms), and 1.2 s for a
	// loaded machine; under the lease (2 s) the lock idled for, for the
	// stopped waiter, before the handoff window (2.002 s measured then).
	stalledFirst = stalledWindow + stalledPoll + 1200*time.Millisecond
)

// TestStoppedWaiterDoesNotIdleTheLock queues five waiters for a held lock:
// first a child process, then four live Clients. The child is stopped
// (SIGSTOP) and the holder releases, which hands the lock to the child.
// Nobody takes it up, so it passes on at the end of the handoff window: the
// live waiters get the lock in turn, the first within the handoff window plus
// a poll interval of the release, each next one within a handoff of the
// release before it (before the handoff window, the lock idled for the
// stopped waiter's lease). The child, continued two leases after it was
// stopped, finds its grant gone, waits again and gets the lock last. Tokens
// increase in grant order; no two holders overlap (issue 23).
func TestStoppedWaiterDoesNotIdleTheLock(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "stalled"
	opts := []lock.ClientOption{lock.WithPollInterval(stalledPoll), lock.WithHandoffWindow(stalledWindow)}
	holder := newClient(t, newRedis(t, srv.Addr), opts...)
	h, err := holder.Acquire(ctx, name, lock.Options{Lease: stalledLease})
	require.NoError(t, err)
	waiters := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			st, err := holder.Inspect(ctx, name)
			return err == nil && st.Waiters == n
		}, 10*time.Second, 5*time.Millisecond, "%d waiters queue", n)
	}

	ch := startChild(t, "waiter", "FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+name,
		"FAULTS_LEASE="+stalledLease.String(), "FAULTS_WINDOW="+stalledWindow.String(), "FAULTS_POLL="+stalledPoll.String())
	waiters(1)

	type grant struct {
		token       uint64
		got, freed  time.Time
		overlapping bool
	}
	var (
		mu     sync.Mutex
		grants []grant
		active int
		wg     sync.WaitGroup
	)
	for i := range stalledLive {
		c := newClient(t, newRedis(t, srv.Addr), opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: stalledLease})
			if !expect(t, err == nil, "live waiter: %v", err) {
				return
			}
			g := grant{token: l.Token(), got: time.Now()}
			mu.Lock()
			active++
			g.overlapping = active > 1
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			active--
			g.freed = time.Now()
			grants = append(grants, g)
			mu.Unlock()
			expect(t, l.Release(ctx) == nil, "live waiter's release")
		}()
		waiters(2 + i)
	}

	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGSTOP))
	fault(t, "SIGSTOP the first waiter")
	stopped := time.Now()
	released := time.Now()
	require.NoError(t, h.Release(ctx)) // hands the lock to the stopped waiter
	wg.Wait()

	time.Sleep(time.Until(stopped.Add(2 * stalledLease)))
	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGCONT))
	word, f := faults.Fields(ch.Next(ctx))
	require.Equal(t, "held", word, "the child's report")
	childToken := atou(t, f["token"])
	childAt := time.Unix(0, atoi(t, f["at"]))
	require.NoError(t, ch.Wait(ctx), "the child failed; its output:\n%s", ch.Out())
	stats.grants.Add(int64(len(grants)) + 1)

	require.Less(t, stalledFirst, stalledLease, "the first grant's bound must be under the lease the lock idled for without the handoff window")
	sort.Slice(grants, func(i, j int) bool { return grants[i].got.Before(grants[j].got) })
	require.Len(t, grants, stalledLive)
	prev, prevToken := released, h.Token()
	var longest time.Duration
	for i, g := range grants {
		gap := g.got.Sub(prev)
		longest = max(longest, gap)
		bound := stalledFirst // the first: the window and a look
		if i > 0 {
			bound = 500 * time.Millisecond // a handoff
		}
		expect(t, gap < bound, "live grant %d came %v after the release before it, want < %v", i, gap, bound)
		expect(t, !g.overlapping, "live grant %d overlapped another", i)
		expect(t, g.token > prevToken, "token %d of live grant %d is not above %d", g.token, i, prevToken)
		prev, prevToken = g.freed, g.token
	}
	t.Logf("live waiters: first granted %v after the release (handoff window %v, poll %v, lease %v); longest gap %v; the stopped waiter, continued after %v, granted %v after the last live release",
		grants[0].got.Sub(released).Round(time.Millisecond), stalledWindow, stalledPoll, stalledLease, longest.Round(time.Millisecond),
		2*stalledLease, childAt.Sub(prev).Round(time.Millisecond))
	expect(t, childToken > prevToken, "the resumed waiter's token %d is not above the last live one %d", childToken, prevToken)
	expect(t, childAt.After(prev), "the resumed waiter held the lock before the last live waiter released it")
}

// roleWaiter is the child of TestStoppedWaiterDoesNotIdleTheLock: it waits
// for the lock, reports "held token=T at=UNIXNANO", holds it 50 ms and
// releases it.
func roleWaiter(t *testing.T) {
	rc, name := childRedis(t)
	lease, window, poll := childDuration(t, "FAULTS_LEASE"), childDuration(t, "FAULTS_WINDOW"), childDuration(t, "FAULTS_POLL")
	c := newClient(t, rc, lock.WithHandoffWindow(window), lock.WithPollInterval(poll))
	ctx := ctxTimeout(t, 50*time.Second)
	l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 45 * time.Second, Lease: lease})
	require.NoError(t, err)
	report("held token=%d at=%s", l.Token(), strconv.FormatInt(time.Now().UnixNano(), 10))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, l.Release(context.Background()))
}
