package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// The benchmarks run each measurement on etcd with 1 and 3 members
// started in this process (default 100ms heartbeat and 1s election, fsync
// on, as in production; etcd-1-nofsync without fsync), and beside them
// on Redis at LOCK_REDIS_ADDR (127.0.0.1:6379 by default; skipped when it
// does not answer), through the same lock.Provider calls:
//
//	go test -run '^$' -bench . -benchtime 3s .

// benchClusters are the clusters of the benchmarks, started on first use
// and stopped by TestMain.
var benchClusters struct {
	mu   sync.Mutex
	m    map[string][]string // endpoints, by name
	stop []func()
}

func stopBenchClusters() {
	for _, f := range benchClusters.stop {
		f()
	}
}

// benchCluster starts (once) n members in this process and returns their
// client URLs.
func benchCluster(b *testing.B, n int, fsync bool) []string {
	name := fmt.Sprintf("%d-%v", n, fsync)
	benchClusters.mu.Lock()
	defer benchClusters.mu.Unlock()
	if eps, ok := benchClusters.m[name]; ok {
		return eps
	}
	dir, err := os.MkdirTemp("", "lock-etcd-bench-")
	if err != nil {
		b.Fatal(err)
	}
	benchClusters.stop = append(benchClusters.stop, func() { _ = os.RemoveAll(dir) })
	specs := make([]memberSpec, n)
	var peers, eps []string
	for i := range specs {
		cp, err := freePort()
		if err != nil {
			b.Fatal(err)
		}
		pp, err := freePort()
		if err != nil {
			b.Fatal(err)
		}
		specs[i] = memberSpec{Name: "b" + strconv.Itoa(i), Dir: fmt.Sprintf("%s/b%d", dir, i), ClientPort: cp, PeerPort: pp,
			TickMs: 100, ElectionMs: 1000, Fsync: fsync}
		peers = append(peers, fmt.Sprintf("b%d=http://127.0.0.1:%d", i, pp))
		eps = append(eps, fmt.Sprintf("http://127.0.0.1:%d", cp))
	}
	errs := make(chan error, n)
	for i := range specs {
		specs[i].Cluster = strings.Join(peers, ",")
		go func() {
			e, err := specs[i].start()
			if err == nil {
				benchClusters.mu.Lock() // held by the caller: appended after it returns
				defer benchClusters.mu.Unlock()
				benchClusters.stop = append([]func(){e.Close}, benchClusters.stop...)
			}
			errs <- err
		}()
	}
	benchClusters.mu.Unlock()
	for range specs {
		if err := <-errs; err != nil {
			benchClusters.mu.Lock()
			b.Fatal(err)
		}
	}
	benchClusters.mu.Lock()
	if benchClusters.m == nil {
		benchClusters.m = map[string][]string{}
	}
	benchClusters.m[name] = eps
	return eps
}

// benchBackends runs fn against each backend, as sub-benchmarks.
func benchBackends(b *testing.B, fn func(b *testing.B, p lock.Provider)) {
	for _, c := range []struct {
		name  string
		n     int
		fsync bool
		redis bool
	}{{"etcd-1", 1, true, false}, {"etcd-3", 3, true, false}, {"etcd-1-nofsync", 1, false, false}, {"redis", 0, false, true}} {
		b.Run(c.name, func(b *testing.B) {
			if c.redis {
				fn(b, redisProvider(b))
				return
			}
			cli := newClient(b, benchCluster(b, c.n, c.fsync)...)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := etcd.NewProvider(ctx, cli, etcd.WithNamespace(testNamespace()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			fn(b, p)
		})
	}
}

// redisProvider returns the Redis provider at LOCK_REDIS_ADDR, or skips.
func redisProvider(b *testing.B) lock.Provider {
	addr := os.Getenv("LOCK_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		b.Skipf("no Redis at %s: %v", addr, err)
	}
	return lock.NewRedisProvider(rdb)
}

// BenchmarkAcquireRelease measures one uncontended Acquire and its Release
// of one key, one after another.
func BenchmarkAcquireRelease(b *testing.B) {
	benchBackends(b, func(b *testing.B, p lock.Provider) {
		ctx := context.Background()
		key := "bench:" + randomHex(4)
		for b.Loop() {
			if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx, key, "o-1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRenew measures one renewal of a held record (on etcd: a new
// lease, the record written on it, the old lease revoked in the
// background).
func BenchmarkRenew(b *testing.B) {
	benchBackends(b, func(b *testing.B, p lock.Provider) {
		ctx := context.Background()
		key := "bench:" + randomHex(4)
		if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := p.Renew(ctx, key, "o-1", 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		_ = p.Release(ctx, key, "o-1")
	})
}

// BenchmarkHandOver measures a lock passed from holder to holder through
// the queue: a waiter queues, the holder releases, and the grant reaches
// the waiter's Listen (on etcd, through its watch).
func BenchmarkHandOver(b *testing.B) {
	benchBackends(b, func(b *testing.B, p lock.Provider) {
		ctx := context.Background()
		key := "bench:" + randomHex(4)
		inbox := "inbox:" + randomHex(4)
		grants := make(chan lock.Grant, 16)
		stop, err := p.Listen(ctx, inbox, func(g lock.Grant) {
			if g.Key != "" {
				grants <- g
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
		holder := "o-0"
		if _, err := p.Acquire(ctx, key, holder, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			i++
			w := lock.Waiter{Owner: "o-" + strconv.Itoa(i), TTL: 10 * time.Second, Inbox: inbox}
			if _, err := p.Queue(ctx, key, w); err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx, key, holder); err != nil {
				b.Fatal(err)
			}
			if g := <-grants; g.Owner != w.Owner {
				b.Fatalf("grant to %q, want %q", g.Owner, w.Owner)
			}
			holder = w.Owner
		}
		_ = p.Release(ctx, key, holder)
	})
}
