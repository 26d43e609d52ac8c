package gocronlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	gocronlock "github.com/seed05627090/lock/gocron"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(servers.Main(m)) // stops the Redis the tests started
}

func TestLockerInvalid(t *testing.T) {
	ctx := context.Background()
	_, err := (&gocronlock.Locker{Every: time.Minute}).Lock(ctx, "report")
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a Locker without a Client")
	c := newClient(t, lock.NewMemoryProvider())
	_, err = (&gocronlock.Locker{Client: c}).Lock(ctx, "report")
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a Locker without Every")
}

// TestLockerRun checks one run: keyed by the nearest multiple of Every,
// refused to another replica while held and after, handed to the job by its
// context.
func TestLockerRun(t *testing.T) {
	mem := lock.NewMemoryProvider()
	a, b := newClient(t, mem), newClient(t, mem)
	tick := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// a's scheduler fires 40ms after the tick, b's is 20s late by its clock.
	la := &gocronlock.Locker{Client: a, Every: time.Minute, Clock: testenv.NewClock(tick.Add(40 * time.Millisecond))}
	lb := &gocronlock.Locker{Client: b, Every: time.Minute, Clock: testenv.NewClock(tick.Add(20 * time.Second))}
	jobCtx, cancel := context.WithCancel(context.Background()) // gocron's job context
	defer cancel()

	_, ok := la.Held(jobCtx)
	assert.False(t, ok, "nothing is held before the run")
	run, err := la.Lock(jobCtx, "report")
	require.NoError(t, err)
	held, ok := la.Held(jobCtx)
	require.True(t, ok, "the job finds its lock by its context")
	assert.Equal(t, a.Key(lock.TickName("report", tick)), held.Key(), "the run is keyed by the nearest tick")
	assert.NotZero(t, held.Token())

	_, err = lb.Lock(context.Background(), "report")
	assert.ErrorIs(t, err, lock.ErrHeld, "another replica skips a run being run")
	require.NoError(t, run.Unlock(jobCtx))
	_, ok = la.Held(jobCtx)
	assert.False(t, ok, "nothing is held after the run")
	_, err = lb.Lock(context.Background(), "report")
	assert.ErrorIs(t, err, lock.ErrGracePeriod, "a late replica skips a run that is done")
	assert.ErrorIs(t, err, lock.ErrNotAcquired)

	// The next tick is another run: an early replica takes it.
	early := &gocronlock.Locker{Client: b, Every: time.Minute, Clock: testenv.NewClock(tick.Add(time.Minute - 20*time.Second))}
	next, err := early.Lock(context.Background(), "report")
	require.NoError(t, err, "the next run is not closed by this one")
	require.NoError(t, next.Unlock(context.Background()))
}

// TestLockerHeldAmbiguous: two runs of one job at once in one process (no
// singleton mode) cannot be told apart by their context.
func TestLockerHeldAmbiguous(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	tick := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := testenv.NewClock(tick)
	lk := &gocronlock.Locker{Client: c, Every: time.Minute, Clock: clock}
	ctx := context.Background()
	first, err := lk.Lock(ctx, "report")
	require.NoError(t, err)
	clock.Set(tick.Add(time.Minute))
	second, err := lk.Lock(ctx, "report")
	require.NoError(t, err)
	_, ok := lk.Held(ctx)
	assert.False(t, ok, "two runs on one context: Held cannot say which")
	require.NoError(t, first.Unlock(ctx))
	l, ok := lk.Held(ctx)
	require.True(t, ok, "one run left")
	assert.Equal(t, c.Key(lock.TickName("report", tick.Add(time.Minute))), l.Key())
	require.NoError(t, second.Unlock(ctx))
}

// TestLockerReplicas is the test with gocron: three schedulers as
// replicas, each with its own lock Client and its own clock, skewed by up to
// a quarter of the job's interval, jobs of 1% to 90% of the interval. Each run
// must happen exactly once.
//
// A replica keys a run by its clock rounded to the interval, so its scheduler
// may fire at most half an interval late; timers ran 20-250 ms late on two busy
// vCPUs under -race, hence intervals of 500 ms (250 ms of slack; 200 ms and
// 250 ms left 100 ms and 125 ms). The skews and durations are fractions of the
// interval, so replicas still ask for the same tick while another runs it or
// just after it ran: a run taken twice or not at all still fails.
func TestLockerReplicas(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		testReplicas(t, 500*time.Millisecond, 10, func(t *testing.T) *lock.Client {
			return newClient(t, mem)
		})
	})
	t.Run("redis", func(t *testing.T) {
		rc := realRedis(t)
		run := strings.ReplaceAll(t.Name(), "/", ":") + ":" + uuid.NewString()[:8]
		servers.DeleteAtEnd(t, rc, "*"+run+"*")
		testReplicas(t, 500*time.Millisecond, 20, func(t *testing.T) *lock.Client {
			replica := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = replica.Close() })
			return newClient(t, lock.NewRedisProvider(replica), lock.WithPrefix("lock-test:"+run+":"))
		})
	})
}

// testReplicas runs three gocron schedulers with a DurationJob of interval
// every for the given number of runs, and checks that each run happened once.
func testReplicas(t *testing.T, every time.Duration, runs int, newReplicaClient func(t *testing.T) *lock.Client) {
	skews := []time.Duration{every / 4, -every / 4, -every / 10} // early, late, a little late
	base := time.Now().Truncate(every).Add(3 * every)            // the first run
	last := base.Add(time.Duration(runs-1) * every)
	names := make(map[string]int, runs) // run's lock name -> its index
	for k := range runs {
		names[lock.TickName("report", base.Add(time.Duration(k)*every))] = k
	}
	// duration is how long run k lasts: 1% to 90% of the interval.
	duration := func(k int) time.Duration {
		step := (k * 7) % runs
		return every * time.Duration(1+89*step/(runs-1)) / 100
	}

	var mu sync.Mutex
	ran := make([][]int, runs) // replicas that ran each run
	var skipped, failures []string
	var schedulers []gocron.Scheduler
	for i, skew := range skews {
		c := newReplicaClient(t)
		clock := skewedClock{Clock: clockwork.NewRealClock(), skew: skew}
		locker := &gocronlock.Locker{Client: c, Every: every, Clock: clock}
		s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(locker))
		require.NoError(t, err)
		schedulers = append(schedulers, s)
		_, err = s.NewJob(gocron.DurationJob(every),
			gocron.NewTask(func(ctx context.Context) {
				l, ok := locker.Held(ctx)
				if !ok {
					mu.Lock()
					failures = append(failures, "a run without its lock in the context")
					mu.Unlock()
					return
				}
				name := l.Key()
				k, ok := -1, false
				for n, idx := range names {
					if c.Key(n) == name {
						k, ok = idx, true
					}
				}
				mu.Lock()
				if ok {
					ran[k] = append(ran[k], i)
				} else {
					failures = append(failures, "a run of an unplanned tick: "+name)
				}
				mu.Unlock()
				time.Sleep(duration(k))
			}),
			gocron.WithName("report"),
			gocron.WithStartAt(gocron.WithStartDateTime(base)),
			gocron.WithStopAt(gocron.WithStopDateTime(last.Add(3*every/4))), // by each replica's clock: after its last run, before its next
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
				mu.Lock()
				defer mu.Unlock()
				if errors.Is(err, lock.ErrNotAcquired) && (errors.Is(err, lock.ErrHeld) || errors.Is(err, lock.ErrGracePeriod)) {
					skipped = append(skipped, err.Error())
				} else {
					failures = append(failures, "lock error: "+err.Error())
				}
			})),
		)
		require.NoError(t, err)
	}
	for _, s := range schedulers {
		s.Start()
	}
	// Wait until every replica has either run or skipped every run, then a
	// little more for anything unexpected.
	deadline := time.Now().Add(time.Until(last) + 10*time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(skipped) + len(failures)
		for _, r := range ran {
			n += len(r)
		}
		mu.Unlock()
		if n >= len(skews)*runs {
			break
		}
		time.Sleep(every / 5)
	}
	time.Sleep(every)
	for _, s := range schedulers {
		require.NoError(t, s.Shutdown())
	}

	mu.Lock()
	defer mu.Unlock()
	for k, r := range ran {
		assert.Len(t, r, 1, "run %d must happen exactly once; replicas that ran it: %v", k, r)
	}
	assert.Empty(t, failures)
	assert.Len(t, skipped, (len(skews)-1)*runs, "every other replica skips every run as held or done")
	t.Logf("%d runs, %d skips", runs, len(skipped))
}

// skewedClock is the real clock, off by skew: a replica's clock.
type skewedClock struct {
	clockwork.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.Clock.Now().Add(c.skew) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// The test environment's helpers (internal/testenv of the root module,
// which this module may import: Go's internal rule goes by import path), under
// the short names the tests use.
var (
	realRedis = servers.Redis     // the tests' Redis; skips, or fails in CI, without it
	redisAddr = servers.RedisAddr // its address
	newClient = testenv.NewClient // a Client closed with the test
)
