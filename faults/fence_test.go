package faults_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
)

// The fenced writes of lock.RedisFence across processes and on a Cluster.

func init() {
	roles["fence-holder"] = roleFenceHolder
	roles["fence-writer"] = roleFenceWriter
}

// fenceWrite sets KEYS[1] to ARGV[1] and appends ARGV[1] to the list
// KEYS[2], the order in which the writes that passed the fence ran.
var fenceWrite = lock.NewRedisFence(`
	redis.call('SET', KEYS[1], ARGV[1])
	redis.call('RPUSH', KEYS[2], ARGV[1])
`)

// fenceKeysOf returns the fence, data and log keys of the resource called
// name: one hash tag.
func fenceKeysOf(name string) (fence, data, log string) {
	tag := "res:{" + name + "}"
	return tag + ":fence", tag, tag + ":log"
}

// TestFencedWriteOfStoppedHolder stops (SIGSTOP) a process that holds a
// lock for longer than its lease; another takes the lock and makes a
// fenced write with lock.RedisFence. When the stopped process continues
// and writes with its token, as a holder that does not know it was paused
// would, the write is refused with a StaleTokenError whose mark is the new
// holder's token, and the resource keeps the new holder's data.
func TestFencedWriteOfStoppedHolder(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "fence-stopped"
	fence, data, log := fenceKeysOf(name)
	ch, childToken := startHolder(t, ctx, "fence-holder", srv.Addr, name)
	stopped := stopHolder(t, ch)

	c := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(50*time.Millisecond))
	l := waitTakeOver(t, c, name, "while the holder is stopped")
	require.NoError(t, fenceWrite.Run(ctx, direct, fence, l.Token(), []string{data, log}, "new-holder").Err(),
		"the new holder's write (token %d)", l.Token())

	continueHolder(t, ch, stopped)

	word, f := faults.Fields(ch.Next(ctx))
	require.Equal(t, "result", word)
	expect(t, f["stale"] == "true", "the stopped holder's write with token %d: %s, want ErrStaleToken", childToken, f["err"])
	expect(t, f["mark"] == strconv.FormatUint(l.Token(), 10), "the mark in the stopped holder's error: %s, want the new holder's token %d", f["mark"], l.Token())
	require.NoError(t, ch.Wait(ctx), "child failed:\n%s", ch.Out())

	expect(t, direct.Get(ctx, data).Val() == "new-holder", "the resource holds %q, want the new holder's write", direct.Get(ctx, data).Val())
	expect(t, direct.LLen(ctx, log).Val() == 1, "%d writes ran, want the new holder's only", direct.LLen(ctx, log).Val())
	require.NoError(t, l.Release(ctx))
}

// roleFenceHolder is the child of TestFencedWriteOfStoppedHolder: it takes
// the lock with Do and reports "held token=T", waits for "go" on stdin (sent
// after it was stopped and continued), makes its fenced write, and reports
// "result stale=BOOL mark=M err=...".
func roleFenceHolder(t *testing.T) {
	rc, name := childRedis(t)
	lease := childDuration(t, "FAULTS_LEASE")
	c := newClient(t, rc)
	ctx := ctxTimeout(t, 30*time.Second)
	fence, data, log := fenceKeysOf(name)

	_ = c.Do(ctx, name, lock.Options{Lease: lease, MaxDuration: time.Minute}, func(hctx context.Context) error {
		l, _ := lock.FromContext(hctx)
		report("held token=%d", l.Token())
		if cmd := readLine(stdin()); cmd != "go" {
			return errors.New("child: want go on stdin, got " + strconv.Quote(cmd))
		}
		// ctx, not hctx: write as a holder that does not look at the lock's
		// context would.
		err := fenceWrite.Run(ctx, rc, fence, l.Token(), []string{data, log}, "stopped-holder").Err()
		var stale *lock.StaleTokenError
		mark := uint64(0)
		if errors.As(err, &stale) {
			mark = stale.Mark
		}
		report("result stale=%t mark=%d err=%q", errors.Is(err, lock.ErrStaleToken), mark, errString(err))
		return err
	})
}

// TestFencedWritesAcrossProcesses has three processes take one lock in
// turn, each writing with its token while it holds the lock and again,
// with the same token, a moment after its release, as a late holder
// would, so that writes with old and new tokens from several processes
// interleave. Every write made under a live lock passes; the writes that
// ran, in the order they ran, have non-decreasing tokens (a late write
// never overwrote a later holder's); the data is the last one's.
func TestFencedWritesAcrossProcesses(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 60*time.Second)
	const name, processes, rounds = "fence-procs", 3, 40
	_, data, log := fenceKeysOf(name)

	children := make([]*faults.Child, processes)
	for i := range children {
		children[i] = startChild(t, "fence-writer",
			"FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+name, "FAULTS_ROUNDS="+strconv.Itoa(rounds))
	}
	for _, ch := range children {
		word, _ := faults.Fields(ch.Next(ctx))
		require.Equal(t, "ready", word)
	}
	for _, ch := range children {
		ch.Send("go")
	}
	late, lateRefused := int64(0), int64(0)
	for i, ch := range children {
		word, f := faults.Fields(ch.Next(ctx))
		require.Equal(t, "writer", word)
		expect(t, f["refused_held"] == "0", "process %d: %s writes under a live lock refused (first: %s)", i, f["refused_held"], f["first_error"])
		expect(t, f["errors"] == "0", "process %d: %s errors (first: %s)", i, f["errors"], f["first_error"])
		late += atoi(t, f["late"])
		lateRefused += atoi(t, f["late_refused"])
		stats.grants.Add(int64(rounds))
		require.NoError(t, ch.Wait(ctx), "child %d failed:\n%s", i, ch.Out())
	}

	ran := direct.LRange(ctx, log, 0, -1).Val()
	require.NotEmpty(t, ran)
	prev := uint64(0)
	for i, s := range ran {
		tok, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		if !expect(t, tok >= prev, "write %d of %d ran with token %d after token %d had written", i, len(ran), tok, prev) {
			stats.lostUpdates.Add(1)
			break
		}
		prev = tok
	}
	expect(t, direct.Get(ctx, data).Val() == ran[len(ran)-1], "the data %q is not the last write's %q", direct.Get(ctx, data).Val(), ran[len(ran)-1])
	t.Logf("%d processes x %d rounds: %d writes ran; of %d late writes, %d refused", processes, rounds, len(ran), late, lateRefused)
}

// roleFenceWriter is a child of TestFencedWritesAcrossProcesses. It reports
// "ready", waits for "go", and then, rounds times, takes the lock (waiting),
// makes a fenced write, releases it, and writes again with the same token
// after 0-3 ms. It reports "writer refused_held=N late=N late_refused=N
// errors=N first_error=...".
func roleFenceWriter(t *testing.T) {
	rc, name := childRedis(t)
	rounds := childInt(t, "FAULTS_ROUNDS")
	c := newClient(t, rc, lock.WithPollInterval(50*time.Millisecond))
	ctx := ctxTimeout(t, 50*time.Second)
	fence, data, log := fenceKeysOf(name)
	report("ready")
	if cmd := readLine(stdin()); cmd != "go" {
		t.Fatalf("child: got %q on stdin, want go", cmd)
	}

	var refusedHeld, late, lateRefused, errs int
	firstErr := ""
	fail := func(err error) {
		errs++
		if firstErr == "" {
			firstErr = err.Error()
		}
	}
	write := func(token uint64) error {
		return fenceWrite.Run(ctx, rc, fence, token, []string{data, log}, strconv.FormatUint(token, 10)).Err()
	}
	for range rounds {
		l, err := c.Acquire(ctx, name, lock.Options{Wait: true, Lease: 5 * time.Second})
		if err != nil {
			fail(err)
			continue
		}
		if err := write(l.Token()); errors.Is(err, lock.ErrStaleToken) {
			refusedHeld++
			if firstErr == "" {
				firstErr = err.Error()
			}
		} else if err != nil {
			fail(err)
		}
		if err := l.Release(ctx); err != nil {
			fail(err)
		}
		// The late write: after the release, while the other processes
		// take the lock.
		late++
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if err := write(l.Token()); errors.Is(err, lock.ErrStaleToken) {
			lateRefused++
		} else if err != nil {
			fail(err)
		}
	}
	report("writer refused_held=%d late=%d late_refused=%d errors=%d first_error=%q",
		refusedHeld, late, lateRefused, errs, firstErr)
}

// TestFenceCluster runs lock.RedisFence on a real three-master Cluster:
// resources on every master, a stale token refused on each, and a key in
// another slot than its fence refused by the library before Redis would
// refuse it with CROSSSLOT.
func TestFenceCluster(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, 25*time.Second)
	rc := newClusterRedis(t, addrs)
	a := newClusterLockClient(t, addrs)
	b := newClusterLockClient(t, addrs)

	// One resource per master.
	byNode := map[string]string{}
	for i := 0; len(byNode) < clusterNodes && i < 1000; i++ {
		name := "fence-cluster-" + strconv.Itoa(i)
		fence, _, _ := fenceKeysOf(name)
		node, err := rc.MasterForKey(ctx, fence)
		require.NoError(t, err)
		if _, ok := byNode[node.Options().Addr]; !ok {
			byNode[node.Options().Addr] = name
		}
	}
	require.Len(t, byNode, clusterNodes, "a resource on every master")
	for node, name := range byNode {
		fence, data, log := fenceKeysOf(name)
		la, lb := testenv.Superseded(t, ctx, a, b, name)
		require.NoError(t, fenceWrite.Run(ctx, rc, fence, lb.Token(), []string{data, log}, "B").Err(), "node %s", node)
		err := fenceWrite.Run(ctx, rc, fence, la.Token(), []string{data, log}, "A").Err()
		assert.ErrorIs(t, err, lock.ErrStaleToken, "node %s: the stale holder's write", node)
		assert.Equal(t, "B", rc.Get(ctx, data).Val(), "node %s", node)
		require.NoError(t, fenceWrite.Run(ctx, rc, fence, lb.Token(), []string{data, log}, "B2").Err(), "node %s: the mark's own token", node)
		require.NoError(t, lb.Release(ctx))
		_ = la.Release(ctx)
	}

	// Keys in two slots: refused before anything is sent. Redis itself
	// refuses such a script (without the library's check, the error would
	// be the server's, and only on a Cluster).
	fence, _, _ := fenceKeysOf("fence-cluster-0")
	_, other, log := fenceKeysOf("fence-cluster-1")
	err := fenceWrite.Run(ctx, rc, fence, 7, []string{other, log}, "x").Err()
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "keys in another slot than the fence")
	raw := redis.NewScript(`return 1`).Run(ctx, rc, []string{fence, other}).Err()
	assert.ErrorContains(t, raw, "CROSSSLOT", "what Redis Cluster says of a script over two slots")
}
