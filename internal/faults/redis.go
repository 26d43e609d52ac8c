// Package faults holds the helpers of the lock library's fault-injection
// tests (the faults directory of the repository, and the fault tests of the
// provider modules): a launcher for throwaway Redis server processes
// (Redis), a Sentinel deployment of them (Sentinel), a TCP proxy that can
// delay, pause and cut the traffic between a client and Redis (Proxy), the
// test binary run again as a child process (Child), and the board that
// judges the fenced writes of stopped leaders (WriteBoard), and the core
// scenarios that every Redis driver's tests run (Scenarios). It is internal:
// not part of the library's API.
//
// The helpers start processes and listen on loopback addresses only. They are
// test helpers: they take a testing.TB and end the test when they cannot work.
package faults

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/internal/testenv/servers"
)

// RequireRedis returns the Redis server binary that the tests start (the
// LOCK_REDIS_SERVER setting: redis-server by default, valkey-server for
// Valkey). Without it it skips the test, or fails it in CI and when
// LOCK_REQUIRE_REDIS is set (the test environment's rule,
// servers.RedisServer).
func RequireRedis(t testing.TB) string {
	t.Helper()
	return servers.RedisServer(t)
}

// Redis is one Redis server process of a test (the RequireRedis binary), on
// a loopback port of its own, without persistence: a restart starts it
// empty. Kill and Start may be called in turn to crash and restart it on
// the same port. It is stopped when the test ends, and, on Linux, when the
// test binary ends (servers.Start).
type Redis struct {
	// Addr is the server's address, 127.0.0.1:port; it stays the same across
	// restarts.
	Addr string

	t    testing.TB
	bin  string
	port int
	dir  string
	args []string // of StartRedis, given at every start

	mu    sync.Mutex
	proc  *servers.Proc // nil when not running
	last  *servers.Proc // the running or last process, for Log
	admin *redis.Client // Do's, made at its first call
}

// StartRedis starts a Redis server on a free loopback port, with the extra
// command-line arguments args (given again at every restart by Start, after
// its defaults, which they override), and waits until it answers PING. It
// skips or fails the test as RequireRedis does when there is no server
// binary, and stops the server at the end of the test.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: RequireRedis(t), dir: t.TempDir(), args: args}
	t.Cleanup(func() { _ = r.Kill() })
	var err error
	// A free port found by listening may be taken by someone else before the
	// server binds it: try a few.
	for range 5 {
		r.port, err = FreePort()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		if err = r.Start(); err == nil {
			return r
		}
	}
	t.Fatalf("start %s: %v", r.bin, err)
	return nil
}

// Start starts the server on its port (again, after Kill), with StartRedis's
// arguments and then the extra command-line arguments, and waits until it
// answers PING. It returns an error when the server is already running or
// does not come up within ten seconds.
func (r *Redis) Start(extra ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		return errors.New("the Redis server is already running")
	}
	p, err := servers.StartRedis(r.bin, r.port, r.dir, append(slices.Clip(r.args), extra...)...)
	if err != nil {
		return err
	}
	r.proc, r.last = p, p
	return nil
}

// Kill kills the server with SIGKILL, as a crash would, and waits until it is
// gone: every connection to it is reset and everything it stored is lost. It
// does nothing when the server is not running.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return nil
	}
	r.proc.Stop(syscall.SIGKILL, time.Minute)
	r.proc = nil
	return nil
}

// Do sends one command to the server, on a connection of this package's
// (not the one of the client under test), and returns its reply as
// go-redis's Cmd.Result does (a string, an int64, a []any, or nil with
// redis.Nil). The tests read and act on the server with it: KEYS,
// PUBSUB CHANNELS, CLIENT KILL.
func (r *Redis) Do(ctx context.Context, args ...any) (any, error) {
	r.mu.Lock()
	if r.admin == nil {
		r.admin = redis.NewClient(adminOptions(r.Addr))
		r.t.Cleanup(func() { _ = r.admin.Close() })
	}
	admin := r.admin
	r.mu.Unlock()
	return admin.Do(ctx, args...).Result()
}

// adminOptions are those of the clients this package acts on servers
// with (Redis.Do, a Sentinel's clients): a second for each step, no retry.
func adminOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true,
	}
}

// Log returns what the running (or last) server printed.
func (r *Redis) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		return ""
	}
	return r.last.Log()
}

// FreePort returns a loopback TCP port that nothing listened on a moment ago.
func FreePort() (int, error) { return servers.FreePort() }
