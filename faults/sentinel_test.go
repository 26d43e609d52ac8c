package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/locktest"
)

// sentinelOptions are the options of go-redis's failover client for the
// sentinels at addrs: NewUniversalClient with MasterName, as the README
// shows, with ContextTimeoutEnabled.
func sentinelOptions(addrs []string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		MasterName:            faults.MasterName,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
}

// newSentinelClient returns a lock Client on a Redis provider over a failover
// client of its own; both are closed at the end of the test.
func newSentinelClient(t testing.TB, addrs []string, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	rc := redis.NewUniversalClient(sentinelOptions(addrs))
	t.Cleanup(func() { _ = rc.Close() })
	return newClient(t, rc, opts...)
}

// TestSentinel runs the provider conformance suite (locktest.Run) and the
// replica scenarios through the public API against a real Sentinel
// deployment (one master, two replicas, three sentinels, all started here),
// with lock Clients on go-redis's failover client: acquire and release
// across Clients with the record replicated, ErrHeld, a waiter handed the
// lock by the release's announcement, mutual exclusion with increasing
// tokens, and the OncePer and GracePeriod windows (replicated too).
func TestSentinel(t *testing.T) {
	s := faults.StartSentinel(t, faults.SentinelOptions{})
	ctx := ctxTimeout(t, 2*time.Minute)
	master := s.Nodes[0].Addr
	direct := newRedis(t, master)
	var replicas []*redis.Client
	for _, n := range s.Nodes[1:] {
		replicas = append(replicas, newRedis(t, n.Addr))
	}
	// replicated checks that every replica comes to hold want under the
	// record of key (want "" for none) within two seconds.
	replicated := func(t *testing.T, key, want string) {
		t.Helper()
		for i, r := range replicas {
			var v string
			for deadline := time.Now().Add(2 * time.Second); ; {
				var err error
				v, err = r.Get(ctx, recordKey(key)).Result()
				if errors.Is(err, redis.Nil) {
					v, err = "", nil
				}
				require.NoError(t, err, "read the record on replica %d", i)
				if v == want || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			expect(t, v == want, "replica %d holds %q under %s, the master %q", i, v, recordKey(key), want)
		}
	}

	t.Run("conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Backend{
			New: func(t testing.TB) lock.Provider {
				rc := redis.NewUniversalClient(sentinelOptions(s.Addrs))
				t.Cleanup(func() { _ = rc.Close() })
				return lock.NewRedisProvider(rc)
			},
			Expires:         true,
			SkipsUnlistened: true, // a failover client is not a Cluster's
			Remote:          true,
		})
	})

	t.Run("acquire and release", func(t *testing.T) {
		const name = "sentinel-basic"
		a, b := newSentinelClient(t, s.Addrs), newSentinelClient(t, s.Addrs)
		var last uint64
		for round := range 4 {
			l, err := a.Acquire(ctx, name, lock.Options{Lease: 5 * time.Second})
			require.NoError(t, err, "round %d", round)
			stats.grants.Add(1)
			expect(t, l.Token() > last, "round %d: token %d after %d: tokens must strictly increase", round, l.Token(), last)
			last = l.Token()
			v, _ := record(t, direct, l.Key())
			expect(t, recordOwner(v) == l.Owner(), "round %d: record %q on the master, holder %s", round, v, l.Owner())
			replicated(t, l.Key(), v)

			l2, err := b.Acquire(ctx, name, lock.Options{})
			expect(t, l2 == nil && errors.Is(err, lock.ErrHeld), "round %d: second acquisition while held: lock %v, err %v; want ErrHeld", round, l2, err)
			if l2 != nil {
				_ = l2.Release(ctx)
			}
			require.NoError(t, l.Release(ctx))
			v, _ = record(t, direct, l.Key())
			expect(t, v == "", "round %d: record %q left after the release", round, v)
			replicated(t, l.Key(), "")
			a, b = b, a
		}
	})

	t.Run("waiter handed the lock", func(t *testing.T) {
		const name = "sentinel-wake"
		holder := newSentinelClient(t, s.Addrs)
		contended := make(chan struct{}, 1)
		// A poll interval of 10s: only the release's announcement wakes it.
		waiter := newSentinelClient(t, s.Addrs, lock.WithPollInterval(10*time.Second), lock.WithEvents(func(e lock.Event) {
			if e.Kind == lock.EventContended {
				select {
				case contended <- struct{}{}:
				default:
				}
			}
		}))
		checkHandedOver(t, ctx, holder, waiter, name, contended)
	})

	t.Run("mutual exclusion", func(t *testing.T) {
		const (
			name       = "sentinel-mutex"
			clients    = 3
			goroutines = 3
			total      = 300
		)
		rctx, cancel := context.WithTimeout(ctx, 25*time.Second)
		defer cancel()
		cs := make([]*lock.Client, clients)
		for i := range cs {
			cs[i] = newSentinelClient(t, s.Addrs)
		}
		var claimed atomic.Int64
		n := exclusionRun(t, rctx, cs, goroutines, name, 20*time.Second, func() bool { return claimed.Add(1) <= total })
		expect(t, n == total, "%d critical sections ran, want %d", n, total)
	})

	t.Run("OncePer window", func(t *testing.T) {
		const (
			name   = "sentinel-onceper"
			window = time.Second
		)
		a, b := newSentinelClient(t, s.Addrs), newSentinelClient(t, s.Addrs)
		before := time.Now()
		l, err := a.Acquire(ctx, name, lock.Options{OncePer: window})
		require.NoError(t, err)
		stats.grants.Add(1)
		require.NoError(t, l.Release(ctx))
		v, ttl := record(t, direct, l.Key())
		expect(t, strings.HasSuffix(v, ",ended") && ttl > 0, "record %q (TTL %v) after a release inside OncePer, want an ended one", v, ttl)
		replicated(t, l.Key(), v)

		_, err = b.Acquire(ctx, name, lock.Options{})
		expect(t, errors.Is(err, lock.ErrGracePeriod), "acquisition inside the window: %v, want ErrGracePeriod", err)
		_, err = b.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 5 * time.Second})
		expect(t, errors.Is(err, lock.ErrGracePeriod), "waiting acquisition inside the window: %v, want ErrGracePeriod", err)
		expect(t, time.Since(before) < window, "the checks took %v, past the window: the test is too slow to tell", time.Since(before))

		time.Sleep(time.Until(before.Add(window + 50*time.Millisecond)))
		l2, err := b.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "acquisition after the window")
		stats.grants.Add(1)
		expect(t, l2.Token() > l.Token(), "token %d after the window, %d before", l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	})

	t.Run("GracePeriod tells waiters", func(t *testing.T) {
		const (
			name  = "sentinel-grace"
			grace = 600 * time.Millisecond
		)
		holder := newSentinelClient(t, s.Addrs)
		contended := make(chan struct{}, 1)
		waiter := newSentinelClient(t, s.Addrs, lock.WithPollInterval(10*time.Second), lock.WithEvents(func(e lock.Event) {
			if e.Kind == lock.EventContended {
				select {
				case contended <- struct{}{}:
				default:
				}
			}
		}))
		l, err := holder.Acquire(ctx, name, lock.Options{GracePeriod: grace})
		require.NoError(t, err)
		stats.grants.Add(1)
		done := make(chan error, 1)
		var ended atomic.Int64
		go func() {
			_, err := waiter.Acquire(ctx, name, lock.Options{Wait: true, GracePeriod: grace, MaxDuration: 20 * time.Second})
			ended.Store(time.Now().UnixNano())
			done <- err
		}()
		select {
		case <-contended:
		case err := <-done:
			t.Fatalf("the waiter ended before the release: %v", err)
		case <-ctx.Done():
			t.Fatal("the waiter never found the lock held")
		}
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		err = <-done
		took := time.Unix(0, ended.Load()).Sub(released)
		expect(t, errors.Is(err, lock.ErrGracePeriod), "the waiter's acquisition after a release into a window: %v, want ErrGracePeriod", err)
		expect(t, took < 2*time.Second, "the waiter was told %v after the release (poll interval 10s): the announcement did not wake it", took)
		v, _ := record(t, direct, l.Key())
		replicated(t, l.Key(), v)

		time.Sleep(time.Until(released.Add(grace + 50*time.Millisecond)))
		l2, err := waiter.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "acquisition after the grace period")
		stats.grants.Add(1)
		expect(t, l2.Token() > l.Token(), "token %d after the window, %d before", l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	})
}

// The failover run of TestSentinelFailover: four processes of two
// goroutines each contend on three locks with short leases: 1.5 s, shorter
// than a failover takes, or 3 s, longer (each acquisition picks one).
const (
	failoverProcs      = 4
	failoverGoroutines = 2
	failoverLocks      = 3
	failoverMaxWait    = 30 * time.Second
	// failoverGrantBound is the generous bound within which every lock must
	// be granted again after a promotion. It is that generous because the
	// queue entries of waiters that gave up during the outage are served
	// after it, each keeping the lock idle for its lease (see the "idle
	// locks" figure): 16 s has been seen in 50 failovers.
	failoverGrantBound = 30 * time.Second
	// failoverLagFor is how long the replicas of the master are cut off
	// before a kill in "lag" mode: the writes of that time are lost.
	failoverLagFor = 300 * time.Millisecond
)

var failoverLeases = []time.Duration{1500 * time.Millisecond, 3 * time.Second}

func init() { roles["failover"] = roleFailover }

// TestSentinelFailover measures what a Sentinel failover does to the locks.
// Four child processes, each with one lock Client on go-redis's failover
// client, contend on three locks with leases of 1.5 s (shorter than a
// failover takes) and 3 s (longer), make fenced writes to a resource (a Redis
// of its own that keeps the highest token it has seen) and report every
// grant and how it ended. Meanwhile the test kills the master (SIGKILL, at a
// moment when some holder is in a long hold), waits for the sentinels to
// promote a replica, restarts the old master as a replica of the new one,
// and does it again: 10 failovers (50 with LOCK_LONG_FAULTS=1). Every other failover is in "lag" mode: the
// replicas are cut off 300 ms before the kill, so that what the master wrote
// in those 300 ms (grants, renewals, releases, tokens) is lost with it, as
// asynchronous replication allows; in "sync" mode the replicas are up to
// date, as they usually are on a fast network.
//
// It asserts what the library guarantees: no two grants by the same primary
// overlap, and their tokens increase; every holder is told of a loss or
// releases, a holder that loses its lock in a failover is told within its
// lease; every lock is granted again within 30 s of a promotion; no process
// leaks goroutines. It counts, and prints in lines that start with
// "faults: failover ", what replication does not guarantee: grants that
// overlapped across a failover, tokens issued twice or going backwards; what
// holders and waiters saw; and what was left in the wait queues and records
// of the new master that kept a lock idle: entries of waiters that had given
// up (their Leave failed while no master answered), and records of holds
// that had ended.
func TestSentinelFailover(t *testing.T) {
	failovers, budget := 10, 150*time.Second
	if os.Getenv("LOCK_LONG_FAULTS") == "1" {
		failovers, budget = 50, 10*time.Minute
	}
	runFailovers(t, "failover", failovers, budget, 0)
}

// TestSentinelFailoverWait is TestSentinelFailover with every process's
// provider made with WaitForReplicas(1, failoverReplicaTimeout): 6
// failovers (20 with LOCK_LONG_FAULTS=1), half of them in lag mode, whose
// figures are printed in lines that start with "faults: failover-wait ".
func TestSentinelFailoverWait(t *testing.T) {
	failovers, budget := 6, 100*time.Second
	if os.Getenv("LOCK_LONG_FAULTS") == "1" {
		failovers, budget = 20, 5*time.Minute
	}
	runFailovers(t, "failover-wait", failovers, budget, 1)
}

// failoverReplicaTimeout is the WAIT timeout of TestSentinelFailoverWait.
const failoverReplicaTimeout = 250 * time.Millisecond

// runFailovers runs TestSentinelFailover's failovers, with the children's
// providers waiting for waitReplicas replicas (none when 0), and prints its
// figures after "faults: label ".
func runFailovers(t *testing.T, label string, failovers int, budget time.Duration, waitReplicas int) {
	s := faults.StartSentinel(t, faults.SentinelOptions{})
	resource := faults.StartRedis(t)
	ctx := ctxTimeout(t, budget)
	r := &failoverRun{t: t, label: label, wait: waitReplicas, s: s, master: s.Nodes[0].Addr, byOwner: make(map[string]*foGrant),
		finished: make(map[string]time.Time), skipped: make(map[string]time.Time),
		idle: make(map[string]durs), unclean: make(map[int]bool)}
	r.start(ctx, resource.Addr)
	for i := range failovers {
		r.failover(ctx, i)
	}
	r.stop(ctx)
	r.analyse()
}

// failoverRun is the state of TestSentinelFailover: the deployment, the
// children, the failovers done, and what the children reported.
type failoverRun struct {
	t        *testing.T
	label    string // of the figures printed
	wait     int    // WaitForReplicas of the children's providers; 0 for none
	s        *faults.Sentinel
	master   string
	children []*faults.Child
	began    time.Time // the children were told to go
	ended    time.Time // the children were told to stop

	collectors sync.WaitGroup
	stopWatch  func()     // stops watch and waits for it
	mu         sync.Mutex // guards what follows
	byOwner    map[string]*foGrant
	grants     []*foGrant
	finished   map[string]time.Time // when each acquisition ended (granted or failed), by owner
	skipped    map[string]time.Time // when each acquisition that failed ended, by owner
	watched    string               // the master whose records watch reads
	idle       map[string]durs      // how long records of ghosts ("ghost") and of ended holds ("stale") lived
	errs       []foError
	dones      []map[string]string
	failovers  []*foEvent
	lastGhosts []string     // the ghosts in the wait queues when the children were told to stop
	unclean    map[int]bool // eras whose master the sentinels moved on their own
}

// foGrant is one grant a child reported: when the Acquire call started and
// returned, and until when the holder believed it held the lock (the start
// of its Release, or when it was told of the loss).
type foGrant struct {
	proc             int
	lock, owner      string
	token            uint64
	lease, hold      time.Duration // hold: how long the holder meant to hold it
	start, got       time.Time
	end, told        time.Time // zero until reported; told zero when not told
	how, cause       string    // released, lost, lost-at-release, release-error
	rel              time.Duration
	writes, rejected int
	dup, writeErrors int
	era              int // the primary that granted it, -1 when unknown
	ended            bool
}

// foError is an Acquire that failed in a child.
type foError struct {
	proc      int
	lock      string
	start, at time.Time
	err       string
}

// foEvent is one failover: the master killed, the replica promoted, and when
// each step was seen.
type foEvent struct {
	n            int
	mode         string // sync: replicas up to date; lag: cut off first
	old, new     string
	unreplicated int64 // bytes the master had written that no replica had, just before the kill
	kill, dead   time.Time
	promoted     time.Time // a sentinel reports the new master
	agreed       time.Time // every sentinel does
	stable       time.Time // the old master is back as a replica, and the sentinels see it
	// What the grants saw, filled in by analyse.
	holders, told, kept, lostAtRelease, releaseFailed int
	waiters, resumed, failed                          int
	overlaps, repeated, backwards                     int  // of grants made before this kill, and of later ones
	nextGrant                                         durs // after the promotion, one per lock
	// The wait queues on the new master once every sentinel reported it.
	queued         int      // entries
	ghosts         []string // entries ("lock entry") of acquisitions that had ended already
	ghostsSurvived int      // of them, still queued at the next snapshot
}

// start starts the children and tells them to go once every one is ready.
func (r *failoverRun) start(ctx context.Context, resource string) {
	env := []string{
		"FAULTS_SENTINELS=" + strings.Join(r.s.Addrs, ","),
		"FAULTS_RESOURCE=" + resource,
		"FAULTS_LOCKS=" + strconv.Itoa(failoverLocks),
		"FAULTS_GOROUTINES=" + strconv.Itoa(failoverGoroutines),
		"FAULTS_LEASES=" + failoverLeases[0].String() + "," + failoverLeases[1].String(),
		"FAULTS_WAIT=" + strconv.Itoa(r.wait),
	}
	for range failoverProcs {
		r.children = append(r.children, startChild(r.t, "failover", env...))
	}
	for _, c := range r.children {
		word, _ := faults.Fields(c.Next(ctx))
		require.Equal(r.t, "ready", word)
	}
	for i, c := range r.children {
		r.collectors.Add(1)
		go r.collect(i, c)
	}
	r.watched = r.master
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go r.watch(stopWatch, watchDone)
	r.stopWatch = sync.OnceFunc(func() {
		close(stopWatch)
		<-watchDone
	})
	r.t.Cleanup(r.stopWatch)
	r.began = time.Now()
	for _, c := range r.children {
		c.Send("go")
	}
}

// watch reads the records of the locks on the master every 50 ms until stop
// is closed, and measures how long a record belonged to an acquisition that
// had failed already (a ghost: its queue entry was served after its waiter
// gave up, and nobody will use or release the lock) or to a hold that had
// ended more than 200 ms before (a stale record: its release failed, or was
// lost with the master). Either keeps the lock from everyone until it
// expires.
func (r *failoverRun) watch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	clients := make(map[string]*redis.Client)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	type run struct {
		owner, kind string
		since       time.Time
	}
	cur := make(map[string]run)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			for _, c := range cur {
				r.addIdle(c.kind, time.Since(c.since))
			}
			return
		case <-tick.C:
		}
		r.mu.Lock()
		addr := r.watched
		r.mu.Unlock()
		if clients[addr] == nil {
			clients[addr] = redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
		}
		for i := range failoverLocks {
			name := "failover-" + strconv.Itoa(i)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			v, err := clients[addr].Get(ctx, recordKey(keyOf(name))).Result()
			cancel()
			if err != nil && !errors.Is(err, redis.Nil) {
				continue // the master is down
			}
			owner, now := recordOwner(v), time.Now()
			kind := r.idleKind(owner, now)
			if c := cur[name]; c.owner != owner || c.kind != kind {
				r.addIdle(c.kind, now.Sub(c.since))
				cur[name] = run{owner, kind, now}
			}
		}
	}
}

// idleKind says whether a record of owner keeps the lock idle at now:
// "ghost", "stale" (see watch), or "" when it does not.
func (r *failoverRun) idleKind(owner string, now time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.skipped[owner]; owner != "" && ok {
		return "ghost"
	}
	if g := r.byOwner[owner]; g != nil && g.ended && now.Sub(g.end) > 200*time.Millisecond {
		return "stale"
	}
	return ""
}

func (r *failoverRun) addIdle(kind string, d time.Duration) {
	if kind == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idle[kind] = append(r.idle[kind], d)
}

// collect reads child i's reports until it exits.
func (r *failoverRun) collect(i int, c *faults.Child) {
	defer r.collectors.Done()
	for line := range c.Lines {
		r.add(i, line)
	}
}

func (r *failoverRun) add(proc int, line string) {
	word, f := faults.Fields(line)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch word {
	case "grant":
		g := &foGrant{proc: proc, lock: f["lock"], owner: f["owner"], token: parseU(f["token"]),
			lease: time.Duration(parseU(f["lease"])), hold: time.Duration(parseU(f["hold"])), start: nsTime(f["start"]), got: nsTime(f["got"]), era: -1}
		r.byOwner[g.owner] = g
		r.finished[g.owner] = g.got
		r.grants = append(r.grants, g)
	case "end":
		g := r.byOwner[f["owner"]]
		if g == nil {
			r.t.Errorf("child %d: end of a grant it did not report: %s", proc, line)
			return
		}
		g.ended, g.end, g.told, g.how, g.cause = true, nsTime(f["at"]), nsTime(f["told"]), f["how"], f["cause"]
		g.rel = time.Duration(parseU(f["rel"]))
		g.writes, g.rejected = int(parseU(f["writes"])), int(parseU(f["rejected"]))
		g.dup, g.writeErrors = int(parseU(f["dup"])), int(parseU(f["write_errors"]))
	case "skipped":
		r.finished[f["owner"]] = nsTime(f["at"])
		r.skipped[f["owner"]] = nsTime(f["at"])
	case "error":
		r.errs = append(r.errs, foError{proc: proc, lock: f["lock"], start: nsTime(f["start"]), at: nsTime(f["at"]), err: f["err"]})
	case "done":
		r.dones = append(r.dones, f)
	default:
		r.t.Errorf("child %d: unknown report %q", proc, line)
	}
}

func parseU(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// nsTime is the time of a report's Unix nanoseconds; zero for 0. The
// processes share the machine's clock.
func nsTime(s string) time.Time {
	n := parseU(s)
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(n))
}

// grantedSince reports whether every lock has been granted after since.
func (r *failoverRun) grantedSince(since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[string]bool)
	for i := len(r.grants) - 1; i >= 0 && len(seen) < failoverLocks; i-- {
		if g := r.grants[i]; g.got.After(since) {
			seen[g.lock] = true
		}
	}
	return len(seen) == failoverLocks
}

// waitGrants waits until every lock has been granted after since, for at
// most failoverGrantBound after since (analyse reports a lock that was not).
func (r *failoverRun) waitGrants(ctx context.Context, since time.Time) {
	for !r.grantedSince(since) && time.Since(since) < failoverGrantBound && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// failover kills the master once the locks are in use again (and some
// holder is in a long hold), waits for the promotion, and brings the old
// master back as a replica.
func (r *failoverRun) failover(ctx context.Context, i int) {
	since := r.began
	if i > 0 {
		since = r.failovers[i-1].promoted
	}
	r.waitGrants(ctx, since)
	time.Sleep(rand.N(200 * time.Millisecond))
	r.waitLongHold(ctx, failoverLagFor+failoverLeases[0])
	if m := r.movedMaster(ctx); m != "" {
		r.t.Logf("failover %d: the sentinels moved the master from %s to %s on their own", i+1, r.master, m)
		r.master, r.unclean[i] = m, true
		require.NoError(r.t, r.s.WaitStable(ctx, m))
	}
	f := &foEvent{n: i + 1, mode: "sync", old: r.master}
	if i%2 == 1 {
		f.mode = "lag"
	}
	r.kill(ctx, f)
	r.recover(ctx, f)
	r.master = f.new
	r.mu.Lock()
	r.failovers = append(r.failovers, f)
	r.mu.Unlock()
	r.t.Logf("failover %d (%s): %s -> %s, promoted after %v, stable after %v; %d bytes unreplicated at the kill",
		f.n, f.mode, f.old, f.new, ms(f.promoted.Sub(f.kill)), ms(f.stable.Sub(f.kill)), f.unreplicated)
}

// kill kills the master with SIGKILL; in lag mode, after cutting its
// replicas off for failoverLagFor.
func (r *failoverRun) kill(ctx context.Context, f *foEvent) {
	if f.mode == "lag" {
		require.NoError(r.t, r.s.CutReplication(ctx, f.old), "cut the replicas off")
		time.Sleep(failoverLagFor)
	}
	f.unreplicated = r.unreplicated(ctx, f.old)
	f.kill = time.Now()
	require.NoError(r.t, r.s.Node(f.old).Kill())
	f.dead = time.Now()
	fault(r.t, fmt.Sprintf("failover %d (%s): SIGKILL the master %s", f.n, f.mode, f.old))
}

// recover waits until a sentinel reports a new master, then every one does;
// reads the wait queues there; and restarts the old master as its replica,
// until the sentinels see the deployment whole again.
func (r *failoverRun) recover(ctx context.Context, f *foEvent) {
	t, s := r.t, r.s
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var err error
	f.new, f.promoted, err = s.WaitPromotion(ctx, f.old)
	require.NoError(t, err, "failover %d:\n%s", f.n, s.Logs())
	require.NoError(t, s.WaitAgree(ctx, f.new), "failover %d:\n%s", f.n, s.Logs())
	f.agreed = time.Now()
	r.mu.Lock()
	r.watched = f.new
	r.mu.Unlock()
	f.queued, f.ghosts = r.snapshot(ctx, f.new)
	require.NoError(t, s.Rejoin(ctx, s.Node(f.old), f.new), "failover %d: restart %s as a replica", f.n, f.old)
	require.NoError(t, s.WaitStable(ctx, f.new), "failover %d:\n%s", f.n, s.Logs())
	f.stable = time.Now()
}

// waitLongHold waits, for up to a second, until a holder is in a hold
// with more than left of it to run, so that the kill finds one whose lease
// must be renewed through the failover.
func (r *failoverRun) waitLongHold(ctx context.Context, left time.Duration) {
	held := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		now := time.Now()
		for i := len(r.grants) - 1; i >= 0 && i >= len(r.grants)-50; i-- {
			g := r.grants[i]
			if !g.ended && g.got.Add(g.hold).Sub(now) > left {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(time.Second); !held() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
}

// movedMaster returns the master a sentinel reports when it is not the one
// the test made master, "" otherwise.
func (r *failoverRun) movedMaster(ctx context.Context) string {
	for _, m := range r.s.Masters(ctx) {
		if m != "" && m != r.master {
			return m
		}
	}
	return ""
}

// snapshot reads the wait queues of the locks on master. It returns how many
// entries they hold, and those of acquisitions that had ended already
// (granted, or failed): ghosts, which a release or a waiter's look will
// serve as if they waited, with a grant that nobody uses or releases.
func (r *failoverRun) snapshot(ctx context.Context, master string) (int, []string) {
	rc := newRedis(r.t, master, func(o *redis.Options) { o.MaxRetries = -1 })
	defer rc.Close()
	now := time.Now()
	n := 0
	var ghosts []string
	for i := range failoverLocks {
		name := "failover-" + strconv.Itoa(i)
		_, _, qkey, _ := lock.RedisKeys(keyOf(name))
		entries, err := rc.LRange(ctx, qkey, 0, -1).Result()
		if err != nil {
			r.t.Logf("read the wait queue of %s on %s: %v", name, master, err)
			continue
		}
		n += len(entries)
		r.mu.Lock()
		for _, e := range entries {
			owner, _, _ := strings.Cut(e, " ")
			if at, ok := r.finished[owner]; ok && at.Before(now) {
				ghosts = append(ghosts, name+" "+e)
			}
		}
		r.mu.Unlock()
	}
	return n, ghosts
}

// unreplicated returns how many bytes of its replication stream master has
// that no replica has processed.
func (r *failoverRun) unreplicated(ctx context.Context, master string) int64 {
	offset := func(addr, field string) int64 {
		rc := newRedis(r.t, addr, func(o *redis.Options) { o.MaxRetries = -1 })
		defer rc.Close()
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return -1
		}
		return faults.InfoField(info, field)
	}
	best := int64(-1)
	for _, n := range r.s.Nodes {
		if n.Addr != master {
			best = max(best, offset(n.Addr, "slave_repl_offset"))
		}
	}
	return offset(master, "master_repl_offset") - best
}

// stop lets every lock be granted once more after the last promotion, tells
// the children to stop, and waits for their last reports.
func (r *failoverRun) stop(ctx context.Context) {
	since := r.began
	if n := len(r.failovers); n > 0 {
		since = r.failovers[n-1].promoted
	}
	r.waitGrants(ctx, since)
	time.Sleep(300 * time.Millisecond)
	if m := r.movedMaster(ctx); m != "" {
		r.t.Logf("after the last failover, the sentinels moved the master from %s to %s on their own", r.master, m)
		r.unclean[len(r.failovers)] = true
	}
	_, r.lastGhosts = r.snapshot(ctx, r.master)
	r.stopWatch()
	r.ended = time.Now()
	for _, c := range r.children {
		c.Send("stop")
	}
	for i, c := range r.children {
		require.NoError(r.t, c.Wait(ctx), "child %d failed:\n%s", i, c.Out())
	}
	r.collectors.Wait()
}

// durs are measured durations.
type durs []time.Duration

// String is "p50 X, max Y (n=N)", or "-" for none.
func (d durs) String() string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v, max %v (n=%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// say prints a figure for the README.
func (r *failoverRun) say(format string, args ...any) {
	fmt.Printf("faults: "+r.label+" "+format+"\n", args...)
}

// analyse checks what the library guarantees and prints what it measured.
func (r *failoverRun) analyse() {
	t := r.t
	r.mu.Lock() // the collectors are done; this only keeps the race detector informed
	defer r.mu.Unlock()
	stats.grants.Add(int64(len(r.grants)))
	r.attribute()
	for _, g := range r.grants {
		expect(t, g.ended, "the grant of %s with token %d to child %d never ended: its holder was neither told nor released", g.lock, g.token, g.proc)
	}
	byLock := make(map[string][]*foGrant)
	for _, g := range r.grants {
		byLock[g.lock] = append(byLock[g.lock], g)
	}
	for _, gs := range byLock {
		slices.SortFunc(gs, func(a, b *foGrant) int { return a.got.Compare(b.got) })
	}
	ov := r.overlaps(byLock)
	repeated, backwards := r.tokens(byLock)
	holders := r.holders()
	r.ghostsSurvived()
	resumedAfter, failedAfter := r.waiters()
	r.nextGrants(byLock)
	r.checkChildren()

	wait := "no WaitForReplicas"
	if r.wait > 0 {
		wait = fmt.Sprintf("WaitForReplicas(%d, %v)", r.wait, failoverReplicaTimeout)
	}
	r.say("setup: 1 master + 2 replicas + 3 sentinels (down-after 750ms, failover-timeout 1.5s); %d processes x %d goroutines on %d locks, leases %v, poll interval 1s and release timeout 5s (defaults), %s",
		failoverProcs, failoverGoroutines, failoverLocks, failoverLeases, wait)
	for _, f := range r.failovers {
		r.say("#%d %s: promoted %v after the kill (every sentinel %v, old master back as a replica %v), %dB unreplicated; holders %d: told %d, kept %d, lost at release %d, release failed %d; waiters %d: resumed %d, failed %d; next grant after the promotion %v; overlaps %d, repeated tokens %d; wait queues %d entries, %d of ended acquisitions (%d still there at the next look)",
			f.n, f.mode, ms(f.promoted.Sub(f.kill)), ms(f.agreed.Sub(f.kill)), ms(f.stable.Sub(f.kill)), f.unreplicated,
			f.holders, f.told, f.kept, f.lostAtRelease, f.releaseFailed, f.waiters, f.resumed, f.failed, f.nextGrant, f.overlaps, f.repeated, f.queued, len(f.ghosts), f.ghostsSurvived)
	}
	r.summary(ov, repeated, backwards, holders, resumedAfter, failedAfter)
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func total(d durs) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return ms(sum)
}

// attribute sets the era of every grant: k when it was asked for and granted
// while the k-th master lived (from the death of the one before, to its
// kill), -1 when the request spans a kill or the era is unclean.
func (r *failoverRun) attribute() {
	n := len(r.failovers)
	for _, g := range r.grants {
		for k := 0; k <= n; k++ {
			from, to := r.began, r.ended.Add(time.Hour)
			if k > 0 {
				from = r.failovers[k-1].dead
			}
			if k < n {
				to = r.failovers[k].kill
			}
			if !r.unclean[k] && g.start.After(from) && g.got.Before(to) {
				g.era = k
				break
			}
		}
	}
}

// lastKill returns the index of the last failover whose kill came before at,
// -1 for none.
func (r *failoverRun) lastKill(at time.Time) int {
	k := -1
	for i, f := range r.failovers {
		if f.kill.Before(at) {
			k = i
		}
	}
	return k
}

// firstKillAfter returns the index of the first failover whose kill came
// after at, -1 for none: the failover that lost what was granted at at.
func (r *failoverRun) firstKillAfter(at time.Time) int {
	for i, f := range r.failovers {
		if f.kill.After(at) {
			return i
		}
	}
	return -1
}

// endOf is until when g's holder believed it held the lock.
func (r *failoverRun) endOf(g *foGrant) time.Time {
	if !g.ended {
		return r.ended
	}
	return g.end
}

// foOverlaps counts pairs of grants of one lock whose holders believed they
// held it at the same time.
type foOverlaps struct {
	same, cross, unknown int
	longest              time.Duration
}

func (r *failoverRun) overlaps(byLock map[string][]*foGrant) foOverlaps {
	var ov foOverlaps
	for _, gs := range byLock {
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if !b.got.Before(r.endOf(a)) {
					break
				}
				end := r.endOf(a)
				if e := r.endOf(b); e.Before(end) {
					end = e
				}
				d := end.Sub(b.got)
				ov.longest = max(ov.longest, d)
				if k := r.firstKillAfter(a.got); k >= 0 {
					r.failovers[k].overlaps++
				}
				switch {
				case a.era >= 0 && a.era == b.era:
					ov.same++
					expect(r.t, false, "%s: grants with tokens %d and %d (children %d and %d) overlap for %v, both granted by the primary of era %d; first: %s",
						a.lock, a.token, b.token, a.proc, b.proc, ms(d), a.era, r.describe(a, b))
				case a.era >= 0 && b.era >= 0:
					ov.cross++
				default:
					ov.unknown++
				}
			}
		}
	}
	return ov
}

// describe says how a and b, overlapping grants, began and ended, relative
// to a's start and to the failovers.
func (r *failoverRun) describe(a, b *foGrant) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return ms(t.Sub(a.start)).String()
	}
	one := func(g *foGrant) string {
		return fmt.Sprintf("child %d asked at %s, got at %s (lease %v), ended at %s (%s %q, told %s, release took %v)",
			g.proc, at(g.start), at(g.got), g.lease, at(r.endOf(g)), g.how, g.cause, at(g.told), ms(g.rel))
	}
	var kills []string
	for _, f := range r.failovers {
		if f.kill.After(a.start.Add(-10*time.Second)) && f.kill.Before(r.endOf(b).Add(10*time.Second)) {
			kills = append(kills, fmt.Sprintf("kill %s promoted %s dead %s", at(f.kill), at(f.promoted), at(f.dead)))
		}
	}
	return one(a) + "; second: " + one(b) + "; failovers near: " + strings.Join(kills, ", ")
}

// tokens counts the tokens issued twice and those below one issued before,
// and checks that the tokens one primary issued increase.
func (r *failoverRun) tokens(byLock map[string][]*foGrant) (repeated, backwards int) {
	for name, gs := range byLock {
		seen := make(map[uint64]*foGrant)
		lastInEra := make(map[int]*foGrant)
		var top *foGrant
		for _, g := range gs {
			if p := seen[g.token]; p != nil {
				repeated++
				if k := r.firstKillAfter(p.got); k >= 0 {
					r.failovers[k].repeated++
				}
				expect(r.t, p.era < 0 || p.era != g.era, "%s: token %d issued twice by the primary of era %d", name, g.token, g.era)
			}
			seen[g.token] = g
			if top != nil && g.token < top.token {
				backwards++
				if k := r.firstKillAfter(top.got); k >= 0 {
					r.failovers[k].backwards++
				}
			}
			if top == nil || g.token > top.token {
				top = g
			}
			if g.era >= 0 {
				if p := lastInEra[g.era]; p != nil {
					expect(r.t, g.token > p.token, "%s: token %d granted after %d by the primary of era %d: tokens must increase", name, g.token, p.token, g.era)
				}
				lastInEra[g.era] = g
			}
		}
	}
	return repeated, backwards
}

// holderStats are what the holders of one lease saw at the kills.
type holderStats struct {
	holders, told, kept, lostAtRelease, releaseFailed int
	toldAfter, releaseTook                            durs
	causes                                            map[string]int // of the losses told
}

// holders classifies the grants held when a master was killed, by lease and
// by how they ended, and checks that a holder told of the loss was told
// within its lease.
func (r *failoverRun) holders() map[time.Duration]*holderStats {
	byLease := make(map[time.Duration]*holderStats)
	for _, lease := range failoverLeases {
		byLease[lease] = &holderStats{causes: make(map[string]int)}
	}
	for k, f := range r.failovers {
		for _, g := range r.grants {
			if !g.got.Before(f.kill) || !r.endOf(g).After(f.kill) {
				continue
			}
			h := byLease[g.lease]
			if h == nil {
				h = &holderStats{causes: make(map[string]int)}
				byLease[g.lease] = h
			}
			f.holders++
			h.holders++
			switch {
			case g.how == "lost" && r.lastKill(g.told) == k:
				f.told++
				h.told++
				d := g.told.Sub(f.kill)
				h.toldAfter = append(h.toldAfter, d)
				h.causes[g.cause]++
				expect(r.t, d <= g.lease+time.Second, "%s: the holder of token %d was told %v after the kill (%s): later than its lease (%v)",
					g.lock, g.token, ms(d), g.cause, g.lease)
			case g.how == "lost" || g.how == "released":
				f.kept++ // renewed or released on the new master: its record survived
				h.kept++
			case g.how == "lost-at-release":
				f.lostAtRelease++
				h.lostAtRelease++
			case g.how == "release-error":
				if len(h.releaseTook) == 0 {
					r.t.Logf("Release failed (lease %v), first seen: %s", g.lease, g.cause)
				}
				f.releaseFailed++
				h.releaseFailed++
				h.releaseTook = append(h.releaseTook, g.rel)
			}
		}
	}
	return byLease
}

// ghostsSurvived counts, for each failover, the ghost entries of its
// snapshot that the next snapshot still finds.
func (r *failoverRun) ghostsSurvived() {
	for k, f := range r.failovers {
		next := r.lastGhosts
		if k+1 < len(r.failovers) {
			next = r.failovers[k+1].ghosts
		}
		for _, e := range f.ghosts {
			if slices.Contains(next, e) {
				f.ghostsSurvived++
			}
		}
	}
}

// waiters classifies the acquisitions under way when a master was killed
// (and ended before the next kill): granted in the same call (how long after
// the promotion), or failed (how long after the kill).
func (r *failoverRun) waiters() (resumedAfter, failedAfter durs) {
	for k, f := range r.failovers {
		for _, g := range r.grants {
			if g.start.Before(f.kill) && r.lastKill(g.got) == k {
				f.waiters++
				f.resumed++
				resumedAfter = append(resumedAfter, g.got.Sub(f.promoted))
			}
		}
		for _, e := range r.errs {
			if e.start.Before(f.kill) && r.lastKill(e.at) == k {
				f.waiters++
				f.failed++
				failedAfter = append(failedAfter, e.at.Sub(f.kill))
			}
		}
	}
	return resumedAfter, failedAfter
}

// nextGrants finds, for every failover and lock, the first grant after the
// kill, and checks that it came within failoverGrantBound of the promotion.
func (r *failoverRun) nextGrants(byLock map[string][]*foGrant) {
	for _, f := range r.failovers {
		for i := range failoverLocks {
			name := "failover-" + strconv.Itoa(i)
			j := slices.IndexFunc(byLock[name], func(g *foGrant) bool { return g.got.After(f.dead) })
			if !expect(r.t, j >= 0, "failover %d: %s never granted after the kill", f.n, name) {
				continue
			}
			d := byLock[name][j].got.Sub(f.promoted)
			f.nextGrant = append(f.nextGrant, d)
			expect(r.t, d <= failoverGrantBound, "failover %d: %s first granted %v after the promotion, want within %v", f.n, name, ms(d), failoverGrantBound)
		}
	}
}

// checkChildren checks the children's last reports: no goroutine left after
// Close, and every grant reported.
func (r *failoverRun) checkChildren() {
	expect(r.t, len(r.dones) == len(r.children), "%d of %d children reported done", len(r.dones), len(r.children))
	var grants int64
	for i, d := range r.dones {
		expect(r.t, d["leak"] == "", "child %d: goroutines left after Close: %s", i, d["leak"])
		grants += int64(parseU(d["grants"]))
	}
	expect(r.t, grants == int64(len(r.grants)), "children counted %d grants, reported %d", grants, len(r.grants))
}

// errorKind names the cause of a failed Acquire.
func errorKind(msg string) string {
	for _, k := range []struct{ sub, kind string }{
		{"wait timed out", "wait timed out (MaxWait)"},
		{"connection refused", "connection refused"},
		{"READONLY", "READONLY"},
		{"i/o timeout", "i/o timeout"},
		{"deadline exceeded", "deadline exceeded"},
		{"EOF", "EOF"},
		{"connection reset", "connection reset"},
		{"broken pipe", "broken pipe"},
		{"sentinels", "no sentinel answered"},
		{"not replicated", "not replicated (WaitForReplicas)"},
	} {
		if strings.Contains(msg, k.sub) {
			return k.kind
		}
	}
	return "other"
}

// summary prints the totals, and checks what is left.
func (r *failoverRun) summary(ov foOverlaps, repeated, backwards int, holders map[time.Duration]*holderStats, resumedAfter, failedAfter durs) {
	var waiters, resumed, failed, ghosts, survived int
	var next, promoted, stable durs
	byMode := map[string][4]int{}
	for _, f := range r.failovers {
		waiters, resumed, failed = waiters+f.waiters, resumed+f.resumed, failed+f.failed
		ghosts, survived = ghosts+len(f.ghosts), survived+f.ghostsSurvived
		next = append(next, f.nextGrant...)
		promoted, stable = append(promoted, f.promoted.Sub(f.kill)), append(stable, f.stable.Sub(f.kill))
		m := byMode[f.mode]
		byMode[f.mode] = [4]int{m[0] + 1, m[1] + f.overlaps, m[2] + f.repeated, m[3] + f.backwards}
	}
	r.say("totals over %d failovers in %v: %d grants, %d failed Acquire calls; the sentinels moved the master on their own %d times",
		len(r.failovers), ms(r.ended.Sub(r.began)), len(r.grants), len(r.errs), len(r.unclean))
	r.say("promotion: a sentinel reported the new master %v after the kill; the old master was back as a replica %v after it", promoted, stable)
	for _, lease := range failoverLeases {
		h := holders[lease]
		r.say("holders at a kill, lease %v: %d; told (Done closed) %d, %v after the kill (%v); kept the lock (its record was on the new master) %d; released within the lease, Release found the record gone or taken %d; Release failed %d (it took %v)",
			lease, h.holders, h.told, h.toldAfter, h.causes, h.kept, h.lostAtRelease, h.releaseFailed, h.releaseTook)
	}
	r.say("waiters at a kill: %d; granted in the same Acquire call %d, %v after the promotion; Acquire returned an error %d, %v after the kill",
		waiters, resumed, resumedAfter, failed, failedAfter)
	r.say("next grant of each lock after a promotion: %v", next)
	kinds, steady := r.errorKinds()
	r.say("failed Acquire calls by cause: %v; away from a failover: %d", kinds, steady)
	r.say("wait queues after a promotion: %d entries of acquisitions that had ended (their Leave failed during the outage, or was lost with the master), %d of them still queued at the next promotion; %d at the end",
		ghosts, survived, len(r.lastGhosts))
	r.say("idle locks: a lock granted to an acquisition that had failed already (a waiter that gave up, whose Leave failed) stayed idle %v, total %v; a record left by a hold that had ended (its Release failed, or was lost with the master) %v, total %v",
		r.idle["ghost"], total(r.idle["ghost"]), r.idle["stale"], total(r.idle["stale"]))
	r.say("overlaps: %d pairs of grants held at once: same primary %d, across a failover %d, unattributed (a request spanning a kill) %d; longest %v",
		ov.same+ov.cross+ov.unknown, ov.same, ov.cross, ov.unknown, ms(ov.longest))
	r.say("tokens: %d issued twice, %d below one issued before", repeated, backwards)
	for _, mode := range []string{"sync", "lag"} {
		m := byMode[mode]
		r.say("mode %s: %d failovers, %d overlaps, %d tokens issued twice, %d below one issued before (each counted at the failover after the earlier grant)",
			mode, m[0], m[1], m[2], m[3])
	}
	var w foWrites
	for _, g := range r.grants {
		w = foWrites{w.writes + g.writes, w.rejected + g.rejected, w.dup + g.dup, w.errors + g.writeErrors}
	}
	r.say("fenced writes: %d; rejected as stale %d; accepted with a token another holder also had %d; failed %d", w.writes, w.rejected, w.dup, w.errors)
	expect(r.t, w.errors == 0, "%d fenced writes to the resource failed", w.errors)
}

// errorKinds counts the failed Acquire calls by cause, and those that failed
// away from a failover (logging the first few).
func (r *failoverRun) errorKinds() (map[string]int, int) {
	kinds := make(map[string]int)
	steady := 0
	for _, e := range r.errs {
		kind := errorKind(e.err)
		if kinds[kind] == 0 {
			r.t.Logf("Acquire failed (%s), first seen: %s", kind, e.err)
		}
		kinds[kind]++
		if !r.nearFailover(e.at) {
			steady++
			if steady <= 3 {
				r.t.Logf("Acquire failed away from a failover: %s", e.err)
			}
		}
	}
	return kinds, steady
}

// nearFailover reports whether at falls between a kill and two seconds after
// the deployment was stable again.
func (r *failoverRun) nearFailover(at time.Time) bool {
	for _, f := range r.failovers {
		if at.After(f.kill) && at.Before(f.stable.Add(2*time.Second)) {
			return true
		}
	}
	return false
}

// foResource is the fenced resource of the children: it keeps, per lock, the
// highest token written and who wrote it, and refuses a lower token. It
// returns 1 when the write is accepted, 0 when it is rejected as stale, and 2
// when it is accepted with the token of another holder (a token issued
// twice: fencing cannot tell the two holders apart).
var foResource = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or '0'
local tok = ARGV[1]
if #tok < #cur or (#tok == #cur and tok < cur) then return 0 end
local r = 1
if tok == cur and redis.call('GET', KEYS[2]) ~= ARGV[2] then r = 2 end
redis.call('SET', KEYS[1], tok)
redis.call('SET', KEYS[2], ARGV[2])
return r
`)

// roleFailover is a child of TestSentinelFailover. Its goroutines take one of
// the locks in turn (with Wait and one of the leases, at random), hold it for
// 10-60 ms, or one time in five for half a lease to a lease and a half, and
// make a fenced write every 100 ms while they believe they hold it. It reports
// "grant lock= owner= token= lease= hold= start= got=" at each grant,
// "skipped owner= at=" when an acquisition ends without the lock,
// "end owner= at= told= how= cause= rel= writes= rejected= dup= write_errors="
// when the hold ended, "error lock= start= at= err=" for a failed Acquire,
// and "done grants= errors= leak=" after "stop" on stdin, once its Client is
// closed.
func roleFailover(t *testing.T) {
	redis.SetLogger(quietLogger{})
	var leases []time.Duration
	for _, s := range strings.Split(childEnv(t, "FAULTS_LEASES"), ",") {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		leases = append(leases, d)
	}
	ignore := goleak.IgnoreCurrent()
	rc := redis.NewUniversalClient(sentinelOptions(strings.Split(childEnv(t, "FAULTS_SENTINELS"), ",")))
	res := redis.NewClient(&redis.Options{Addr: childEnv(t, "FAULTS_RESOURCE"), ContextTimeoutEnabled: true})
	losses := &lossLog{at: make(map[string]time.Time)}
	var opts []lock.RedisOption
	if n := int(atoi(t, childEnv(t, "FAULTS_WAIT"))); n > 0 {
		opts = append(opts, lock.WaitForReplicas(n, failoverReplicaTimeout))
	}
	c, err := lock.NewClient(lock.NewRedisProvider(rc, opts...), lock.WithEvents(losses.event))
	require.NoError(t, err)
	require.NoError(t, rc.Ping(ctxTimeout(t, 10*time.Second)).Err())
	report("ready")
	if cmd := readLine(stdin()); cmd != "go" {
		t.Fatalf("child: got %q on stdin, want go", cmd)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		readLine(stdin())
		stop()
	}()
	var grants, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range int(atoi(t, childEnv(t, "FAULTS_GOROUTINES"))) {
		w := &foWorker{c: c, res: res, losses: losses, leases: leases, locks: int(atoi(t, childEnv(t, "FAULTS_LOCKS"))),
			rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w.once(ctx, &grants, &errs)
			}
		}()
	}
	wg.Wait()
	_ = c.Close()
	_ = rc.Close()
	_ = res.Close()
	leak := ""
	// go-redis's failover client can start a Sentinel listener that its
	// Close never stops: a pub/sub connection that was redialling through
	// the sentinels when it was closed finishes the dial afterwards, and the
	// dial subscribes to the sentinel's +switch-master channel (seen once in
	// CI). Those goroutines are go-redis's own; the library's pub/sub
	// goroutines are checked by goleak in every other test package.
	if err := goleak.Find(ignore,
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9.(*sentinelFailover).listen"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initMsgChan.func1")); err != nil {
		leak = err.Error()
	}
	report("done grants=%d errors=%d leak=%q", grants.Load(), errs.Load(), leak)
}

// lossLog remembers when each owner's loss was reported (EventLost comes
// just before Done closes), and reports each acquisition that ended without
// the lock (EventSkipped), so that the parent knows its owner is not waiting.
type lossLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (l *lossLog) event(e lock.Event) {
	if e.Kind == lock.EventSkipped {
		report("skipped owner=%s at=%d", e.Owner, e.Time.UnixNano())
	}
	if e.Kind != lock.EventLost {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.at[e.Owner]; !ok {
		l.at[e.Owner] = e.Time
	}
}

// take returns and forgets the time of owner's loss; zero if none.
func (l *lossLog) take(owner string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := l.at[owner]
	delete(l.at, owner)
	return at
}

// foWorker is one goroutine of roleFailover.
type foWorker struct {
	c      *lock.Client
	res    *redis.Client
	losses *lossLog
	leases []time.Duration
	locks  int
	rnd    *rand.Rand
}

// foWrites counts a holder's fenced writes by their outcome.
type foWrites struct{ writes, rejected, dup, errors int }

// once acquires one lock, holds it, and releases it, reporting each step.
func (w *foWorker) once(ctx context.Context, grants, errs *atomic.Int64) {
	name := "failover-" + strconv.Itoa(w.rnd.IntN(w.locks))
	lease := w.leases[w.rnd.IntN(len(w.leases))]
	start := time.Now()
	l, err := w.c.Acquire(ctx, name, lock.Options{Wait: true, Lease: lease, MaxWait: failoverMaxWait, MaxDuration: time.Minute})
	at := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		errs.Add(1)
		report("error lock=%s start=%d at=%d err=%q", name, start.UnixNano(), at.UnixNano(), err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(50*time.Millisecond + rand.N(50*time.Millisecond)):
		}
		return
	}
	grants.Add(1)
	hold := 10*time.Millisecond + rand.N(50*time.Millisecond)
	if w.rnd.IntN(5) == 0 {
		hold = lease/2 + rand.N(lease)
	}
	report("grant lock=%s owner=%s token=%d lease=%d hold=%d start=%d got=%d",
		name, l.Owner(), l.Token(), lease.Nanoseconds(), hold.Nanoseconds(), start.UnixNano(), at.UnixNano())
	w.release(l, w.hold(ctx, l, hold))
}

// hold holds l for d: it writes to the resource with the lock's token now,
// every 100 ms, and at the end, while the lock is not known lost.
func (w *foWorker) hold(ctx context.Context, l *lock.Lock, d time.Duration) foWrites {
	deadline := time.Now().Add(d)
	var n foWrites
	for {
		select {
		case <-l.Done():
			return n
		default:
		}
		w.write(l, &n)
		left := time.Until(deadline)
		if left <= 0 {
			return n
		}
		select {
		case <-l.Done():
			return n
		case <-ctx.Done():
			return n
		case <-time.After(min(left, 100*time.Millisecond)):
		}
	}
}

func (w *foWorker) write(l *lock.Lock, n *foWrites) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := strings.TrimPrefix(l.Key(), lock.DefaultPrefix)
	res, err := foResource.Run(ctx, w.res, []string{key + ":fence-seen", key + ":fence-owner"},
		strconv.FormatUint(l.Token(), 10), l.Owner()).Int()
	n.writes++
	switch {
	case err != nil:
		n.errors++
	case res == 0:
		n.rejected++
	case res == 2:
		n.dup++
	}
}

// release ends the hold and reports how: released; lost (told before the
// release, by Done); lost-at-release (Release found the record gone or
// taken); release-error (Release failed otherwise).
func (w *foWorker) release(l *lock.Lock, n foWrites) {
	wasLost := false
	select {
	case <-l.Done():
		wasLost = true // Done closes only at a loss before Release
	default:
	}
	relStart := time.Now()
	err := l.Release(context.Background())
	rel := time.Since(relStart)
	lostAt := w.losses.take(l.Owner())
	how, end, told, cause := "released", relStart, time.Time{}, ""
	switch {
	case wasLost:
		how, told, cause = "lost", lostAt, lossCause(l.Err())
		if !told.IsZero() {
			end = told
		}
	case errors.Is(err, lock.ErrLost):
		how, cause = "lost-at-release", lossCause(err)
	case err != nil:
		how, cause = "release-error", err.Error()
	}
	report("end owner=%s at=%d told=%d how=%s cause=%q rel=%d writes=%d rejected=%d dup=%d write_errors=%d",
		l.Owner(), end.UnixNano(), unixNano(told), how, cause, rel.Nanoseconds(), n.writes, n.rejected, n.dup, n.errors)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// lossCause says how a loss was found.
func lossCause(err error) string {
	var lost *lock.LostError
	switch {
	case !errors.As(err, &lost):
		return errString(err)
	case lost.Cause == nil:
		return "record gone or taken"
	case strings.Contains(lost.Cause.Error(), "lease ran out"):
		return "lease ran out"
	}
	return lost.Cause.Error()
}
