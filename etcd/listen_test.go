package etcd_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/faults"
)

// proxied returns a provider whose client reaches the shared member through
// a proxy that the test can pause, and the proxy.
func proxied(t *testing.T, ns string, opts ...etcd.Option) (*etcd.Provider, *faults.Proxy) {
	t.Helper()
	u, err := url.Parse(endpoint(t))
	require.NoError(t, err)
	px, err := faults.NewProxy(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	cli := newClient(t, "http://"+px.Addr())
	ctx := ctxTimeout(t, 10*time.Second)
	p, err := etcd.NewProvider(ctx, cli, append([]etcd.Option{etcd.WithNamespace(ns)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, px
}

// heldAndQueued makes a key held by a new owner on holder, with a waiter
// on inbox queued behind it on queuer (both for 10s), and returns the
// key, the holder's owner and the waiter.
func heldAndQueued(t *testing.T, ctx context.Context, holder, queuer *etcd.Provider, inbox string) (key, owner string, w lock.Wait) {
	t.Helper()
	key, owner = uniqueName(t), newOwner()
	_, err := holder.Acquire(ctx, key, owner, 10*time.Second)
	require.NoError(t, err)
	w = lock.Wait{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox}
	rec, err := queuer.Queue(ctx, key, w)
	require.NoError(t, err)
	require.True(t, rec.Queued)
	return key, owner, w
}

// A watch that stops answering (its connection silent, as with a member
// cut off or stopped) is given up after a progress request goes
// unanswered: the inbox is told to look again (a Notice without Key) within
// about two progress intervals, and grants reach it again once the
// connection answers.
func TestListenStalledWatchFallsBack(t *testing.T) {
	ns := testNamespace()
	const progress = 500 * time.Millisecond // a progress reply is far quicker, even on a loaded machine
	p, px := proxied(t, ns, etcd.WithProgressInterval(progress))
	other := newProvider(t, ns)
	ctx := ctxTimeout(t, time.Minute)

	inbox := "inbox:" + uniqueName(t)
	got := notices(t, ctx, p, inbox)
	time.Sleep(3 * progress) // answered progress requests: nothing delivered
	assert.Empty(t, got, "a watch that answers is left alone")

	px.Pause()
	paused := time.Now()
	select {
	case g := <-got:
		assert.Equal(t, lock.Notice{}, g, "a stalled watch tells the inbox to look again")
		t.Logf("told to look again %v after the connection went silent", time.Since(paused).Round(time.Millisecond))
		assert.Less(t, time.Since(paused), 20*progress)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "a silent watch was not given up within 5s")
	}
	px.Resume()

	key, a, w := heldAndQueued(t, ctx, other, other, inbox)
	require.NoError(t, other.Release(ctx, key, a))
	deadline := time.After(10 * time.Second)
	for {
		select {
		case g := <-got:
			if g.Key == "" {
				continue // look-again notices from before the connection came back
			}
			assert.Equal(t, w.Owner, g.Owner, "the grant reaches the inbox after the watch was opened again")
			require.NoError(t, other.Release(ctx, key, w.Owner))
			return
		case <-deadline:
			require.FailNow(t, "no grant within 10s after the connection came back")
		}
	}
}

// A process cut off for longer than its session lease loses its queue
// entries with it; when it is back, its Listen lists itself again and its
// waiters look again, and rejoin the queue: the release then hands the lock
// to the waiter, whose poll interval is a minute.
func TestSessionLostWaitersRejoin(t *testing.T) {
	ns := testNamespace()
	p, px := proxied(t, ns, etcd.WithSessionTTL(time.Second), etcd.WithProgressInterval(200*time.Millisecond))
	admin := newProvider(t, ns)
	holder := newLockClient(t, newProvider(t, ns))
	waiter := newLockClient(t, p, lock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, time.Minute)
	name := uniqueName(t)
	waiters := func(n int) func() bool {
		return func() bool {
			rec, err := admin.Inspect(ctx, holder.Key(name))
			return err == nil && rec.Waiters == n
		}
	}

	l, err := holder.Acquire(ctx, name, lock.Options{Lease: 30 * time.Second})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		got <- waiter.Do(ctx, name, lock.Options{Wait: true, MaxWait: 50 * time.Second}, func(context.Context) error { return nil })
	}()
	require.Eventually(t, waiters(1), 10*time.Second, 10*time.Millisecond, "the waiter queues")

	px.Pause()
	require.Eventually(t, waiters(0), 10*time.Second, 20*time.Millisecond, "the entry goes with the session lease")
	px.Resume()
	require.Eventually(t, waiters(1), 20*time.Second, 20*time.Millisecond, "the waiter rejoins the queue")
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
		t.Logf("the waiter held the lock %v after the release", time.Since(released).Round(time.Millisecond))
		assert.Less(t, time.Since(released), 10*time.Second, "handed over, not found by a poll")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the waiter did not get the lock")
	}
}

// A waiter that finds the lock handed to it in the reply to its look again
// (LookAgain) is answered after this provider's Listen of its inbox has
// delivered the grant's message, even when the watch delivers late (a lag
// stands in for a loaded machine): the message does not reach the inbox
// after the waiter could have released the lock, as a grant nobody waits
// for (issue 31, item 12: locktest's NonFairTakesFreeKey/Queue was sent it
// after its waiter had taken the key in a reply and released it, 1 run in
// 10 beside a busy loop).
func TestLookFindingItsGrantFollowsTheMessage(t *testing.T) {
	ns := testNamespace()
	p := newProvider(t, ns)
	other := newProvider(t, ns)
	ctx := ctxTimeout(t, time.Minute)
	const lag = 200 * time.Millisecond // far more than a look's round trip, less than the wait for it (500 ms)
	inbox := "inbox:" + uniqueName(t)
	got := make(chan lock.Notice, 8)
	stop, err := p.Listen(ctx, inbox, func(g lock.Notice) {
		time.Sleep(lag)
		select {
		case got <- g:
		default:
		}
	})
	require.NoError(t, err)
	defer stop()

	key, a, w := heldAndQueued(t, ctx, other, p, inbox)
	require.NoError(t, other.Release(ctx, key, a), "the holder's release hands the key to the waiter and tells its inbox")
	w.Look = lock.LookAgain
	rec, err := p.Queue(ctx, key, w)
	require.NoError(t, err)
	require.Equal(t, w.Owner, rec.Owner, "the look finds the key handed to the waiter")
	select {
	case g := <-got:
		assert.Equal(t, lock.Notice{Key: key, Owner: w.Owner, Token: g.Token, TTL: w.TTL}, g, "the inbox was told of the grant")
	default:
		assert.Fail(t, "the look was answered before its grant's message was delivered")
	}
	require.NoError(t, p.Release(ctx, key, w.Owner))
}
