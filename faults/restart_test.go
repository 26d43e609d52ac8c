package faults_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// TestRedisRestart kills Redis (no persistence) while a lock is held and a
// waiter waits for it, and starts it again, empty, on the same port. The
// holder must be told it lost the lock, the waiter must not be stuck, and the
// tokens granted after the restart must still be greater than those before.
func TestRedisRestart(t *testing.T) {
	srv := faults.StartRedis(t)
	const (
		name  = "restart"
		lease = 600 * time.Millisecond
	)
	key := keyOf(name)
	holder := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(100*time.Millisecond), lock.WithReleaseTimeout(time.Second))
	waiter := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(100*time.Millisecond), lock.WithReleaseTimeout(time.Second))
	ctx := ctxTimeout(t, 30*time.Second)

	type held struct {
		token uint64
		lock  *lock.Lock
	}
	heldCh := make(chan held, 1)
	causeCh := make(chan error, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- holder.Do(ctx, name, lock.Options{Lease: lease, MaxDuration: 20 * time.Second}, func(hctx context.Context) error {
			l, _ := lock.FromContext(hctx)
			heldCh <- held{l.Token(), l}
			select {
			case <-hctx.Done():
				causeCh <- context.Cause(hctx)
				return nil
			case <-time.After(10 * time.Second):
				causeCh <- nil
				return errors.New("handler's context still not cancelled 10s after the restart")
			}
		})
	}()
	h := <-heldCh
	stats.grants.Add(1)

	// A waiter that is waiting when Redis dies.
	const waitFor = 6 * time.Second
	type result struct {
		lock *lock.Lock
		err  error
		took time.Duration
	}
	waitRes := make(chan result, 1)
	go func() {
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		l, err := waiter.Acquire(wctx, name, lock.Options{Wait: true, Lease: lease, MaxDuration: 20 * time.Second})
		waitRes <- result{l, err, time.Since(start)}
	}()
	time.Sleep(lease / 2) // the waiter has looked and waits

	require.NoError(t, srv.Kill())
	fault(t, "kill Redis while the lock is held")
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, srv.Start(), "restart Redis")
	restarted := time.Now()
	fault(t, "restart Redis empty on the same port")

	// The holder learns it lost the lock.
	select {
	case <-h.lock.Done():
		t.Logf("holder told of the loss %v after the restart", time.Since(restarted).Round(time.Millisecond))
		expect(t, errors.Is(h.lock.Err(), lock.ErrLost), "Err after the restart is %v, want ErrLost", h.lock.Err())
	case <-time.After(3*lease + 2*time.Second):
		expect(t, false, "holder's Done not closed %v after Redis restarted empty", 3*lease+2*time.Second)
	}
	select {
	case cause := <-causeCh:
		expect(t, errors.Is(cause, lock.ErrLost), "holder's handler context ended with cause %v, want ErrLost", cause)
	case <-time.After(5 * time.Second):
		expect(t, false, "holder's handler context not cancelled after the loss")
	}
	select {
	case err := <-doErr:
		expect(t, errors.Is(err, lock.ErrLost), "Do returned %v, want an error matching ErrLost", err)
	case <-time.After(5 * time.Second):
		expect(t, false, "Do did not return after the loss")
	}

	// The waiter is not stuck: it got the lock on the new server, or failed,
	// within its deadline.
	var tokens []uint64
	select {
	case r := <-waitRes:
		t.Logf("waiter: lock %v, err %v, after %v", r.lock != nil, r.err, r.took.Round(time.Millisecond))
		expect(t, r.took < waitFor+2*time.Second, "the waiter returned after %v, past its deadline %v", r.took, waitFor)
		expect(t, (r.lock == nil) != (r.err == nil), "the waiter returned lock %v and error %v", r.lock, r.err)
		if r.lock != nil {
			stats.grants.Add(1)
			tokens = append(tokens, r.lock.Token())
			expect(t, r.lock.Err() == nil, "the waiter's lock is already lost: %v", r.lock.Err())
			require.NoError(t, r.lock.Release(ctx))
		}
	case <-time.After(waitFor + 2*time.Second):
		expect(t, false, "the waiter is stuck %v after it started waiting (deadline %v)", waitFor+2*time.Second, waitFor)
	}

	// A new acquisition on the new server gets a greater token.
	l, err := waiter.Acquire(ctxTimeout(t, 5*time.Second), name,
		lock.Options{Wait: true, Lease: lease, MaxDuration: 10 * time.Second})
	require.NoError(t, err, "acquire after the restart")
	stats.grants.Add(1)
	tokens = append(tokens, l.Token())
	for _, tok := range tokens {
		expect(t, tok > h.token, "token %d granted after the restart is not greater than %d, granted before it", tok, h.token)
	}
	require.NoError(t, l.Release(ctx))
	v, _ := record(t, newRedis(t, srv.Addr), key)
	expect(t, v == "", "record %q left after the last release", v)
}

// TestTokensAcrossRestartWithPersistence: the fencing counters are data like
// the records, so a Redis that keeps its data across a restart keeps them,
// and the tokens of a name continue from where they were, without reading
// the server's clock: the first grant after the restart has the next token
// of its slot's counter (issue 17).
func TestTokensAcrossRestartWithPersistence(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "persisted"
	var last uint64
	grant := func(c *lock.Client) uint64 {
		t.Helper()
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.Greater(t, l.Token(), last, "tokens increase")
		last = l.Token()
		return last
	}
	c := newClient(t, newRedis(t, srv.Addr))
	for range 5 {
		grant(c)
	}
	direct := newRedis(t, srv.Addr)
	require.NoError(t, direct.Save(ctx).Err(), "SAVE: the data is on disk")
	_, fence, _, err := lock.RedisKeys(keyOf(name))
	require.NoError(t, err)
	counter, err := direct.Get(ctx, fence).Uint64()
	require.NoError(t, err)
	require.Equal(t, last, counter, "the counter of the name's slot gave the last token")

	require.NoError(t, srv.Kill())
	require.NoError(t, srv.Start(), "the server starts again and loads its data")
	c = newClient(t, newRedis(t, srv.Addr))
	before := last
	require.Equal(t, before+1, grant(c), "the first token after the restart is the counter's next, not the clock's")
}
