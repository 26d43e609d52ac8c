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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// gate is a go-redis hook that counts the scripts sent alone and in
// pipelines, and holds each lone script until the gate opens.
type gate struct {
	open    chan struct{}
	held    atomic.Int64 // lone scripts held (or let through)
	pipes   atomic.Int64 // pipelines sent
	inPipes atomic.Int64 // scripts sent in them by digest (EVALSHA; not those sent again in full)
	maxPipe atomic.Int64 // the most scripts in one pipeline
	// beforePipe, if set, runs before each pipeline is sent.
	beforePipe func()
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func isScript(cmd redis.Cmder) bool {
	return strings.HasPrefix(cmd.Name(), "eval")
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			g.held.Add(1)
			<-g.open
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n, scripts := int64(0), false
		for _, c := range cmds {
			if isScript(c) {
				scripts = true
			}
			if c.Name() == "evalsha" {
				n++
			}
		}
		if !scripts {
			return next(ctx, cmds) // not ours: a connection's set-up
		}
		g.pipes.Add(1)
		g.inPipes.Add(n)
		for m := g.maxPipe.Load(); n > m && !g.maxPipe.CompareAndSwap(m, n); m = g.maxPipe.Load() {
		}
		if g.beforePipe != nil {
			g.beforePipe()
		}
		return next(ctx, cmds)
	}
}

// gatedProviders returns a Redis provider over miniredis and one over the
// real Redis, each with a gate, and the raw client of each.
func gatedProviders(t *testing.T) map[string]func(t *testing.T) (*lock.RedisProvider, *gate, *redis.Client) {
	mr := miniredis.RunT(t)
	mk := func(addr string) func(t *testing.T) (*lock.RedisProvider, *gate, *redis.Client) {
		return func(t *testing.T) (*lock.RedisProvider, *gate, *redis.Client) {
			rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
			t.Cleanup(func() { _ = rc.Close() })
			g := newGate()
			rc.AddHook(g)
			return lock.NewRedisProvider(rc), g, rc
		}
	}
	realRedis(t) // fails in CI, skips elsewhere, without a Redis
	return map[string]func(t *testing.T) (*lock.RedisProvider, *gate, *redis.Client){
		"miniredis": mk(mr.Addr()),
		"redis":     mk(redisAddr(t)),
	}
}

// testKeys returns the function that names the test's n keys, deleted
// when the test ends.
func testKeys(t *testing.T, rc *redis.Client, n int) func(i int) string {
	base := uniqueName(t)
	key := func(i int) string { return "lock:{" + base + ":" + strconv.Itoa(i) + "}" }
	t.Cleanup(func() {
		for i := range n {
			_ = rc.Del(context.Background(), key(i)).Err()
		}
	})
	return key
}

// acquireAll calls p.Acquire for key(i) as owner(i), for i below n, each
// on a goroutine of its own; wait returns once all have returned, and the
// records and errors are theirs by i.
func acquireAll(ctx context.Context, p lock.Provider, n int, key, owner func(int) string) (recs []lock.Record, errs []error, wait func()) {
	recs, errs = make([]lock.Record, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs[i], errs[i] = p.Acquire(ctx, key(i), owner(i), time.Minute)
		}()
	}
	return recs, errs, wg.Wait
}

// inFlight is how many scripts the Redis provider sends at once before it
// queues the next ones for a pipeline (see RedisProvider).
func inFlight() int { return max(2, runtime.GOMAXPROCS(0)) }

func TestRedisBatchesConcurrentScripts(t *testing.T) {
	// While the server holds the first scripts, the next callers' scripts
	// queue, and go in one pipeline when a round trip ends; each caller gets
	// its own reply.
	for name, mk := range gatedProviders(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p, g, rc := mk(t)
			n := inFlight() + 16
			key := testKeys(t, rc, n)
			owner := func(i int) string { return "owner-" + strconv.Itoa(i) }
			recs, errs, wait := acquireAll(ctx, p, n, key, owner)
			require.Eventually(t, func() bool { return g.held.Load() == int64(inFlight()) }, 10*time.Second, time.Millisecond,
				"%d scripts go out at once", inFlight())
			// Every other caller queues (one that reached eval after the
			// gate opened would be sent alone); then none was sent alone.
			require.Eventually(t, func() bool { return lock.QueuedScripts(p) == 16 }, 10*time.Second, time.Millisecond,
				"the other callers queue")
			assert.Equal(t, int64(inFlight()), g.held.Load(), "no more than %d scripts go out alone while those are under way", inFlight())
			close(g.open)
			wait()

			for i := range n {
				require.NoError(t, errs[i])
				assert.Equal(t, owner(i), recs[i].Owner, "caller %d got its own reply", i)
				assert.NotZero(t, recs[i].Token)
				got, err := p.Inspect(ctx, key(i))
				require.NoError(t, err)
				assert.Equal(t, recs[i].Owner, got.Owner, "key %d holds its caller's record", i)
				assert.Equal(t, recs[i].Token, got.Token)
			}
			assert.Equal(t, int64(16), g.inPipes.Load(), "the queued scripts went in pipelines")
			assert.Greater(t, g.maxPipe.Load(), int64(1), "a pipeline carried several scripts")
		})
	}
}

func TestRedisBatchSkipsCallerThatGaveUp(t *testing.T) {
	// A script queued for a pipeline whose caller gives up returns at once,
	// and is not sent: no lock is taken that nobody holds.
	for name, mk := range gatedProviders(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p, g, rc := mk(t)
			key := testKeys(t, rc, inFlight()+1)
			_, errs, wait := acquireAll(ctx, p, inFlight(), key, func(int) string { return "held" })
			require.Eventually(t, func() bool { return g.held.Load() == int64(inFlight()) }, 10*time.Second, time.Millisecond)

			qctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() {
				_, err := p.Acquire(qctx, key(inFlight()), "gave-up", time.Minute)
				errc <- err
			}()
			require.Eventually(t, func() bool { return lock.QueuedScripts(p) == 1 }, 10*time.Second, time.Millisecond,
				"the call is queued")
			cancel()
			select {
			case err := <-errc:
				require.ErrorIs(t, err, context.Canceled, "the queued call returns when its context ends")
			case <-time.After(5 * time.Second):
				t.Fatal("a queued call whose context ended did not return")
			}
			close(g.open)
			wait()
			for i, err := range errs {
				require.NoError(t, err, "call %d", i)
			}
			got, err := p.Inspect(ctx, key(inFlight()))
			require.NoError(t, err)
			assert.Empty(t, got.Owner, "the abandoned script was never sent")
			assert.Zero(t, g.inPipes.Load(), "nothing was pipelined")
		})
	}
}

func TestRedisBatchAfterScriptFlush(t *testing.T) {
	// Scripts queued for a pipeline reach a server that forgot them (it
	// forgets them just before the pipeline): each is sent again in full.
	for name, mk := range gatedProviders(t) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p, g, rc := mk(t)
			var flushed atomic.Int64
			g.beforePipe = func() {
				flushed.Add(1)
				assert.NoError(t, rc.ScriptFlush(context.Background()).Err())
			}
			n := inFlight() + 4
			key := testKeys(t, rc, n)
			_, errs, wait := acquireAll(ctx, p, n, key, func(int) string { return "o" })
			require.Eventually(t, func() bool { return g.held.Load() == int64(inFlight()) }, 10*time.Second, time.Millisecond)
			require.Eventually(t, func() bool { return lock.QueuedScripts(p) == 4 }, 10*time.Second, time.Millisecond,
				"the others queue")
			close(g.open)
			wait()
			for i := range n {
				require.NoError(t, errs[i], "call %d", i)
				got, err := p.Inspect(ctx, key(i))
				require.NoError(t, err)
				assert.Equal(t, "o", got.Owner, "key %d was acquired", i)
			}
			assert.Equal(t, int64(4), g.inPipes.Load(), "the queued scripts went in a pipeline first")
			assert.Positive(t, flushed.Load(), "the server forgot the scripts before a pipeline")
		})
	}
}
