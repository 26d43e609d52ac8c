package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// Driver is what a Redis driver's tests give Scenarios: lock providers and
// fenced resources over clients of that driver. Each function makes a new
// client, with connections of its own (another process, as far as the
// server can tell), closed at the end of the test.
type Driver struct {
	// Provider returns a Redis provider over a client of the server at addr.
	Provider func(t testing.TB, addr string) lock.Provider
	// Sentinel returns a Redis provider over a client of the primary that
	// the sentinels at addrs name MasterName.
	Sentinel func(t testing.TB, addrs []string) lock.Provider
	// Fence returns a fenced resource on the server at addr, written
	// through the driver (locktest.Fence).
	Fence func(t testing.TB, addr string) locktest.Fence
}

// Scenarios runs the fault suite's core scenarios through d, each a
// subtest on servers of its own, each checking that what the library
// promises still holds and that nothing is left on the server under the
// lock's name once the last holder released (after a failover, at most a
// wait queue that expires within its minute):
//
//   - StoppedHolder: a holder in a child process stopped (SIGSTOP) for two
//     leases; another takes the lock with a greater token, the stopped
//     holder's fenced write is rejected and, once it runs again, it is told
//     (ErrLost).
//   - Restart: the server killed and started again empty while a lock is
//     held and a waiter waits; the holder is told, the waiter is not stuck,
//     tokens after the restart are greater.
//   - SentinelFailover: the master killed and a replica promoted while a
//     lock is held, with a lease shorter than the failover and with one
//     longer, and another client waits; what the holder sees is the
//     truth (it still holds the lock, renewable, or it was told, before the
//     other was granted), and the clients go on with the new master.
//   - KilledPubSub: the pub/sub connections killed (CLIENT KILL TYPE
//     pubsub) while two waiters that poll once a minute queue; their
//     subscriptions are replaced, and each release hands the lock to the
//     first waiter only, in their order.
//
// A driver's test calls it from a test of its own that does nothing else:
// StoppedHolder runs that test again in a child process (StartChild), where
// Scenarios plays the child's part.
func Scenarios(t *testing.T, d Driver) {
	t.Run("StoppedHolder", func(t *testing.T) { stoppedHolder(t, d) })
	t.Run("Restart", func(t *testing.T) { restart(t, d) })
	t.Run("SentinelFailover", func(t *testing.T) {
		for _, lease := range sentinelLeases {
			t.Run("lease-"+lease.String(), func(t *testing.T) { sentinelFailover(t, d, lease) })
		}
	})
	t.Run("KilledPubSub", func(t *testing.T) { killedPubSub(t, d) })
}

// roleEnv names the part a child process plays: the fault suite's TestMain
// (faults/main_test.go) runs a child, whatever its part, without its
// checks of the whole run.
const roleEnv = "FAULTS_ROLE"

// stoppedLease is the lease of StoppedHolder's holder; it is stopped for
// two of them.
const stoppedLease = 500 * time.Millisecond

// stoppedHolder is the StoppedHolder scenario (see Scenarios); in the child
// process, its holder.
func stoppedHolder(t *testing.T, d Driver) {
	if os.Getenv(roleEnv) == "scenario-holder" {
		stoppedHolderChild(t, d)
		return
	}
	srv := StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	name := testenv.Name(t)
	resource := name + "-resource"
	ch := StartChild(t, runPattern(t), reportPrefix, roleEnv+"=scenario-holder",
		"FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+name, "FAULTS_RESOURCE="+resource)
	word, f := Fields(ch.Next(ctx))
	require.Equal(t, "held", word, "the child's first report")
	childToken, err := strconv.ParseUint(f["token"], 10, 64)
	require.NoError(t, err)

	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	c := testenv.NewClient(t, d.Provider(t, srv.Addr), lock.WithPollInterval(50*time.Millisecond))
	l, err := c.Acquire(testenv.Context(t, 10*time.Second), name,
		lock.Options{Wait: true, Lease: 5 * time.Second, MaxDuration: 20 * time.Second})
	require.NoError(t, err, "acquire while the holder is stopped")
	t.Logf("taken over %v after the holder was stopped", time.Since(stopped).Round(time.Millisecond))
	assert.Greater(t, l.Token(), childToken, "the new holder's token, against the stopped holder's")
	fence := d.Fence(t, srv.Addr)
	require.NoError(t, fence.Write(ctx, resource, l.Token(), "new-holder"), "the new holder's fenced write")

	time.Sleep(time.Until(stopped.Add(2 * stoppedLease)))
	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGCONT))
	ch.Send("go")
	word, f = Fields(ch.Next(ctx))
	require.Equal(t, "result", word)
	assert.Equal(t, "rejected", f["write"], "the stopped holder's fenced write with its old token %d", childToken)
	assert.Equal(t, "true", f["lost"], "the stopped holder's handler context ended with ErrLost: cause %s", f["cause"])
	word, f = Fields(ch.Next(ctx))
	require.Equal(t, "done", word)
	assert.Equal(t, "true", f["lost"], "the stopped holder's Do returned an error matching ErrLost: %s", f["err"])
	require.NoError(t, ch.Wait(ctx), "the child's output:\n%s", ch.Out())

	v, err := fence.Read(ctx, resource)
	require.NoError(t, err)
	assert.Equal(t, "new-holder", v, "the fenced resource holds the new holder's write")
	assert.NoError(t, l.Err(), "the new holder still holds the lock")
	require.NoError(t, l.Release(ctx))
	nothingLeft(t, srv, name, 0)
}

// stoppedHolderChild is StoppedHolder's holder, in the child process: it
// takes the lock with Do and reports "held token=T"; once it reads "go"
// (sent after it was stopped and continued) it makes a fenced write with
// its token, as a holder that does not know it was stopped would, waits
// for its handler's context to end, and reports
// "result write=accepted|rejected|ERROR lost=BOOL cause=..." and then
// "done lost=BOOL err=...".
func stoppedHolderChild(t *testing.T, d Driver) {
	addr, name, resource := os.Getenv("FAULTS_REDIS"), os.Getenv("FAULTS_LOCK"), os.Getenv("FAULTS_RESOURCE")
	c := testenv.NewClient(t, d.Provider(t, addr))
	fence := d.Fence(t, addr)
	ctx := testenv.Context(t, 30*time.Second)
	err := c.Do(ctx, name, lock.Options{Lease: stoppedLease, MaxDuration: time.Minute}, func(hctx context.Context) error {
		l, _ := lock.FromContext(hctx)
		report("held token=%d", l.Token())
		if cmd, _ := bufio.NewReader(os.Stdin).ReadString('\n'); strings.TrimSpace(cmd) != "go" {
			return fmt.Errorf("child: want go on stdin, got %q", cmd)
		}
		write := "accepted"
		if err := fence.Write(ctx, resource, l.Token(), "stopped-holder"); errors.Is(err, lock.ErrStaleToken) {
			write = "rejected"
		} else if err != nil {
			write = strconv.Quote(err.Error())
		}
		select {
		case <-hctx.Done():
		case <-time.After(5 * time.Second):
		}
		cause := context.Cause(hctx)
		report("result write=%s lost=%t cause=%q", write, errors.Is(cause, lock.ErrLost), fmt.Sprint(cause))
		return nil
	})
	report("done lost=%t err=%q", errors.Is(err, lock.ErrLost), fmt.Sprint(err))
}

// reportPrefix begins the report lines of Scenarios' child processes.
const reportPrefix = "SCENARIO"

// report writes one report line to the parent process.
func report(format string, args ...any) {
	fmt.Printf(reportPrefix+" "+format+"\n", args...)
}

// runPattern is the -test.run pattern of t alone.
func runPattern(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// restart is the Restart scenario (see Scenarios).
func restart(t *testing.T, d Driver) {
	srv := StartRedis(t)
	const lease = 600 * time.Millisecond
	name := testenv.Name(t)
	opts := []lock.ClientOption{lock.WithPollInterval(100 * time.Millisecond), lock.WithReleaseTimeout(time.Second)}
	holder := testenv.NewClient(t, d.Provider(t, srv.Addr), opts...)
	waiter := testenv.NewClient(t, d.Provider(t, srv.Addr), opts...)
	ctx := testenv.Context(t, 30*time.Second)

	held := make(chan *lock.Lock, 1)
	cause := make(chan error, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- holder.Do(ctx, name, lock.Options{Lease: lease, MaxDuration: 20 * time.Second}, func(hctx context.Context) error {
			l, _ := lock.FromContext(hctx)
			held <- l
			<-hctx.Done() // told, or the test's end
			cause <- context.Cause(hctx)
			return nil
		})
	}()
	var h *lock.Lock
	select {
	case h = <-held:
	case err := <-doErr:
		t.Fatalf("Do: %v", err)
	}

	const waitFor = 6 * time.Second
	wctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	began := time.Now()
	waited := testenv.AcquireLater(wctx, waiter, name, lock.Options{Wait: true, Lease: lease, MaxDuration: 20 * time.Second})
	queued(t, srv, name, 1)

	require.NoError(t, srv.Kill())
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, srv.Start(), "restart the server")
	restarted := time.Now()

	select {
	case <-h.Done():
		t.Logf("holder told %v after the restart", time.Since(restarted).Round(time.Millisecond))
		assert.ErrorIs(t, h.Err(), lock.ErrLost, "the holder's Err after the restart")
	case <-time.After(3*lease + 2*time.Second):
		t.Fatalf("the holder not told %v after the server restarted empty", 3*lease+2*time.Second)
	}
	assert.ErrorIs(t, receive(t, cause, "the end of the holder's handler context"), lock.ErrLost, "the cause of the end of the holder's handler context")
	assert.ErrorIs(t, receive(t, doErr, "Do's return"), lock.ErrLost, "Do's error")

	// The waiter got the lock on the new server, or failed, within its
	// deadline.
	var tokens []uint64
	select {
	case w := <-waited:
		t.Logf("waiter: lock %v, err %v, after %v", w.Lock != nil, w.Err, w.At.Sub(began).Round(time.Millisecond))
		if w.Err == nil {
			assert.NoError(t, w.Lock.Err(), "the waiter's lock, granted after the restart")
			tokens = append(tokens, w.Lock.Token())
			releaseAfterRestart(t, ctx, w.Lock)
		}
	case <-time.After(waitFor + 2*time.Second):
		t.Fatalf("the waiter still waits %v after it began (its deadline %v)", waitFor+2*time.Second, waitFor)
	}
	var l *lock.Lock
	for try := 1; l == nil; try++ {
		var err error
		l, err = waiter.Acquire(testenv.Context(t, 5*time.Second), name,
			lock.Options{Wait: true, Lease: lease, MaxDuration: 10 * time.Second})
		if err != nil {
			require.ErrorIs(t, err, lock.ErrUnavailable, "acquire after the restart")
			require.Less(t, try, 5, "acquire after the restart, try %d: %v", try, err)
			t.Logf("acquire after the restart, try %d: %v", try, err)
		}
	}
	tokens = append(tokens, l.Token())
	for _, tok := range tokens {
		assert.Greater(t, tok, h.Token(), "a token granted after the restart, against the one before")
	}
	releaseAfterRestart(t, ctx, l)
	nothingLeft(t, srv, name, lease+time.Second)
}

// releaseAfterRestart releases l, a lock of a Client whose connections
// were made before the server restarted. rueidis and valkey-go find a dead
// connection only when a command is sent on it, and report that command's
// error (EOF) rather than send a write again: a call on such a connection
// fails with ErrUnavailable, an Acquire is called again, and a release's
// record expires within its lease (as Release says).
func releaseAfterRestart(t *testing.T, ctx context.Context, l *lock.Lock) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		require.ErrorIs(t, err, lock.ErrUnavailable, "release after the restart")
		t.Logf("release after the restart: %v", err)
	}
}

// sentinelLeases are the leases of SentinelFailover's holder, one a run:
// shorter than a failover takes (about 2 s from the kill to the
// promotion), so that the holder is told before the promotion, and longer,
// so that its renewals may reach the new master in time.
var sentinelLeases = []time.Duration{1500 * time.Millisecond, 3 * time.Second}

// sentinelFailover is the SentinelFailover scenario (see Scenarios), with
// the holder's lease lease.
func sentinelFailover(t *testing.T, d Driver, lease time.Duration) {
	s := StartSentinel(t, SentinelOptions{Replicas: 1, Sentinels: 1})
	master := s.Nodes[0].Addr
	ctx := testenv.Context(t, 50*time.Second)
	name := testenv.Name(t)
	lostAt := make(chan time.Time, 1)
	holder := testenv.NewClient(t, d.Sentinel(t, s.Addrs), lock.WithReleaseTimeout(time.Second),
		lock.WithEvents(func(e lock.Event) {
			if e.Kind == lock.EventLost {
				select {
				case lostAt <- e.Time:
				default:
				}
			}
		}))
	other := testenv.NewClient(t, d.Sentinel(t, s.Addrs), lock.WithPollInterval(200*time.Millisecond))
	stalls := testenv.WatchStalls(t)
	l, err := holder.Acquire(ctx, name, lock.Options{Lease: lease, MaxDuration: time.Minute})
	require.NoError(t, err)

	// The other client waits through the failover, calling Acquire again
	// when a call fails while no master answers.
	granted := make(chan testenv.Acquired, 1)
	go func() {
		for {
			o, err := other.Acquire(ctx, name, lock.Options{Wait: true, Lease: lease, MaxDuration: time.Minute})
			if err == nil || ctx.Err() != nil {
				granted <- testenv.Acquired{Lock: o, Err: err, At: time.Now()}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	queued(t, s.Node(master), name, 1)
	require.NoError(t, s.WaitStable(ctx, master), "the replica has the record and the queue")

	require.NoError(t, s.Node(master).Kill())
	killed := time.Now()
	newMaster, promoted, err := s.WaitPromotion(ctx, master)
	require.NoError(t, err, s.Logs())
	require.NoError(t, s.WaitAgree(ctx, newMaster), s.Logs())
	t.Logf("%s promoted %v after the kill", newMaster, promoted.Sub(killed).Round(time.Millisecond))

	// A lease after the promotion, the holder's renewals have reached the
	// new master, or it was told.
	time.Sleep(time.Until(promoted.Add(lease)))
	var ended time.Time // the holder was told, or released
	if err := l.Extend(ctx, lease); err == nil {
		t.Logf("the holder kept the lock through the failover")
		rec, err := s.Node(newMaster).Do(ctx, "GET", lockKey(name))
		require.NoError(t, err, "the record on the new master")
		owner, _, _ := strings.Cut(fmt.Sprint(rec), ",")
		assert.Equal(t, l.Owner(), owner, "the owner in the record on the new master, against the holder's")
		ended = time.Now()
		require.NoError(t, l.Release(ctx), "release on the new master")
	} else {
		require.ErrorIs(t, err, lock.ErrLost, "Extend after the failover")
		ended = receive(t, lostAt, "the holder's EventLost")
		t.Logf("the holder was told %v after the kill", ended.Sub(killed).Round(time.Millisecond))
	}

	var o *lock.Lock
	select {
	case w := <-granted:
		require.NoError(t, w.Err, "the other client's acquisition")
		o = w.Lock
		t.Logf("the other client was granted the lock %v after the holder was told or released", w.At.Sub(ended).Round(time.Millisecond))
		allowance := lease/10 + stalls.Longest()
		assert.False(t, ended.After(w.At.Add(allowance)),
			"the holder was told or released %v after the other client was granted the lock (allowed: %v)", ended.Sub(w.At), allowance)
	case <-time.After(15 * time.Second):
		t.Fatal("the other client not granted the lock 15 s after the holder was told or released")
	}
	assert.Greater(t, o.Token(), l.Token(), "the other client's token, against the holder's")
	require.NoError(t, o.Release(ctx))

	// The holder's client goes on with the new master.
	again, err := holder.Acquire(testenv.Context(t, 10*time.Second), name, lock.Options{Wait: true, Lease: lease})
	require.NoError(t, err, "acquire again after the failover")
	assert.Greater(t, again.Token(), o.Token(), "a token after the failover, against the one before")
	require.NoError(t, again.Release(ctx))
	// The other client's queue entry from before the kill, replicated, is
	// left when its Leave failed while no master answered (as it does on
	// rueidis and valkey-go, whose calls fail then where go-redis's are
	// sent again): the queue lasts a minute after its last look.
	nothingLasting(t, s.Node(newMaster), name, queueLife)
}

// queueLife is how long the Redis provider keeps a wait queue after its
// last waiter looked.
const queueLife = time.Minute

// nothingLasting checks that srv holds no record of the lock called name,
// and that every other key of it (its queue) expires within life.
func nothingLasting(t *testing.T, srv *Redis, name string, life time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, 5*time.Second)
	keys, err := srv.Do(ctx, "KEYS", "*{"+name+"}*")
	require.NoError(t, err)
	for _, k := range keys.([]any) {
		assert.NotEqual(t, lockKey(name), k, "the record of %s left after the last release", name)
		ttl, err := srv.Do(ctx, "PTTL", k)
		require.NoError(t, err)
		assert.True(t, ttl.(int64) > 0 && ttl.(int64) <= life.Milliseconds(), "key %s left with a TTL of %d ms, want one within %v", k, ttl, life)
		t.Logf("left: %s, expiring in %d ms", k, ttl)
	}
}

// killedPubSub is the KilledPubSub scenario (see Scenarios).
func killedPubSub(t *testing.T, d Driver) {
	srv := StartRedis(t)
	ctx := testenv.Context(t, 40*time.Second)
	name := testenv.Name(t)
	// Leases and polls of a minute: a waiter looks again when the lease it
	// saw runs out, or its poll comes, so only a message can wake it within
	// the test.
	o := lock.Options{Lease: time.Minute}
	holder := testenv.NewClient(t, d.Provider(t, srv.Addr))
	l, err := holder.Acquire(ctx, name, o)
	require.NoError(t, err)
	// Two waiters queue in turn; each one's end, with its number, comes
	// on granted.
	const waiters = 2
	type turn struct {
		i int
		testenv.Acquired
	}
	granted := make(chan turn, waiters)
	for i := range waiters {
		w := testenv.NewClient(t, d.Provider(t, srv.Addr), lock.WithPollInterval(time.Minute))
		o := o
		o.Wait = true
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		done := testenv.AcquireLater(wctx, w, name, o)
		go func() { granted <- turn{i, <-done} }()
		queued(t, srv, name, i+1)
	}
	before := inboxes(t, ctx, srv)
	require.NotEmpty(t, before, "the waiters' inboxes are subscribed")

	killed, err := srv.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Positive(t, killed, "pub/sub connections killed")
	require.Eventually(t, func() bool {
		now := inboxes(t, ctx, srv)
		return !slices.ContainsFunc(before, func(ch string) bool { return !slices.Contains(now, ch) })
	}, 10*time.Second, 20*time.Millisecond, "the waiters' inboxes subscribed again after their connections were killed")

	// Each release hands the lock to the first waiter still queued, and
	// to it alone.
	prev := l
	for i := range waiters {
		require.NoError(t, prev.Release(ctx))
		released := time.Now()
		select {
		case got := <-granted:
			require.NoError(t, got.Err, "waiter %d", got.i)
			require.Equal(t, i, got.i, "the waiter the release went to (waiter %d queued first)", i)
			t.Logf("waiter %d granted %v after the release (its poll: a minute)", i, time.Since(released).Round(100*time.Microsecond))
			assert.Greater(t, got.Lock.Token(), prev.Token(), "waiter %d's token, against the previous holder's", i)
			prev = got.Lock
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d not granted the lock 10 s after the release", i)
		}
	}
	select {
	case got := <-granted:
		t.Fatalf("waiter %d ended (err %v) before the last release", got.i, got.Err)
	default:
	}
	require.NoError(t, prev.Release(ctx))
	nothingLeft(t, srv, name, 0)
}

// receive returns what ch receives, failing the test when nothing comes
// within 5 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5 s", what)
	}
	var zero T
	return zero
}

// inboxes returns the channels of lock inboxes that srv has subscribers of.
func inboxes(t *testing.T, ctx context.Context, srv *Redis) []string {
	reply, err := srv.Do(ctx, "PUBSUB", "CHANNELS", lock.DefaultPrefix+"inbox:*")
	require.NoError(t, err)
	var chans []string
	for _, c := range reply.([]any) {
		chans = append(chans, fmt.Sprint(c))
	}
	return chans
}

// lockKey is the record of the lock called name, under the default prefix.
func lockKey(name string) string { return lock.DefaultPrefix + "{" + name + "}" }

// queued waits, up to 10 s, until n waiters queue for the lock called name
// on srv.
func queued(t *testing.T, srv *Redis, name string, n int) {
	t.Helper()
	ctx := testenv.Context(t, 10*time.Second)
	require.Eventually(t, func() bool {
		got, err := srv.Do(ctx, "LLEN", lockKey(name)+":q")
		return err == nil && got == int64(n)
	}, 10*time.Second, 10*time.Millisecond, "%d waiters queue for %s", n, name)
}

// nothingLeft checks that srv holds no key of the lock called name (its
// record, its queue: every key with "{name}" in it), within d (0: now).
func nothingLeft(t *testing.T, srv *Redis, name string, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d+5*time.Second)
	var keys any
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		var err error
		keys, err = srv.Do(ctx, "KEYS", "*{"+name+"}*")
		require.NoError(t, err)
		if len(keys.([]any)) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("keys of %s left on the server after the last release: %v", name, keys)
}
