// Package testenv is the test environment of the lock library's tests, in one
// place for the root package, faults, locktest and the modules (postgres,
// otel, gocron, cmd/lockctl): the servers the tests share (the real Redis and
// PostgreSQL, found through environment variables, required in CI), names and
// contexts of a test's own, a fake clock, and Clients and provider probes
// that end with the test. It is internal: not part of the library's API.
//
// The environment:
//   - LOCK_REDIS_ADDR: the shared Redis (default 127.0.0.1:6379).
//   - LOCK_POSTGRES_DSN: the shared PostgreSQL (default
//     postgres://postgres@127.0.0.1:5432/test?sslmode=disable).
//   - CI, LOCK_REQUIRE_REDIS, LOCK_REQUIRE_POSTGRES: a missing server (or
//     redis-server binary) fails the test instead of skipping it; CI
//     requires both servers.
//
// The helpers take a testing.TB and end the test when they cannot work.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// The environment variables the tests read.
const (
	EnvRedisAddr       = "LOCK_REDIS_ADDR"
	EnvRequireRedis    = "LOCK_REQUIRE_REDIS"
	EnvPostgresDSN     = "LOCK_POSTGRES_DSN"
	EnvRequirePostgres = "LOCK_REQUIRE_POSTGRES"
)

// RedisAddr is the shared Redis: LOCK_REDIS_ADDR, or the local one.
func RedisAddr() string {
	if a := os.Getenv(EnvRedisAddr); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// PostgresDSN is the shared PostgreSQL: LOCK_POSTGRES_DSN, or the local one.
func PostgresDSN() string {
	if d := os.Getenv(EnvPostgresDSN); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// RequireRedis reports whether a missing Redis (or redis-server) must fail a
// test instead of skipping it: in CI, or when LOCK_REQUIRE_REDIS is set.
func RequireRedis() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequireRedis) != ""
}

// RequirePostgres reports whether a missing PostgreSQL must fail a test
// instead of skipping it: in CI, or when LOCK_REQUIRE_POSTGRES is set.
func RequirePostgres() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequirePostgres) != ""
}

// Redis returns a client of the shared Redis, closed at the end of the test.
// Without a server it skips the test, or fails it when RequireRedis says so.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", RedisAddr(), time.Second)
	if err != nil {
		if RequireRedis() {
			t.Fatalf("real Redis at %s is required (CI or %s set): %v", RedisAddr(), EnvRequireRedis, err)
		}
		t.Skipf("no Redis at %s: %v (set %s)", RedisAddr(), err, EnvRedisAddr)
	}
	_ = conn.Close()
	rc := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// RedisServerBinary is where RedisServer looks for redis-server first; then
// on PATH.
const RedisServerBinary = "/usr/bin/redis-server"

// RedisServer returns the path of redis-server, for tests that start servers
// of their own. Without one it skips the test, or fails it when RequireRedis
// says so.
func RedisServer(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(RedisServerBinary); err == nil {
		return RedisServerBinary
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireRedis() {
			t.Fatalf("redis-server is required (CI or %s set; looked at %s and on PATH): %v", EnvRequireRedis, RedisServerBinary, err)
		}
		t.Skipf("no redis-server (looked at %s and on PATH): %v", RedisServerBinary, err)
	}
	return p
}

// Postgres checks that the shared PostgreSQL answers connect (a driver's
// connection or ping, which the caller's module provides: the root module
// has no PostgreSQL driver) within ten seconds. Without a server it skips the
// test, or fails it when RequirePostgres says so.
func Postgres(t testing.TB, connect func(ctx context.Context, dsn string) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := connect(ctx, PostgresDSN()); err != nil {
		if RequirePostgres() {
			t.Fatalf("PostgreSQL at %s is required (CI or %s set): %v", PostgresDSN(), EnvRequirePostgres, err)
		}
		t.Skipf("no PostgreSQL at %s: %v (set %s)", PostgresDSN(), err, EnvPostgresDSN)
	}
}

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
	require.False(t, rec.Finished)
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
