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

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/locktest"
)

// The benchmarks run each measurement on etcd with 1 and 3 members
// started in this process (default 100ms heartbeat and 1s election, fsync
// on, as in production; etcd-1-nofsync without fsync), and beside them
// on Redis (the test binary's own redis-server, or LOCK_REDIS_ADDR; skipped
// without a redis-server), through the same lock.Provider calls:
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

// redisProvider returns the Redis provider on the tests' Redis
// (servers.Redis: LOCK_REDIS_ADDR, or a server of the test binary's own),
// or skips without one.
func redisProvider(b *testing.B) lock.Provider {
	return lock.NewRedisProvider(servers.Redis(b))
}

// BenchmarkAcquireRelease measures one uncontended Acquire and its Release
// of one key, one after another (locktest.AcquireRelease).
func BenchmarkAcquireRelease(b *testing.B) { benchBackends(b, locktest.AcquireRelease) }

// BenchmarkRenew measures one renewal of a held record (on etcd: a new
// lease, the record written on it, the old lease revoked in the
// background; locktest.Renew).
func BenchmarkRenew(b *testing.B) { benchBackends(b, locktest.Renew) }

// BenchmarkHandOver measures a lock passed from holder to holder through
// the queue: a waiter queues, the holder releases, and the grant reaches
// the waiter's Listen (on etcd, through its watch; locktest.HandOver).
func BenchmarkHandOver(b *testing.B) { benchBackends(b, locktest.HandOver) }

// BenchmarkElectionFailover measures how long a role goes without a
// leader, through lock.Client's elections (locktest.ElectionFailover): a
// leader's term (Campaign), a successor waiting in Lead, and the time from
// the leader's Resign (resign), or from its death (death: at a random point
// of its renewal cycle its provider stops answering, as if its process were
// gone, so the role's record expires with its lease), to the successor's
// function running. It reports p50, p99 and max of that time in ms, and
// the max against the lease kept plus the poll interval (ns/op is the
// whole cycle: a campaign, a successor queued, the failover). The lease is
// 1s, which etcd keeps for its minimum lease: 2s on these clusters (a 1s
// election timeout); a death is noticed once that has run out. On etcd
// with 1 and 3 members in this process, fsync on:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func BenchmarkElectionFailover(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run("etcd-"+strconv.Itoa(n), func(b *testing.B) {
			endpoints := benchCluster(b, n, true)
			ns := testNamespace()
			locktest.ElectionFailover(b, locktest.Backend{
				New:      func(t testing.TB) lock.Provider { return benchProvider(t, ns, endpoints) },
				MinLease: benchProvider(b, ns, endpoints).MinTTL(),
			})
		})
	}
}

// benchProvider returns a provider with namespace ns on a client of its own
// to endpoints, closed at the end of the benchmark (or test).
func benchProvider(t testing.TB, ns string, endpoints []string) *etcd.Provider {
	cli := newClient(t, endpoints...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := etcd.NewProvider(ctx, cli, etcd.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
