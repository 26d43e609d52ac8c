package lock_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

// The benchmarks below measure the library's own overhead on the memory
// provider, with sync.Mutex as the floor. Run them with
//
//	go test -bench . -benchmem -run '^$' .
//
// The bench module (bench/) measures the Redis provider against other
// libraries.

// benchClient returns a Client on a fresh memory provider, closed when b ends.
func benchClient(b *testing.B) *lock.Client {
	b.Helper()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// cycle acquires the lock called name and releases it.
func cycle(ctx context.Context, c *lock.Client, name string, o lock.Options) error {
	l, err := c.Acquire(ctx, name, o)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func BenchmarkMemoryProviderAcquireRelease(b *testing.B) {
	ctx := context.Background()
	p := lock.NewMemoryProvider()
	b.ReportAllocs()
	for range b.N {
		if _, err := p.Acquire(ctx, "lock:bench", "owner", lock.DefaultLease); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, "lock:bench", "owner"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClientAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c := benchClient(b)
	b.ReportAllocs()
	for range b.N {
		if err := cycle(ctx, c, "bench", lock.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	ctx := context.Background()
	handler := func(_ context.Context, n int) (int, error) { return n + 1, nil }
	wrap := func(b *testing.B, opts lock.MiddlewareOptions[int]) func(context.Context, int) (int, error) {
		h, err := lock.Middleware(benchClient(b), handler, opts)
		if err != nil {
			b.Fatal(err)
		}
		return h
	}

	b.Run("1goroutine", func(b *testing.B) {
		h := wrap(b, lock.MiddlewareOptions[int]{Name: "bench"})
		b.ReportAllocs()
		for range b.N {
			if _, err := h(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("parallel-distinct", func(b *testing.B) {
		// NameFunc turns the argument into the name; every goroutine passes its
		// own number, so no two goroutines share a lock.
		names := make([]string, 1024)
		for i := range names {
			names[i] = "bench:" + strconv.Itoa(i)
		}
		h := wrap(b, lock.MiddlewareOptions[int]{NameFunc: func(n int) string { return names[n%len(names)] }})
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := int(next.Add(1))
			for pb.Next() {
				if _, err := h(ctx, id); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkSemaphoreDo is one uncontended Semaphore.Do: a claim of one
// permit taken, fn run under it, and the claim released.
func BenchmarkSemaphoreDo(b *testing.B) {
	ctx := context.Background()
	s, err := benchClient(b).Semaphore("bench", 4)
	if err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) error { return nil }
	b.ReportAllocs()
	for range b.N {
		if err := s.Do(ctx, 1, lock.Options{}, fn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClientContended(b *testing.B) {
	ctx := context.Background()
	c := benchClient(b)
	b.ReportAllocs()
	b.SetParallelism(8) // 8 x GOMAXPROCS goroutines on one name
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := cycle(ctx, c, "bench", lock.Options{Wait: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkSyncMutex(b *testing.B) {
	b.Run("1goroutine", func(b *testing.B) {
		var mu sync.Mutex
		n := 0
		b.ReportAllocs()
		for range b.N {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	b.Run("contended", func(b *testing.B) {
		var mu sync.Mutex
		n := 0
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	})
}

// BenchmarkRedisAcquireRelease is one uncontended acquire and release on the
// tests' Redis (servers.Redis; skipped without a redis-server): two round
// trips, the library's allocations included.
func BenchmarkRedisAcquireRelease(b *testing.B) {
	ctx := context.Background()
	rc := realRedis(b)
	c, err := lock.NewClient(lock.NewRedisProvider(rc), lock.WithPrefix("bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		_, fence, _, _ := lock.RedisKeys(c.Key("bench"))
		_ = rc.Del(context.Background(), fence).Err()
	})
	b.ReportAllocs()
	for range b.N {
		if err := cycle(ctx, c, "bench", lock.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisAcquireReleaseParallel is BenchmarkRedisAcquireRelease from
// 32 goroutines (16 per CPU on 2) on distinct keys through one Client, the
// case where the provider pipelines scripts asked for at the same moment. It
// reports the Redis server's CPU time per cycle (INFO cpu, so other clients
// of that Redis count too) and how many scripts a pipeline carried on
// average.
func BenchmarkRedisAcquireReleaseParallel(b *testing.B) {
	ctx := context.Background()
	rc := realRedis(b)
	pipes := newGate() // counts the scripts in pipelines; holds nothing
	close(pipes.open)
	rc.AddHook(pipes)
	prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	c, err := lock.NewClient(lock.NewRedisProvider(rc), lock.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.Cleanup(func() {
		_ = c.Close()
		for i := range next.Load() {
			_, fence, _, _ := lock.RedisKeys(c.Key("bench" + strconv.FormatInt(i, 10)))
			_ = rc.Del(context.Background(), fence).Err()
		}
	})
	b.ReportAllocs()
	b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)))
	cpu0 := redisCPU(b, rc)
	b.RunParallel(func(pb *testing.PB) {
		name := "bench" + strconv.FormatInt(next.Add(1)-1, 10)
		for pb.Next() {
			if err := cycle(ctx, c, name, lock.Options{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64((redisCPU(b, rc)-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
	if n := pipes.pipes.Load(); n > 0 {
		b.ReportMetric(float64(pipes.inPipes.Load())/float64(n), "scripts/pipeline")
	}
}

// redisCPU returns the CPU time (user and system) the Redis server has used.
func redisCPU(b *testing.B, rc *redis.Client) time.Duration {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			s, _ := strconv.ParseFloat(v, 64)
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total
}

// BenchmarkElectionFailover measures, on the memory provider, how long a role
// is without a running leader, from the leader's death or from its Resign to
// the function of a Lead waiting behind it running (see
// locktest.ElectionFailover). Run it with a bounded count:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func BenchmarkElectionFailover(b *testing.B) {
	mem := lock.NewMemoryProvider()
	locktest.ElectionFailover(b, locktest.Backend{New: func(testing.TB) lock.Provider { return mem }})
}
