package lock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Issue 22, item 5: with Redis down, an acquisition fails with an error
// matching ErrUnavailable, whether the dial error comes back before the
// deadline or the deadline comes first; then the error carries the last
// error the provider returned.
func TestUnavailableRedisDown(t *testing.T) {
	addr := freeAddr(t)
	rc := redis.NewClient(&redis.Options{Addr: addr}) // go-redis's default retries
	t.Cleanup(func() { _ = rc.Close() })
	c := newClient(t, lock.NewRedisProvider(rc), lock.WithReleaseTimeout(time.Second))
	acquire := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := c.Acquire(ctx, "job", lock.Options{})
		return err
	}

	err := acquire(300 * time.Millisecond)
	assert.ErrorIs(t, err, lock.ErrUnavailable, "a short deadline: %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a short deadline says the deadline: %v", err)
	assert.ErrorContains(t, err, "provider", "a short deadline names the provider")

	err = acquire(30 * time.Second)
	assert.ErrorIs(t, err, lock.ErrUnavailable, "a long deadline: %v", err)
	var dial *net.OpError
	assert.ErrorAs(t, err, &dial, "the dial error is attached: %v", err)
	assert.ErrorContains(t, err, addr)
	assert.NotErrorIs(t, err, lock.ErrNotAcquired, "an outage is not a refusal")

	err = acquire(50 * time.Millisecond)
	assert.ErrorIs(t, err, lock.ErrUnavailable, "a short deadline after a failure: %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorAs(t, err, &dial, "the last dial error is attached: %v", err)
	assert.ErrorContains(t, err, addr)
}

// downProvider is a memory provider whose Acquire and Queue fail with
// errDown in mode "fail", and never answer (until the context ends) in mode
// "hang"; in mode "hang-queue", Queue alone never answers.
type downProvider struct {
	lock.Provider
	mode atomic.Value // "", "fail" or "hang"
}

var errDown = errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")

func (p *downProvider) down(ctx context.Context, queue bool) error {
	switch p.mode.Load() {
	case "fail":
		return errDown
	case "hang-queue":
		if !queue {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	case "hang":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (p *downProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if err := p.down(ctx, false); err != nil {
		return lock.Record{}, err
	}
	return p.Provider.Acquire(ctx, key, owner, ttl)
}

func (p *downProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	if err := p.down(ctx, true); err != nil {
		return lock.Record{}, err
	}
	return p.Provider.Queue(ctx, key, w)
}

// The same on a provider that fails or does not answer, and what does not
// match ErrUnavailable: a wait that timed out in the queue, a context that
// ended before anything was asked, a Client closed meanwhile.
func TestUnavailableProviderFails(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &downProvider{Provider: mem}
	c := newClient(t, p, lock.WithReleaseTimeout(time.Second))
	ctx := ctxTimeout(t, 30*time.Second)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	p.mode.Store("hang")
	_, err := c.Acquire(short(), "job", lock.Options{})
	assert.ErrorIs(t, err, lock.ErrUnavailable, "no answer before the deadline: %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.EqualError(t, err, `lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider`)

	p.mode.Store("fail")
	_, err = c.Acquire(ctx, "job", lock.Options{Wait: true})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, errDown, "the provider's error is attached")
	assert.EqualError(t, err, `lock: acquire "lock:{job}": `+errDown.Error())

	p.mode.Store("hang")
	_, err = c.Acquire(short(), "job", lock.Options{Wait: true})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, errDown, "the last error the provider returned is attached")
	assert.EqualError(t, err, `lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider (its last error: `+errDown.Error()+")")

	p.mode.Store("")
	l, err := c.Acquire(ctx, "job", lock.Options{})
	require.NoError(t, err, "the provider is back")
	p.mode.Store("hang")
	_, err = c.Acquire(short(), "other", lock.Options{})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.NotErrorIs(t, err, errDown, "a success since forgets the last error")

	p.mode.Store("")
	_, err = c.Acquire(ctx, "job", lock.Options{Wait: true, MaxWait: 200 * time.Millisecond})
	assert.ErrorIs(t, err, lock.ErrTimeout, "a wait in the queue times out")
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a wait that timed out in the queue is not an outage: %v", err)
	_, err = c.Acquire(ctx, "job", lock.Options{})
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a held lock is not an outage")

	// A waiter whose request is under way when its Client closes.
	p.mode.Store("hang-queue")
	closing := newClient(t, p)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = closing.Close()
	}()
	_, err = closing.Acquire(ctx, "job", lock.Options{Wait: true})
	assert.ErrorIs(t, err, lock.ErrClosed)
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a Client closed while its provider had not answered is not an outage")
	require.NoError(t, l.Release(ctx))

	ended, cancel := context.WithCancel(ctx)
	cancel()
	p.mode.Store("hang")
	_, err = c.Acquire(ended, "job", lock.Options{})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a context that ended before anything was asked is not an outage")
}

// listDown is a memory provider whose List fails as the Redis provider's
// does: with the operation and the prefix named.
type listDown struct{ lock.Provider }

func (listDown) List(_ context.Context, prefix string, _ func(string, lock.Record, error) bool) error {
	return errors.New(`lock: list "` + prefix + `": ` + errDown.Error())
}

// Issue 22, item 5: List's error named the operation and the prefix twice
// (`lock: list "lock:": lock: list "lock:": dial tcp ...`).
func TestListErrorNamesItsOperationOnce(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	_, _, err := newClient(t, listDown{lock.NewMemoryProvider()}).List(ctx, 10)
	assert.EqualError(t, err, `lock: list "lock:": `+errDown.Error())
	assert.ErrorIs(t, err, lock.ErrUnavailable)

	rc := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rc.Close() })
	_, _, err = newClient(t, lock.NewRedisProvider(rc)).List(ctx, 10)
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), `list "lock:"`), "the operation is named once: %v", err)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
}
