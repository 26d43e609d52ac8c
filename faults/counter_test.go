package faults_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

const (
	counterProcesses  = 4
	counterGoroutines = 3
	counterIterations = 8
)

// TestMultiProcessCounter runs several processes, each with several
// goroutines, that take one lock in turn and, under it, do a read-modify-write
// of a counter in Redis that is deliberately not atomic (GET, sleep, SET).
// With mutual exclusion no update is lost, and the fencing tokens, appended
// to a list under the lock, strictly increase in grant order.
func TestMultiProcessCounter(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "counter"
	env := []string{
		"FAULTS_REDIS=" + srv.Addr,
		"FAULTS_LOCK=" + name,
		"FAULTS_GOROUTINES=" + strconv.Itoa(counterGoroutines),
		"FAULTS_ITERATIONS=" + strconv.Itoa(counterIterations),
	}
	children := make([]*faults.Child, counterProcesses)
	for i := range children {
		children[i] = startChild(t, "counter", env...)
	}
	// Start them together, once every one is connected, so that they contend.
	for _, c := range children {
		word, _ := faults.Fields(c.Next(ctx))
		require.Equal(t, "ready", word)
	}
	for _, c := range children {
		c.Send("go")
	}

	var sections, grants, errs, overlaps int64
	for i, c := range children {
		word, f := faults.Fields(c.Next(ctx))
		require.Equal(t, "counter", word)
		sections += atoi(t, f["sections"])
		grants += atoi(t, f["grants"])
		overlaps += atoi(t, f["overlaps"])
		n := atoi(t, f["errors"])
		errs += n
		expect(t, n == 0, "process %d: %d acquisitions failed, first: %s", i, n, f["first_error"])
		require.NoError(t, c.Wait(ctx), "child %d failed:\n%s", i, c.Out())
	}
	stats.grants.Add(grants)
	want := int64(counterProcesses * counterGoroutines * counterIterations)
	expect(t, sections == want, "%d critical sections ran, want %d (one per acquisition)", sections, want)
	expect(t, overlaps == 0, "%d critical sections found another one running", overlaps)

	counter, err := direct.Get(ctx, name+":counter").Int64()
	require.NoError(t, err)
	if lost := sections - counter; lost != 0 {
		stats.lostUpdates.Add(max(lost, -lost))
		expect(t, false, "counter is %d after %d increments under the lock: %d updates lost", counter, sections, lost)
	}

	tokens, err := direct.LRange(ctx, name+":tokens", 0, -1).Result()
	require.NoError(t, err)
	expect(t, int64(len(tokens)) == sections, "%d tokens recorded, want one per critical section (%d)", len(tokens), sections)
	seen := make(map[uint64]bool, len(tokens))
	var prev uint64
	var dups, unordered int
	var firstBad string
	for i, s := range tokens {
		tok := atou(t, s)
		switch {
		case seen[tok]:
			dups++
			firstBad = cmp.Or(firstBad, fmt.Sprintf("token %d granted twice (#%d)", tok, i))
		case i > 0 && tok <= prev:
			unordered++
			firstBad = cmp.Or(firstBad, fmt.Sprintf("token #%d %d after %d", i, tok, prev))
		}
		seen[tok] = true
		prev = tok
	}
	expect(t, dups == 0, "%d tokens granted twice; first bad: %s", dups, firstBad)
	expect(t, unordered == 0, "%d tokens not greater than the one granted before; first bad: %s", unordered, firstBad)
	t.Logf("%d processes x %d goroutines: %d grants, counter %d, %d tokens", counterProcesses, counterGoroutines, grants, counter, len(tokens))
}

// roleCounter is a child of TestMultiProcessCounter. It reports
// "counter grants=N sections=N overlaps=N errors=N first_error=...".
func roleCounter(t *testing.T) {
	rc, name := childRedis(t)
	goroutines := childInt(t, "FAULTS_GOROUTINES")
	iterations := childInt(t, "FAULTS_ITERATIONS")
	c := newClient(t, rc, lock.WithPollInterval(100*time.Millisecond))
	ctx := ctxTimeout(t, 50*time.Second)
	require.NoError(t, rc.Ping(ctx).Err())
	report("ready")
	if cmd := readLine(stdin()); cmd != "go" {
		t.Fatalf("child: got %q on stdin, want go", cmd)
	}

	var grants, sections, overlaps, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iterations {
				err := c.Do(ctx, name, lock.Options{Wait: true, Lease: 5 * time.Second, MaxDuration: 45 * time.Second},
					func(hctx context.Context) error {
						grants.Add(1)
						return criticalSection(hctx, ctx, rc, name, &sections, &overlaps)
					})
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	first, _ := firstErr.Load().(string)
	report("counter grants=%d sections=%d overlaps=%d errors=%d first_error=%q",
		grants.Load(), sections.Load(), overlaps.Load(), errs.Load(), first)
}

// criticalSection is the unprotected read-modify-write of the counter, which
// also appends the grant's token to the list. It runs its commands on ctx,
// not on the handler's hctx, so that a lost lock would show as a lost update
// instead of being hidden. "inside" detects overlapping sections: it is
// incremented on entry and must then be 1.
func criticalSection(hctx, ctx context.Context, rc *redis.Client, name string, sections, overlaps *atomic.Int64) error {
	l, ok := lock.FromContext(hctx)
	if !ok {
		return errors.New("no lock in the handler's context")
	}
	inside, err := rc.Incr(ctx, name+":inside").Result()
	if err != nil {
		return err
	}
	defer rc.Decr(context.WithoutCancel(ctx), name+":inside")
	if inside != 1 {
		overlaps.Add(1)
	}
	v, err := rc.Get(ctx, name+":counter").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	time.Sleep(time.Millisecond) // widen the window a lost update needs
	if err := rc.Set(ctx, name+":counter", v+1, 0).Err(); err != nil {
		return err
	}
	sections.Add(1)
	if err := rc.RPush(ctx, name+":tokens", l.Token()).Err(); err != nil {
		return err
	}
	return nil
}
