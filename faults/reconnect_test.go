package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// TestLostGrantAfterReconnect: a waiter whose inbox connection breaks while
// the lock is handed to it (the grant's message is lost with the connection)
// looks again as soon as go-redis has reconnected its subscription, not a
// poll interval later: the inbox wakes every waiter when the connection is
// back. The poll interval here is a minute, so only that wake-up can find
// the grant within the bound.
func TestLostGrantAfterReconnect(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	p, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	holder := newClient(t, direct)
	waiter := newClient(t, newRedis(t, p.Addr()), lock.WithPollInterval(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	name := "reconnect:" + t.Name()

	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, name, lock.Options{Wait: true})
		if err == nil {
			stats.grants.Add(1)
			err = wl.Release(ctx)
		}
		got <- err
	}()
	// The waiter is queued.
	require.True(t, waitFor(10*time.Second, func() bool {
		n, _ := direct.LLen(ctx, keyOf(name)+":q").Result()
		return n == 1
	}), "the waiter queues")

	// Hold the waiter's traffic, hand it the lock (the message waits in the
	// proxy), then cut: the message is lost with the connection.
	p.Pause()
	require.NoError(t, l.Release(ctx))
	stats.grants.Add(1)
	fault(t, "cut the waiter's connections while its grant was published")
	p.Cut()
	p.Resume()
	start := time.Now()

	select {
	case err := <-got:
		require.NoError(t, err)
		took := time.Since(start)
		t.Logf("the waiter found its grant %v after the cut (poll interval 1m)", took.Round(time.Millisecond))
		// Without the wake-up it would look only when the holder's record it saw
		// expires, 15 s (a lease) after it queued.
		expect(t, took < 5*time.Second, "the waiter took %v to find a grant lost with its connection", took)
	case <-time.After(25 * time.Second):
		expect(t, false, "the waiter did not find its grant within 25s of the cut (poll interval 1m)")
	}
}
