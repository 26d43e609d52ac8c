package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
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
)

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
