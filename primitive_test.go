package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The tests of this file port Alepha's primitive tests (alepha-behaviour.md,
// "Their tests") through lock.New and Run, each replica an independent Client
// over one backend, and check the fixes of its known flaws.

// primCountingProvider returns a provider over p that counts, in acquires,
// its completed acquisition attempts (Acquire and Queue calls).
func primCountingProvider(p lock.Provider, acquires *atomic.Int32) *hookedProvider {
	return &hookedProvider{
		Provider: p,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			defer acquires.Add(1)
			return p.Acquire(ctx, key, owner, ttl)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
			defer acquires.Add(1)
			return p.Queue(ctx, key, w)
		},
	}
}

// Alepha test 1, with our fix of its silent skip: three replicas run at once
// without Wait; the handler runs once and the other two callers are told why.
func TestPrimitive_ThreeReplicasAtOnceRunOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		var probe sectionProbe
		var failed atomic.Int32
		handler := func(ctx context.Context, _ struct{}) error {
			defer probe.enter()()
			time.Sleep(50 * time.Millisecond)
			// Hold on until the other two calls have returned, so that a late
			// starter cannot find the lock free again.
			waitUntil(func() bool { return failed.Load() >= 2 }, 2*time.Second)
			return nil
		}
		errs := make([]error, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range replicas(t, b, 3) {
			p, err := lock.New(c, handler, lock.PrimitiveOptions[struct{}]{Name: name})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.Run(ctx, struct{}{})
				if errs[i] != nil {
					failed.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()

		assert.EqualValues(t, 1, probe.entered.Load(), "the handler should run exactly once across three replicas")
		var ok int
		for i, err := range errs {
			if err == nil {
				ok++
				continue
			}
			assert.ErrorIs(t, err, lock.ErrNotAcquired, "replica %d should be told it did not get the lock", i)
			assert.ErrorIs(t, err, lock.ErrHeld, "replica %d should be told the lock was held", i)
		}
		assert.Equal(t, 1, ok, "exactly one Run should succeed; errors: %v", errs)
	})
}

// Alepha test 2: three replicas with Wait all run, one after another.
func TestPrimitive_ThreeReplicasWaitRunInTurn(t *testing.T) {
	const hold = 100 * time.Millisecond
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		var probe sectionProbe
		handler := func(ctx context.Context, _ struct{}) error {
			defer probe.enter()()
			time.Sleep(hold)
			return nil
		}
		errs := make([]error, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range replicas(t, b, 3) {
			p, err := lock.New(c, handler, lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true}})
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = p.Run(ctx, struct{}{})
			}()
		}
		began := time.Now()
		close(start)
		wg.Wait()
		elapsed := time.Since(began)

		for i, err := range errs {
			assert.NoError(t, err, "replica %d should get the lock after waiting", i)
		}
		assert.EqualValues(t, 3, probe.entered.Load(), "every waiting replica should run the handler")
		assert.EqualValues(t, 1, probe.most.Load(), "the handlers should never overlap")
		assert.GreaterOrEqual(t, elapsed, 3*hold, "three handlers of %v run one after another", hold)
	})
}

// Alepha test 3: replicas started one after another run every time without a
// grace period, and once per window with one.
func TestPrimitive_SequentialReplicasAndGracePeriod(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		cs := replicas(t, b, 3)
		for _, tc := range []struct {
			name  string
			grace time.Duration
			runs  int32
		}{
			{"no grace period", 0, 3},
			{"grace period", time.Second, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := uniqueName(t)
				var runs atomic.Int32
				handler := func(context.Context, struct{}) error {
					runs.Add(1)
					return nil
				}
				for i, c := range cs {
					p, err := lock.New(c, handler, lock.PrimitiveOptions[struct{}]{
						Name: name, Options: lock.Options{GracePeriod: tc.grace},
					})
					require.NoError(t, err)
					err = p.Run(ctx, struct{}{})
					if i == 0 || tc.grace == 0 {
						assert.NoError(t, err, "replica %d should run", i)
						continue
					}
					assert.ErrorIs(t, err, lock.ErrNotAcquired, "replica %d starts within the grace period", i)
					assert.ErrorIs(t, err, lock.ErrGracePeriod, "replica %d should be told it is the grace period", i)
				}
				assert.Equal(t, tc.runs, runs.Load(), "handler runs with grace period %v", tc.grace)
			})
		}
	})
}

// Alepha test 7: a wait bounded by MaxDuration gives up with ErrTimeout.
func TestPrimitive_WaitGivesUpAfterMaxDuration(t *testing.T) {
	const maxWait = 300 * time.Millisecond
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		cs := replicas(t, b, 2)
		mustHold(t, cs[0], name)
		var runs atomic.Int32
		p, err := lock.New(cs[1], func(context.Context, struct{}) error { runs.Add(1); return nil },
			lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true, MaxDuration: maxWait}})
		require.NoError(t, err)

		began := time.Now()
		err = p.Run(ctxTimeout(t, 10*time.Second), struct{}{})
		elapsed := time.Since(began)

		assert.ErrorIs(t, err, lock.ErrNotAcquired, "the wait should end without the lock")
		assert.ErrorIs(t, err, lock.ErrTimeout, "the wait should end by its MaxDuration")
		assert.GreaterOrEqual(t, elapsed, maxWait, "the waiter should wait its whole MaxDuration")
		assert.Less(t, elapsed, 5*time.Second, "the waiter should give up soon after its MaxDuration")
		assert.Zero(t, runs.Load(), "the handler must not run without the lock")
	})
}

// Alepha test 8: a waiting replica runs after a no-wait replica's run ends.
func TestPrimitive_WaiterRunsAfterNoWaitHolder(t *testing.T) {
	const hold = 100 * time.Millisecond
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		cs := replicas(t, b, 2)
		var firstEnd, secondStart time.Time
		entered := make(chan struct{})
		first, err := lock.New(cs[0], func(context.Context, struct{}) error {
			close(entered)
			time.Sleep(hold)
			firstEnd = time.Now()
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		second, err := lock.New(cs[1], func(context.Context, struct{}) error {
			secondStart = time.Now()
			time.Sleep(hold)
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true}})
		require.NoError(t, err)

		firstErr := make(chan error, 1)
		go func() { firstErr <- first.Run(ctx, struct{}{}) }()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the no-wait replica should get the free lock")
		}
		secondErr := second.Run(ctx, struct{}{})

		assert.NoError(t, <-firstErr, "the no-wait replica should run")
		assert.NoError(t, secondErr, "the waiting replica should run once the lock is free")
		require.False(t, firstEnd.IsZero(), "the first handler should have finished")
		require.False(t, secondStart.IsZero(), "the second handler should have started")
		assert.False(t, secondStart.Before(firstEnd), "the waiter should start (%v) after the holder ended (%v)",
			secondStart.Format(time.StampMicro), firstEnd.Format(time.StampMicro))
	})
}

// Alepha test 9: a handler's error reaches the caller and the lock is freed.
func TestPrimitive_HandlerErrorReachesCallerAndFreesLock(t *testing.T) {
	errBoom := errors.New("boom")
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		cs := replicas(t, b, 2)
		var runs atomic.Int32
		fail := true
		handler := func(context.Context, struct{}) error {
			runs.Add(1)
			if fail {
				return errBoom
			}
			return nil
		}
		p0, err := lock.New(cs[0], handler, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		p1, err := lock.New(cs[1], handler, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)

		err = p0.Run(ctx, struct{}{})
		assert.ErrorIs(t, err, errBoom, "the handler's error should reach the caller")
		assert.NotErrorIs(t, err, lock.ErrNotAcquired, "a failed handler is not a failed acquisition")
		assert.NotErrorIs(t, err, lock.ErrLost, "the lock was released cleanly")

		fail = false
		assert.NoError(t, p1.Run(ctx, struct{}{}), "another replica should run after the failed run")
		assert.NoError(t, p0.Run(ctx, struct{}{}), "the same replica should run again after the failed run")
		assert.EqualValues(t, 3, runs.Load(), "every run should reach the handler")
	})
}

// Alepha test 10, with our fix: without Wait a held key skips the handler and
// says so.
func TestPrimitive_NoWaitHeldKeySkipsWithErrHeld(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		cs := replicas(t, b, 2)
		mustHold(t, cs[0], name)
		var runs atomic.Int32
		p, err := lock.New(cs[1], func(context.Context, struct{}) error { runs.Add(1); return nil },
			lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)

		err = p.Run(ctxTimeout(t, 5*time.Second), struct{}{})

		assert.ErrorIs(t, err, lock.ErrNotAcquired, "a held key should fail the run")
		assert.ErrorIs(t, err, lock.ErrHeld, "the reason should be that the key is held")
		var na *lock.NotAcquiredError
		if assert.ErrorAs(t, err, &na, "the error should carry the details") {
			assert.Equal(t, cs[1].Key(name), na.Key, "the error should name the full key")
			assert.Positive(t, na.RetryAfter, "the error should say how long the holder's record has left")
		}
		assert.Zero(t, runs.Load(), "the handler must not run without the lock")
	})
}

// Alepha's bug P0-1: concurrent callers of one primitive in one process all
// entered. Here they never overlap, with or without Wait.
func TestPrimitive_ConcurrentRunsOnOnePrimitive(t *testing.T) {
	const callers = 4
	eachBackend(t, func(t *testing.T, b backend) {
		c := newClient(t, b.replica(t))
		for _, wait := range []bool{false, true} {
			name := uniqueName(t)
			ctx := ctxTimeout(t, 10*time.Second)
			var probe sectionProbe
			var failed atomic.Int32
			p, err := lock.New(c, func(context.Context, int) error {
				defer probe.enter()()
				time.Sleep(30 * time.Millisecond)
				if !wait {
					waitUntil(func() bool { return failed.Load() >= callers-1 }, 2*time.Second)
				}
				return nil
			}, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{Wait: wait}})
			require.NoError(t, err)

			errs := make([]error, callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = p.Run(ctx, i)
					if errs[i] != nil {
						failed.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()

			assert.EqualValues(t, 1, probe.most.Load(), "Wait=%v: concurrent Runs must never both be inside", wait)
			if wait {
				assert.EqualValues(t, callers, probe.entered.Load(), "Wait=%v: every Run should run in turn", wait)
				for i, err := range errs {
					assert.NoError(t, err, "Wait=%v: caller %d should run", wait, i)
				}
				continue
			}
			assert.EqualValues(t, 1, probe.entered.Load(), "Wait=%v: exactly one Run should enter", wait)
			for i, err := range errs {
				if err != nil {
					assert.ErrorIs(t, err, lock.ErrHeld, "Wait=%v: caller %d should be told the lock was held", wait, i)
				}
			}
		}
	})
}

// NameFunc gives a lock per argument: different arguments run at once, the
// same argument is excluded.
func TestPrimitive_NameFuncLockPerArgument(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		base := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		cs := replicas(t, b, 2)
		inside := map[string]*atomic.Bool{"a": {}, "b": {}}
		var sawOther atomic.Int32
		release := make(chan struct{})
		handler := func(_ context.Context, arg string) error {
			inside[arg].Store(true)
			other := map[string]string{"a": "b", "b": "a"}[arg]
			if waitUntil(inside[other].Load, 3*time.Second) {
				sawOther.Add(1)
			}
			<-release
			return nil
		}
		opts := lock.PrimitiveOptions[string]{NameFunc: func(arg string) string { return base + ":" + arg }}
		p0, err := lock.New(cs[0], handler, opts)
		require.NoError(t, err)
		p1, err := lock.New(cs[1], handler, opts)
		require.NoError(t, err)
		assert.Equal(t, base+":a", p0.Name("a"), "Name should apply NameFunc")

		errs := make(chan error, 2)
		go func() { errs <- p0.Run(ctx, "a") }()
		go func() { errs <- p1.Run(ctx, "b") }()
		bothIn := waitUntil(func() bool { return inside["a"].Load() && inside["b"].Load() }, 3*time.Second)
		assert.True(t, bothIn, "runs with different arguments should hold their locks at once")

		// While "a" runs, another Run of "a" is excluded.
		err = p1.Run(ctx, "a")
		assert.ErrorIs(t, err, lock.ErrHeld, "a Run with the same argument should find its lock held")

		close(release)
		assert.NoError(t, <-errs, "the run of one argument should succeed")
		assert.NoError(t, <-errs, "the run of the other argument should succeed")
		assert.EqualValues(t, 2, sawOther.Load(), "each handler should have seen the other inside")
	})
}

// primNightlyService is a service whose method is declared as a Primitive without
// a name, as Alepha names it after "<Service>:<property>".
type primNightlyService struct {
	runs    atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s *primNightlyService) Nightly(context.Context, struct{}) error {
	s.runs.Add(1)
	if s.entered != nil {
		close(s.entered)
		<-s.release
	}
	return nil
}

// Without Name or NameFunc the lock is named after the handler, the same in
// every replica, so that replicas contend.
func TestPrimitive_DefaultNameFromHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		// The default name is the same in every run of this test: a unique
		// prefix keeps runs sharing the real Redis apart.
		prefix := uniqueName(t) + ":"
		cs := replicas(t, b, 2, lock.WithPrefix(prefix))
		ctx := ctxTimeout(t, 10*time.Second)
		s0 := &primNightlyService{entered: make(chan struct{}), release: make(chan struct{})}
		s1 := &primNightlyService{}
		p0, err := lock.New(cs[0], s0.Nightly, lock.PrimitiveOptions[struct{}]{})
		require.NoError(t, err)
		p1, err := lock.New(cs[1], s1.Nightly, lock.PrimitiveOptions[struct{}]{})
		require.NoError(t, err)

		name := p0.Name(struct{}{})
		assert.NotEmpty(t, name, "the default name should not be empty")
		assert.Contains(t, name, "Nightly", "the default name should say which method it is")
		assert.NotContains(t, name, "-fm", "the default name should not carry the method-value suffix")
		assert.Equal(t, name, p1.Name(struct{}{}), "the same method on another instance should give the same name")

		errc := make(chan error, 1)
		go func() { errc <- p0.Run(ctx, struct{}{}) }()
		select {
		case <-s0.entered:
		case <-ctx.Done():
			t.Fatal("the first replica should get the free lock")
		}
		err = p1.Run(ctx, struct{}{})
		close(s0.release)
		assert.ErrorIs(t, err, lock.ErrHeld, "a replica of the same method should contend for the same lock")
		assert.Zero(t, s1.runs.Load(), "the second replica's handler must not run")
		assert.NoError(t, <-errc, "the first replica should run")
	})
}

// primJob is how a scheduler may hold its jobs: behind an interface.
type primJob interface {
	Run(context.Context, struct{}) error
}

type primReportJob struct{}

func (primReportJob) Run(context.Context, struct{}) error { return nil }

type primCleanupJob struct{}

func (primCleanupJob) Run(context.Context, struct{}) error { return nil }

// Two different jobs declared from an interface value (a scheduler's
// "for _, job := range jobs { lock.New(c, job.Run, ...) }") must not share a
// default lock: either New refuses to guess a name, or the names differ.
func TestPrimitive_DefaultNameSeparatesJobsBehindAnInterface(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	var names []string
	for _, job := range []primJob{primReportJob{}, primCleanupJob{}} {
		p, err := lock.New(c, job.Run, lock.PrimitiveOptions[struct{}]{})
		if err != nil {
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "New may refuse to guess a name, with ErrInvalidArgument")
			return
		}
		names = append(names, p.Name(struct{}{}))
	}
	assert.NotEqual(t, names[0], names[1], "two different jobs should not share one default lock name")
}

// GracePeriodFunc sets the grace period per argument.
func TestPrimitive_GracePeriodFuncPerArgument(t *testing.T) {
	const window = 300 * time.Millisecond
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		cs := replicas(t, b, 2)
		var runs atomic.Int32
		handler := func(context.Context, time.Duration) error { runs.Add(1); return nil }
		opts := lock.PrimitiveOptions[time.Duration]{
			Name:            uniqueName(t),
			GracePeriodFunc: func(grace time.Duration) time.Duration { return grace },
			// GracePeriodFunc wins over the static grace period.
			Options: lock.Options{GracePeriod: time.Hour},
		}
		p0, err := lock.New(cs[0], handler, opts)
		require.NoError(t, err)
		p1, err := lock.New(cs[1], handler, opts)
		require.NoError(t, err)

		require.NoError(t, p0.Run(ctx, 0), "a run with no grace period should run")
		require.NoError(t, p1.Run(ctx, 0), "a run with no grace period leaves the lock free")
		require.NoError(t, p0.Run(ctx, window), "a run with a grace period should run")
		err = p1.Run(ctx, 0)
		assert.ErrorIs(t, err, lock.ErrGracePeriod, "the previous run's %v grace period should keep the lock closed", window)
		assert.EqualValues(t, 3, runs.Load(), "a run within the grace period must not reach the handler")

		if b.name == "miniredis" {
			return // miniredis counts TTLs down only when told to (FastForward)
		}
		reopened := waitUntil(func() bool { return p1.Run(ctx, 0) == nil }, 3*time.Second)
		assert.True(t, reopened, "the lock should open again after the %v grace period", window)
		assert.EqualValues(t, 4, runs.Load(), "the run after the window should reach the handler")
	})
}

// A replica that is waiting when the holder ends with a grace period skips
// with ErrGracePeriod, as everyone who arrives in the window does.
func TestPrimitive_WaiterSkipsWhenHolderEndsWithGracePeriod(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		holderClient := newClient(t, b.replica(t))
		var acquires atomic.Int32
		counted := primCountingProvider(b.replica(t), &acquires)
		rec := newRecorder()
		waiterClient := newClient(t, counted, rec.option())
		opts := lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true, GracePeriod: time.Second}}

		var waiting bool
		entered := make(chan struct{})
		holder, err := lock.New(holderClient, func(context.Context, struct{}) error {
			close(entered)
			// End only once the waiter is waiting: it has tried, subscribed
			// and looked once more.
			waiting = waitUntil(func() bool { return acquires.Load() >= 2 }, 5*time.Second)
			return nil
		}, opts)
		require.NoError(t, err)
		var waiterRuns atomic.Int32
		waiter, err := lock.New(waiterClient, func(context.Context, struct{}) error { waiterRuns.Add(1); return nil }, opts)
		require.NoError(t, err)

		holderErr := make(chan error, 1)
		go func() { holderErr <- holder.Run(ctx, struct{}{}) }()
		<-entered
		err = waiter.Run(ctx, struct{}{})

		events := eventKinds(drain(rec))
		require.NoError(t, <-holderErr, "the holder should run")
		require.True(t, waiting, "the waiter should have been waiting when the holder ended; it made %d attempts, "+
			"returned %v, emitted %v", acquires.Load(), err, events)
		assert.ErrorIs(t, err, lock.ErrNotAcquired, "the waiter should not get the lock")
		assert.ErrorIs(t, err, lock.ErrGracePeriod, "the waiter should skip because of the grace period")
		assert.Zero(t, waiterRuns.Load(), "the waiter's handler must not run within the grace period")
		assert.Equal(t, []lock.EventKind{lock.EventContended, lock.EventSkipped}, events,
			"the waiter should emit Contended, then Skipped")
	})
}

// The handler's context carries the held lock.
func TestPrimitive_HandlerContextCarriesLock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		c := newClient(t, b.replica(t))
		var got *lock.Lock
		var ok bool
		p, err := lock.New(c, func(ctx context.Context, _ struct{}) error {
			got, ok = lock.FromContext(ctx)
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)

		require.NoError(t, p.Run(ctxTimeout(t, 5*time.Second), struct{}{}))

		require.True(t, ok, "FromContext should find the lock in the handler's context")
		require.NotNil(t, got, "FromContext should return the held lock")
		assert.Positive(t, got.Token(), "the grant should carry a fencing token")
		assert.Equal(t, c.Key(name), got.Key(), "the lock's key should be the prefixed name")
		assert.NotEmpty(t, got.Owner(), "the lock should have an owner")
		select {
		case <-got.Done():
		default:
			t.Error("the lock should be released when Run returns")
		}
		assert.NoError(t, got.Err(), "a cleanly released lock has no error")
		_, ok = lock.FromContext(context.Background())
		assert.False(t, ok, "a context outside a run carries no lock")
	})
}

// Alepha flaw 5: the primitive emitted no events. Here it emits what the
// imperative API does.
func TestPrimitive_EmitsEvents(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 10*time.Second)
		r0, r1 := newRecorder(), newRecorder()
		c0 := newClient(t, b.replica(t), r0.option())
		c1 := newClient(t, b.replica(t), r1.option())
		entered := make(chan struct{})
		release := make(chan struct{})
		holder, err := lock.New(c0, func(context.Context, struct{}) error {
			close(entered)
			<-release
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		noWait, err := lock.New(c1, func(context.Context, struct{}) error { return nil },
			lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		waiting, err := lock.New(c1, func(context.Context, struct{}) error { return nil },
			lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true}})
		require.NoError(t, err)

		holderErr := make(chan error, 1)
		go func() { holderErr <- holder.Run(ctx, struct{}{}) }()
		<-entered
		assert.ErrorIs(t, noWait.Run(ctx, struct{}{}), lock.ErrHeld, "the no-wait run should find the lock held")
		skipped := drain(r1)
		assert.Equal(t, []lock.EventKind{lock.EventContended, lock.EventSkipped}, eventKinds(skipped),
			"a no-wait run that finds the lock held should emit Contended then Skipped")
		for _, e := range skipped {
			assert.Equal(t, c1.Key(name), e.Key, "%v event should carry the prefixed key", e.Kind)
			if e.Kind == lock.EventSkipped {
				assert.ErrorIs(t, e.Err, lock.ErrHeld, "the Skipped event should say why")
			}
		}

		waitErr := make(chan error, 1)
		go func() { waitErr <- waiting.Run(ctx, struct{}{}) }()
		waitUntil(func() bool { return len(r1.ch) > 0 }, 3*time.Second) // the waiter is contended
		close(release)
		require.NoError(t, <-holderErr, "the holder should run")
		require.NoError(t, <-waitErr, "the waiting run should run after the holder")

		held := drain(r0)
		if assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventReleased}, eventKinds(held),
			"the holder's run should emit Acquired then Released") {
			assert.Positive(t, held[0].Token, "Acquired should carry the token")
			assert.Equal(t, held[0].Token, held[1].Token, "Released should carry the token it was granted")
			assert.Equal(t, held[0].Owner, held[1].Owner, "both events should name the same owner")
			assert.Equal(t, c0.Key(name), held[0].Key, "Acquired should carry the prefixed key")
		}
		assert.Equal(t, []lock.EventKind{lock.EventContended, lock.EventAcquired, lock.EventReleased}, eventKinds(drain(r1)),
			"a waiting run should emit Contended, Acquired, Released")
	})
}

// Alepha flaw 5 also said the middleware ignored the key prefix: here the
// prefix is part of every key the primitive takes.
func TestPrimitive_KeyPrefixApplies(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		prefixA, prefixB := "a-"+uniqueName(t)+":", "b-"+uniqueName(t)+":"
		ctx := ctxTimeout(t, 10*time.Second)
		holderClient := newClient(t, b.replica(t), lock.WithPrefix(prefixA))
		samePrefix := newClient(t, b.replica(t), lock.WithPrefix(prefixA))
		otherPrefix := newClient(t, b.replica(t), lock.WithPrefix(prefixB))

		var key string
		entered := make(chan struct{})
		release := make(chan struct{})
		holder, err := lock.New(holderClient, func(ctx context.Context, _ struct{}) error {
			if l, ok := lock.FromContext(ctx); ok {
				key = l.Key()
			}
			close(entered)
			<-release
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() { errc <- holder.Run(ctx, struct{}{}) }()
		<-entered
		defer func() {
			close(release)
			assert.NoError(t, <-errc, "the holder should run")
		}()

		assert.Equal(t, prefixA+"{"+name+"}", key, "the held key should be the prefix and the name")
		if b.raw != nil {
			n, err := b.raw.Exists(ctx, key).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "Redis should hold the record under the prefixed key")
		}
		for _, tc := range []struct {
			c       *lock.Client
			contend bool
		}{{samePrefix, true}, {otherPrefix, false}} {
			p, err := lock.New(tc.c, func(context.Context, struct{}) error { return nil },
				lock.PrimitiveOptions[struct{}]{Name: name})
			require.NoError(t, err)
			err = p.Run(ctx, struct{}{})
			if !tc.contend {
				assert.NoError(t, err, "the same name under another prefix is another lock")
				continue
			}
			assert.ErrorIs(t, err, lock.ErrHeld, "the same name under the same prefix is the same lock")
			var na *lock.NotAcquiredError
			if assert.ErrorAs(t, err, &na) {
				assert.Equal(t, key, na.Key, "the error should name the prefixed key")
			}
		}
	})
}

// Bad input is an error matching ErrInvalidArgument, never a panic, and never
// runs the handler.
func TestPrimitive_InvalidArguments(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	ok := func(context.Context, int) error { return nil }
	name := uniqueName(t)

	for _, tc := range []struct {
		what    string
		c       *lock.Client
		handler func(context.Context, int) error
		opts    lock.PrimitiveOptions[int]
	}{
		{"nil client", nil, ok, lock.PrimitiveOptions[int]{Name: name}},
		{"nil handler", c, nil, lock.PrimitiveOptions[int]{Name: name}},
		{"nil handler without a name", c, nil, lock.PrimitiveOptions[int]{}},
		{"negative MaxDuration", c, ok, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{MaxDuration: -time.Second}}},
		{"negative Lease", c, ok, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{Lease: -time.Second}}},
		{"negative GracePeriod", c, ok, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{GracePeriod: -time.Second}}},
		{"lease under 3ms", c, ok, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{Lease: time.Millisecond}}},
		{"name over MaxKeyLen", c, ok, lock.PrimitiveOptions[int]{Name: strings.Repeat("n", lock.MaxKeyLen)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			var p *lock.Primitive[int]
			var err error
			require.NotPanics(t, func() { p, err = lock.New(tc.c, tc.handler, tc.opts) }, "New must not panic on bad input")
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "New should reject %s", tc.what)
			assert.Nil(t, p, "New should return no Primitive with an error")
		})
	}

	ctx := ctxTimeout(t, 5*time.Second)
	var runs atomic.Int32
	count := func(context.Context, int) error { runs.Add(1); return nil }

	t.Run("NameFunc returns empty", func(t *testing.T) {
		p, err := lock.New(c, count, lock.PrimitiveOptions[int]{NameFunc: func(int) string { return "" }})
		require.NoError(t, err)
		assert.ErrorIs(t, p.Run(ctx, 1), lock.ErrInvalidArgument, "an empty derived name should fail the run")
		assert.Zero(t, runs.Load(), "the handler must not run without a name")
	})
	t.Run("GracePeriodFunc returns negative", func(t *testing.T) {
		p, err := lock.New(c, count, lock.PrimitiveOptions[int]{
			Name: name, GracePeriodFunc: func(n int) time.Duration { return time.Duration(n) },
		})
		require.NoError(t, err)
		assert.ErrorIs(t, p.Run(ctx, -1), lock.ErrInvalidArgument, "a negative derived grace period should fail the run")
		assert.Zero(t, runs.Load(), "the handler must not run with a bad grace period")
		assert.NoError(t, p.Run(ctx, 0), "a later valid run should not be affected")
	})
}

// A wait ended by the caller's context reports both ErrNotAcquired and the
// context's error.
func TestPrimitive_ContextCancelledWhileWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		cs := replicas(t, b, 2)
		mustHold(t, cs[0], name)
		var runs atomic.Int32
		p, err := lock.New(cs[1], func(context.Context, struct{}) error { runs.Add(1); return nil },
			lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true}})
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		timer := time.AfterFunc(100*time.Millisecond, cancel)
		defer timer.Stop()
		began := time.Now()
		err = p.Run(ctx, struct{}{})
		elapsed := time.Since(began)

		assert.ErrorIs(t, err, lock.ErrNotAcquired, "a cancelled wait should end without the lock")
		assert.ErrorIs(t, err, context.Canceled, "the error should say the context was cancelled")
		assert.NotErrorIs(t, err, lock.ErrTimeout, "the wait did not time out")
		assert.Less(t, elapsed, 3*time.Second, "the wait should end soon after the cancellation")
		assert.Zero(t, runs.Load(), "the handler must not run without the lock")
	})
}

// Alepha flaw 3: the end of a lock was announced before the release, so a
// woken waiter found the key still held. Here the waiter woken by the
// announcement gets the lock on the attempt the announcement causes, long
// before its fallback poll.
func TestPrimitive_WokenWaiterAcquiresAtOnce(t *testing.T) {
	const poll = 5 * time.Second
	eachBackend(t, func(t *testing.T, b backend) {
		name := uniqueName(t)
		ctx := ctxTimeout(t, 15*time.Second)
		holderClient := newClient(t, b.replica(t))
		var acquires atomic.Int32
		counted := primCountingProvider(b.replica(t), &acquires)
		waiterClient := newClient(t, counted, lock.WithPollInterval(poll))

		var holderEnd time.Time
		entered := make(chan struct{})
		holder, err := lock.New(holderClient, func(context.Context, struct{}) error {
			close(entered)
			// Hold on until the waiter has tried once and then queued.
			waitUntil(func() bool { return acquires.Load() >= 2 }, 5*time.Second)
			holderEnd = time.Now()
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name})
		require.NoError(t, err)
		var waiterStart time.Time
		waiter, err := lock.New(waiterClient, func(context.Context, struct{}) error {
			waiterStart = time.Now()
			return nil
		}, lock.PrimitiveOptions[struct{}]{Name: name, Options: lock.Options{Wait: true}})
		require.NoError(t, err)

		holderErr := make(chan error, 1)
		go func() { holderErr <- holder.Run(ctx, struct{}{}) }()
		<-entered
		err = waiter.Run(ctx, struct{}{})

		require.NoError(t, <-holderErr, "the holder should run")
		require.NoError(t, err, "the waiter should get the lock once the holder releases it")
		handoff := waiterStart.Sub(holderEnd)
		assert.Less(t, handoff, poll/2, "the announcement, not the %v poll, should wake the waiter", poll)
		assert.EqualValues(t, 2, acquires.Load(),
			"the waiter should try once, queue once, and be handed the lock by the release, with no other attempt")
	})
}

// A provider that fails before the caller's deadline makes Run return the
// provider's error (Run's doc: a *NotAcquiredError only when the lock was
// held, closed, or the wait ended), however long the cleanup after the
// failure takes.
func TestPrimitive_ProviderFailureIsReturned(t *testing.T) {
	testenv.SkipShort(t, "2 s (a failing provider's clean-up)")
	// Acquire fails at once, so the failure comes before the deadline
	// whatever the load (mwDownProvider's fails after 100 ms: a stall past
	// both that and the deadline lets the hook see the deadline instead).
	// Release, the clean-up after the failure, hangs for the release timeout.
	down := mwDownProvider(nil)
	down.OnAcquire = func(context.Context, string, string, time.Duration) (lock.Record, error) {
		return lock.Record{}, errMwDown
	}
	c := newClient(t, down, lock.WithReleaseTimeout(2*time.Second))
	var runs atomic.Int32
	p, err := lock.New(c, func(context.Context, struct{}) error { runs.Add(1); return nil },
		lock.PrimitiveOptions[struct{}]{Name: uniqueName(t)})
	require.NoError(t, err)

	began := time.Now()
	err = p.Run(ctxTimeout(t, time.Second), struct{}{})
	elapsed := time.Since(began)

	assert.ErrorIs(t, err, errMwDown, "the provider's failure (at once, before the 1 s deadline) should be returned")
	assert.NotErrorIs(t, err, lock.ErrNotAcquired, "nobody held the lock: the provider failed")
	// Waiting for the clean-up (the 2 s release timeout) would take at
	// least 1.8 s.
	assert.Less(t, elapsed, 1500*time.Millisecond, "Run should return by the caller's deadline, not after the clean-up")
	assert.Zero(t, runs.Load(), "the handler must not run without the lock")
}

// A waiting Run that is opening the Client's subscription does not hold up
// the Client's other Runs: a no-wait Run of a free lock returns at once.
func TestPrimitive_SlowSubscribeDoesNotBlockOtherRuns(t *testing.T) {
	testenv.SkipShort(t, "3 s; TestSlowSubscribeDoesNotBlockClient checks the same on a Client")
	const delay = 2 * time.Second
	mem := lock.NewMemoryProvider()
	// Listen takes a while (a pub/sub connection that is slow to open).
	c := newClient(t, &hookedProvider{Provider: mem, OnListen: func(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return mem.Listen(ctx, inbox, deliver)
	}})
	held := uniqueName(t)
	mustHold(t, newClient(t, mem), held)
	ctx := ctxTimeout(t, 10*time.Second)

	waiter, err := lock.New(c, func(context.Context, struct{}) error { return nil },
		lock.PrimitiveOptions[struct{}]{Name: held, Options: lock.Options{Wait: true, MaxDuration: delay + time.Second}})
	require.NoError(t, err)
	other, err := lock.New(c, func(context.Context, struct{}) error { return nil },
		lock.PrimitiveOptions[struct{}]{Name: uniqueName(t) + ":free"})
	require.NoError(t, err)

	waitErr := make(chan error, 1)
	go func() { waitErr <- waiter.Run(ctx, struct{}{}) }()
	time.Sleep(100 * time.Millisecond) // the waiter is subscribing
	began := time.Now()
	err = other.Run(ctx, struct{}{})
	elapsed := time.Since(began)

	assert.NoError(t, err, "a Run of a free lock should run")
	assert.Less(t, elapsed, delay/2, "a Run of a free lock should not wait for another Run's subscription")
	assert.ErrorIs(t, <-waitErr, lock.ErrTimeout, "the waiter waits for a lock held to the end")
}
