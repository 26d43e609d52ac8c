package lock_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// redisAddr is the real Redis the tests use: LOCK_REDIS_ADDR, or the local one.
func redisAddr() string {
	if a := os.Getenv("LOCK_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// requireRealRedis reports whether a missing real Redis must fail the test
// instead of skipping it: in CI, or when LOCK_REQUIRE_REDIS is set.
func requireRealRedis() bool {
	return os.Getenv("CI") != "" || os.Getenv("LOCK_REQUIRE_REDIS") != ""
}

// realRedis returns a client of the real Redis, closed at the end of the test.
// Without a server it skips the test, or fails it in CI.
func realRedis(t testing.TB) *redis.Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", redisAddr(), time.Second)
	if err != nil {
		if requireRealRedis() {
			t.Fatalf("real Redis at %s is required (CI or LOCK_REQUIRE_REDIS set): %v", redisAddr(), err)
		}
		t.Skipf("no Redis at %s: %v (set LOCK_REDIS_ADDR)", redisAddr(), err)
	}
	_ = conn.Close()
	rc := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// backend makes the providers of one kind. Each call of replica returns a new
// provider over the same storage, with its own connections, standing in for
// another process.
type backend struct {
	name    string
	replica func(t testing.TB) lock.Provider
	// raw reads and writes the stored value of a key (for corrupt-record
	// tests); nil for the memory backend.
	raw redis.UniversalClient
}

// backends returns memory, miniredis and real Redis backends.
func backends(t *testing.T) []backend {
	t.Helper()
	mem := lock.NewMemoryProvider()
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = mini.Close() })
	bs := []backend{
		{name: "memory", replica: func(testing.TB) lock.Provider { return mem }},
		{name: "miniredis", raw: mini, replica: func(t testing.TB) lock.Provider {
			rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = rc.Close() })
			return lock.NewRedisProvider(rc)
		}},
	}
	real := realRedis(t)
	// Leave nothing in the shared Redis: every key a test writes contains its
	// name (see uniqueName), fencing counters and grace periods included.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pattern := "*" + strings.ReplaceAll(t.Name(), "/", ":") + "*"
		iter := real.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			_ = real.Del(ctx, iter.Val()).Err()
		}
	})
	bs = append(bs, backend{name: "redis", raw: real, replica: func(t testing.TB) lock.Provider {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr()})
		t.Cleanup(func() { _ = rc.Close() })
		return lock.NewRedisProvider(rc)
	}})
	return bs
}

// eachBackend runs fn as a subtest against every backend.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// uniqueName returns a lock name no other test uses, so that tests can share
// the real Redis.
func uniqueName(t testing.TB) string {
	return strings.ReplaceAll(t.Name(), "/", ":") + ":" + uuid.NewString()[:8]
}

// newClient returns a Client on p, closed at the end of the test.
func newClient(t testing.TB, p lock.Provider, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replicas returns n clients, each on its own provider over b's storage.
func replicas(t *testing.T, b backend, n int, opts ...lock.ClientOption) []*lock.Client {
	cs := make([]*lock.Client, n)
	for i := range cs {
		cs[i] = newClient(t, b.replica(t), opts...)
	}
	return cs
}

// recorder collects events. It leaves out EventRenewed, whose number
// depends on timing, unless renewals is set.
type recorder struct {
	ch       chan lock.Event
	renewals bool
}

func newRecorder() *recorder { return &recorder{ch: make(chan lock.Event, 1024)} }

func (r *recorder) option() lock.ClientOption {
	return lock.WithEvents(func(e lock.Event) {
		if e.Kind != lock.EventRenewed || r.renewals {
			r.ch <- e
		}
	})
}

// kinds returns the kinds of the events recorded so far.
func (r *recorder) kinds() []lock.EventKind {
	var ks []lock.EventKind
	for {
		select {
		case e := <-r.ch:
			ks = append(ks, e.Kind)
		default:
			return ks
		}
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
