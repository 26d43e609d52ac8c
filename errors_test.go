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
	"github.com/seed05627090/lock/internal/testenv"
)

// When the provider fails or cannot be reached: errors that name the lock
// and the operation once, and outages (ErrUnavailable).

// errBackend is the failing provider's own error.
var errBackend = errors.New("backend exploded")

// failingProvider returns a provider over mem whose calls named in fail
// return errBackend: "acquire", "queue", "release", and "update" for Renew
// and Finish. Every other call is mem's.
func failingProvider(mem lock.Provider, fail map[string]bool) *hookedProvider {
	return &hookedProvider{
		Provider: mem,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if fail["acquire"] {
				return lock.Record{}, errBackend
			}
			return mem.Acquire(ctx, key, owner, ttl)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			if fail["queue"] {
				return lock.Record{}, errBackend
			}
			return mem.Queue(ctx, key, w)
		},
		OnRelease: func(ctx context.Context, key, owner string) error {
			if fail["release"] {
				return errBackend
			}
			return mem.Release(ctx, key, owner)
		},
		OnRenew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if fail["update"] {
				return errBackend
			}
			return mem.Renew(ctx, key, owner, ttl)
		},
		OnFinish: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if fail["update"] {
				return errBackend
			}
			return mem.Finish(ctx, key, owner, ttl)
		},
	}
}

// Issue 7, item 6 (was TestIssue7ProviderErrorsNameTheLock): an error of the
// provider reaches the caller naming the operation and the lock's key, and
// still matches the provider's own error with errors.Is.
func TestProviderErrorsNameTheLock(t *testing.T) {
	check := func(t *testing.T, err error, key string, ops ...string) {
		t.Helper()
		require.Error(t, err)
		t.Logf("error: %v", err)
		assert.ErrorIs(t, err, errBackend, "the provider's error is kept for errors.Is")
		assert.NotErrorIs(t, err, lock.ErrNotAcquired, "a provider failure is not a held lock")
		assert.Equal(t, 1, strings.Count(err.Error(), key), "the error names the lock's key, once: %q", err)
		named := false
		for _, op := range ops {
			named = named || strings.Contains(strings.ToLower(err.Error()), op)
		}
		assert.True(t, named, "the error %q names the operation (one of %v)", err, ops)
	}
	ctx := ctxTimeout(t, 10*time.Second)

	t.Run("acquire", func(t *testing.T) {
		c := newClient(t, failingProvider(lock.NewMemoryProvider(), map[string]bool{"acquire": true, "queue": true}))
		name := uniqueName(t)
		_, err := c.Acquire(ctx, name, lock.Options{})
		check(t, err, c.Key(name), "acquire")
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		check(t, err, c.Key(name), "acquire", "queue", "wait")
		err = c.Do(ctx, name, lock.Options{}, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		check(t, err, c.Key(name), "acquire")
	})
	t.Run("queue", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		fail := map[string]bool{}
		c := newClient(t, failingProvider(mem, fail))
		name := uniqueName(t)
		hl, err := newClient(t, mem).Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, hl.Release(ctx)) }()
		fail["queue"] = true
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		check(t, err, c.Key(name), "queue", "wait")
	})
	t.Run("release", func(t *testing.T) {
		fail := map[string]bool{}
		c := newClient(t, failingProvider(lock.NewMemoryProvider(), fail))
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		fail["release"] = true
		check(t, l.Release(ctx), c.Key(name), "release")
	})
	t.Run("extend", func(t *testing.T) {
		fail := map[string]bool{}
		c := newClient(t, failingProvider(lock.NewMemoryProvider(), fail))
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		fail["update"] = true
		check(t, l.Extend(ctx, time.Minute), c.Key(name), "extend", "renew", "update")
		fail["update"] = false
		assert.NoError(t, l.Release(ctx))
	})
}

// Regression (fixed in d9086c1): when the context ends while the provider
// fails, the error keeps both (the context's, for errors.Is, and the
// provider's text) and names the key once.
func TestContextEndAndProviderErrorNameTheKeyOnce(t *testing.T) {
	// Acquire fails with the provider's own error once the caller's context
	// has ended, as a network call that times out does.
	c := newClient(t, &hookedProvider{Provider: lock.NewMemoryProvider(), OnAcquire: func(ctx context.Context, _, _ string, _ time.Duration) (lock.Record, error) {
		<-ctx.Done()
		return lock.Record{}, errors.New("read tcp: i/o timeout")
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	name := uniqueName(t)
	_, err := c.Acquire(ctx, name, lock.Options{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "i/o timeout", "the provider's error is kept")
	assert.Equal(t, 1, strings.Count(err.Error(), c.Key(name)), "the key is named once: %v", err)
}

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
	testenv.SkipShort(t, "waits out go-redis's dial retries (~4.5 s); TestUnavailableProviderFails checks ErrUnavailable quickly")
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

// The same on a provider that fails or does not answer, and what does not
// match ErrUnavailable: a wait that timed out in the queue, a context that
// ended before anything was asked, a Client closed meanwhile.
func TestUnavailableProviderFails(t *testing.T) {
	mem := lock.NewMemoryProvider()
	var mode atomic.Value
	p := downProvider(mem, &mode)
	c := newClient(t, p, lock.WithReleaseTimeout(time.Second))
	ctx := ctxTimeout(t, 30*time.Second)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	mode.Store("hang")
	_, err := c.Acquire(short(), "job", lock.Options{})
	assert.ErrorIs(t, err, lock.ErrUnavailable, "no answer before the deadline: %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.EqualError(t, err, `lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider`)

	mode.Store("fail")
	_, err = c.Acquire(ctx, "job", lock.Options{Wait: true})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, errDown, "the provider's error is attached")
	assert.EqualError(t, err, `lock: acquire "lock:{job}": `+errDown.Error())

	mode.Store("hang")
	_, err = c.Acquire(short(), "job", lock.Options{Wait: true})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.ErrorIs(t, err, errDown, "the last error the provider returned is attached")
	assert.EqualError(t, err, `lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider (its last error: `+errDown.Error()+")")

	mode.Store("")
	l, err := c.Acquire(ctx, "job", lock.Options{})
	require.NoError(t, err, "the provider is back")
	mode.Store("hang")
	_, err = c.Acquire(short(), "other", lock.Options{})
	assert.ErrorIs(t, err, lock.ErrUnavailable)
	assert.NotErrorIs(t, err, errDown, "a success since forgets the last error")

	mode.Store("")
	_, err = c.Acquire(ctx, "job", lock.Options{Wait: true, MaxWait: 200 * time.Millisecond})
	assert.ErrorIs(t, err, lock.ErrTimeout, "a wait in the queue times out")
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a wait that timed out in the queue is not an outage: %v", err)
	_, err = c.Acquire(ctx, "job", lock.Options{})
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a held lock is not an outage")

	// A waiter whose request is under way when its Client closes.
	mode.Store("hang-queue")
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
	mode.Store("hang")
	_, err = c.Acquire(ended, "job", lock.Options{})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, lock.ErrUnavailable, "a context that ended before anything was asked is not an outage")
}

// Issue 22, item 5: List's error named the operation and the prefix twice
// (`lock: list "lock:": lock: list "lock:": dial tcp ...`).
func TestListErrorNamesItsOperationOnce(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	// List fails as the Redis provider's does: with the operation and the
	// prefix named.
	listDown := &hookedProvider{Provider: lock.NewMemoryProvider(), OnList: func(_ context.Context, prefix string, _ func(string, lock.Record, error) bool) error {
		return errors.New(`lock: list "` + prefix + `": ` + errDown.Error())
	}}
	_, _, err := newClient(t, listDown).List(ctx, 10)
	assert.EqualError(t, err, `lock: list "lock:": `+errDown.Error())
	assert.ErrorIs(t, err, lock.ErrUnavailable)

	rc := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rc.Close() })
	_, _, err = newClient(t, lock.NewRedisProvider(rc)).List(ctx, 10)
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(err.Error(), `list "lock:"`), "the operation is named once: %v", err)
	assert.ErrorIs(t, err, lock.ErrUnavailable)
}
