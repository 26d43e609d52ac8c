package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/locktest"
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
// leader, through lock.Client's elections: a leader's term (Campaign), a
// successor waiting in Lead, and the time from the leader's Resign
// (resign), or from its death (death: from then on its provider's Renew,
// Release and Finish fail without reaching etcd, as if its process were
// gone, so the role's record expires with its lease), to the successor's
// function running. It reports p50, p99 and max of that time in ms
// (ns/op is the whole cycle: a campaign, a successor queued, the
// failover). The lease is 1s, which etcd keeps for its minimum lease: 2s
// on these clusters (a 1s election timeout); a death is noticed once that
// has run out. On etcd with 1 and 3 members in this process, fsync on:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func BenchmarkElectionFailover(b *testing.B) {
	for _, death := range []bool{false, true} {
		name := "resign"
		if death {
			name = "death"
		}
		b.Run(name, func(b *testing.B) {
			for _, n := range []int{1, 3} {
				b.Run("etcd-"+strconv.Itoa(n), func(b *testing.B) { benchFailover(b, benchCluster(b, n, true), death) })
			}
		})
	}
}

func benchFailover(b *testing.B, endpoints []string, death bool) {
	ns := testNamespace()
	dying := &mortal{Provider: benchProvider(b, ns, endpoints)}
	leaders := benchClient(b, dying, "leader")
	successors := benchClient(b, benchProvider(b, ns, endpoints), "successor")
	role := "role-" + randomHex(4)
	o := lock.ElectionOptions{Lease: time.Second}
	var took []time.Duration
	for b.Loop() {
		t := campaign(b, leaders, role, o)
		started := make(chan time.Time, 1)
		ctx, stop := context.WithCancel(context.Background())
		led := make(chan error, 1)
		go func() {
			led <- successors.Lead(ctx, role, func(ctx context.Context) error {
				started <- time.Now()
				<-ctx.Done()
				return nil
			}, lock.LeadOptions{ElectionOptions: o})
		}()
		waitForWaiters(b, leaders, role, 1)
		at := time.Now()
		if death {
			dying.dead.Store(true)
		} else if err := t.Resign(context.Background()); err != nil {
			b.Fatal(err)
		}
		select {
		case s := <-started:
			took = append(took, s.Sub(at))
		case <-time.After(30 * time.Second):
			b.Fatal("the successor did not lead within 30s")
		}
		<-t.Done() // lost, on a death: before the successor could be elected
		dying.dead.Store(false)
		stop()
		<-led
	}
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(took[len(took)/2]), "p50-ms")
	b.ReportMetric(ms(took[(len(took)-1)*99/100]), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
}

// mortal is a provider that can die: while dead is set, the calls of a
// held lock (Renew, Release, Finish) fail without reaching the server, as
// a process that is gone makes none.
type mortal struct {
	lock.Provider
	dead atomic.Bool
}

var errDead = errors.New("the process is dead")

func (m *mortal) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if m.dead.Load() {
		return errDead
	}
	return m.Provider.Renew(ctx, key, owner, ttl)
}

func (m *mortal) Release(ctx context.Context, key, owner string) error {
	if m.dead.Load() {
		return errDead
	}
	return m.Provider.Release(ctx, key, owner)
}

func (m *mortal) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	if m.dead.Load() {
		return errDead
	}
	return m.Provider.Finish(ctx, key, owner, ttl)
}

// benchProvider returns a provider with namespace ns on a client of its own
// to endpoints, closed at the end of the benchmark.
func benchProvider(b *testing.B, ns string, endpoints []string) *etcd.Provider {
	cli := newClient(b, endpoints...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := etcd.NewProvider(ctx, cli, etcd.WithNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// benchClient returns a lock.Client on p, closed (before p) at the end of
// the benchmark.
func benchClient(b *testing.B, p lock.Provider, identity string) *lock.Client {
	c, err := lock.NewClient(p, lock.WithIdentity(identity))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// campaign wins role with c, waiting up to 30s.
func campaign(b *testing.B, c *lock.Client, role string, o lock.ElectionOptions) *lock.Term {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t, err := c.Campaign(ctx, role, o)
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// waitForWaiters waits up to 30s until n candidates wait for role.
func waitForWaiters(b *testing.B, c *lock.Client, role string, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Inspect(context.Background(), role)
		switch {
		case err == nil && st.Waiters >= n:
			return
		case time.Now().After(deadline):
			b.Fatalf("%d candidates waiting for %s after 30s, want %d (%v)", st.Waiters, role, n, err)
		}
		time.Sleep(time.Millisecond)
	}
}
