// Package testenv is the test environment of the lock library's tests, in one
// place for the root package, faults, locktest and the modules (postgres,
// otel, gocron, etcd, cmd/lockctl): names and contexts of a test's own, a
// fake clock, and Clients and provider probes that end with the test. The
// servers the tests use (a Redis and a PostgreSQL of each test binary's own,
// or those that environment variables name) are in its package servers,
// which the root package's internal tests import too. It is internal: not
// part of the library's API.
//
// The helpers take a testing.TB and end the test when they cannot work.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Name returns a name no other test uses, so that tests can share a server:
// this run's id (see run), the test's name (with ":" for "/"), so that what
// a run leaves behind can be found by it, and a random part.
func Name(t testing.TB) string {
	return run + ":" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + RandomHex(4)
}

// run tells this process's names from those of another run of the same
// tests at the same time on the same server, so that one run's clean-up
// (Pattern) never deletes the keys of another.
var run = RandomHex(3)

// Pattern returns a SCAN pattern that matches every key holding a name
// that Name made for t or its subtests in this process.
func Pattern(t testing.TB) string {
	return "*" + run + ":" + strings.ReplaceAll(t.Name(), "/", ":") + "*"
}

// NewOwner returns a new lock owner: 34 bytes, no comma or white space.
func NewOwner() string { return "o-" + RandomHex(16) }

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("testenv: crypto/rand: %v", err)) // it does not fail on a supported system
	}
	return hex.EncodeToString(b)
}

// Context returns a context that ends after d, or at the end of the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NewClient returns a Client on p, closed at the end of the test.
func NewClient(t testing.TB, p lock.Provider, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MustAcquire takes the free key on p for owner, or fails the test.
func MustAcquire(t testing.TB, p lock.Provider, key, owner string, ttl time.Duration) lock.Record {
	t.Helper()
	rec, err := p.Acquire(context.Background(), key, owner, ttl)
	require.NoError(t, err)
	require.Equal(t, owner, rec.Owner, "Acquire of %q by %s should have been granted", key, owner)
	require.False(t, rec.GracePeriod)
	return rec
}

// Holder returns the record that holds key on p, read by an Acquire of a
// fresh owner that must not be granted.
func Holder(t testing.TB, p lock.Provider, key string) lock.Record {
	t.Helper()
	o := NewOwner()
	rec, err := p.Acquire(context.Background(), key, o, time.Hour)
	require.NoError(t, err)
	if rec.Owner == o {
		_ = p.Release(context.Background(), key, o)
		require.FailNow(t, "key should have been held", "a probe acquired %q", key)
	}
	return rec
}

// Acquired is what an Acquire that AcquireLater ran returned, and when it
// returned.
type Acquired struct {
	Lock *lock.Lock
	Err  error
	At   time.Time
}

// AcquireLater runs c.Acquire(ctx, name, o) on a goroutine; the channel
// receives what it returned.
func AcquireLater(ctx context.Context, c *lock.Client, name string, o lock.Options) <-chan Acquired {
	done := make(chan Acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, name, o)
		done <- Acquired{l, err, time.Now()}
	}()
	return done
}

// Superseded makes a stale holder of name: a takes the lock, b forces its
// release and takes it in turn. It returns both locks, or fails the test.
func Superseded(t testing.TB, ctx context.Context, a, b *lock.Client, name string) (stale, current *lock.Lock) {
	t.Helper()
	stale, err := a.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	_, err = b.ForceRelease(ctx, name)
	require.NoError(t, err)
	current, err = b.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	return stale, current
}

// RaceTokens has goroutines write, through write, the fencing tokens first
// to first+writes-1 (writes a multiple of 16), handed out increasing but
// shuffled within blocks of 16, so that lower and higher tokens race all
// along the run; g is the writing goroutine's number. It returns how many
// writes were refused with a *lock.StaleTokenError, and fails the test for
// a refusal by a mark not above the token, or another error.
func RaceTokens(t testing.TB, goroutines, writes int, first uint64, write func(g int, tok uint64) error) (refused int) {
	tokens := make(chan uint64, writes)
	for block := 0; block < writes; block += 16 {
		for _, i := range mrand.Perm(16) {
			tokens <- first + uint64(block+i)
		}
	}
	close(tokens)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tok := range tokens {
				err := write(g, tok)
				var stale *lock.StaleTokenError
				switch {
				case errors.As(err, &stale):
					if stale.Mark <= tok {
						t.Errorf("token %d refused by mark %d", tok, stale.Mark)
					}
					mu.Lock()
					refused++
					mu.Unlock()
				case err != nil:
					t.Errorf("write with token %d: %v", tok, err)
				}
			}
		}()
	}
	wg.Wait()
	return refused
}

// AssertTTL checks that got is want, less what a slow machine takes.
func AssertTTL(t testing.TB, want, got time.Duration, msg string) {
	t.Helper()
	assert.LessOrEqual(t, got, want, msg)
	assert.Greater(t, got, want-want/10-time.Second/2, msg)
}

// Clock is a lock.Clock (and a MemoryProvider's clock) that moves only when
// told. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set sets the clock to now.
func (c *Clock) Set(now time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}
