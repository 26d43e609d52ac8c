package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// A Primitive is a declaration over a Client: Run is Client.Do under the
// Primitive's name and options. These tests check what is a Primitive's
// own (its name, NameFunc and GracePeriodFunc per argument, its option
// checks, and that Run passes its key, options and outcomes through); how
// a wait, a grace period, a refusal or an event behaves is tested on the
// Client (acquire_test.go, wait_test.go, grace_test.go, events_test.go,
// do_test.go). Alepha's primitive tests (alepha-behaviour.md, "Their
// tests") and its known flaws are checked there, or here where they are a
// Primitive's.

// primNightlyService is a service whose method is declared as a Primitive
// without a name, as Alepha names it after "<Service>:<property>".
type primNightlyService struct{}

func (*primNightlyService) Nightly(context.Context, string) error { return nil }

func primTopLevel(context.Context, string) error { return nil }

// primJob is how a scheduler may hold its jobs: behind an interface.
type primJob interface {
	Run(context.Context, string) error
}

type primReportJob struct{}

func (primReportJob) Run(context.Context, string) error { return nil }

type primCleanupJob struct{}

func (primCleanupJob) Run(context.Context, string) error { return nil }

// The name of a Primitive's lock, which Name(arg) returns and Run takes:
// Name, else NameFunc's for the argument, else the handler's own name, the
// same for every instance of a method with a pointer receiver, so that
// replicas contend. New refuses to guess the name of a handler whose name
// does not tell it apart: a closure, a method of a value receiver, or one
// taken from an interface (a scheduler's "for _, job := range jobs {
// lock.New(c, job.Run, ...) }" must not put two jobs under one lock).
func TestPrimitive_Name(t *testing.T) {
	const pkg = "github.com/seed05627090/lock_test."
	noop := func(context.Context, string) error { return nil }
	var report, cleanup primJob = primReportJob{}, primCleanupJob{}
	for _, tc := range []struct {
		what     string
		handlers []func(context.Context, string) error // declared alike, each on its Client
		opts     lock.PrimitiveOptions[string]
		want     string // the name for the argument "a"; "" when New refuses
	}{
		{"Name", []func(context.Context, string) error{noop}, lock.PrimitiveOptions[string]{Name: "job"}, "job"},
		{"NameFunc wins over Name", []func(context.Context, string) error{noop},
			lock.PrimitiveOptions[string]{Name: "job", NameFunc: func(arg string) string { return "job:" + arg }}, "job:a"},
		{"method of a pointer receiver, on two instances",
			[]func(context.Context, string) error{(&primNightlyService{}).Nightly, (&primNightlyService{}).Nightly},
			lock.PrimitiveOptions[string]{}, pkg + "(*primNightlyService).Nightly"},
		{"top-level function", []func(context.Context, string) error{primTopLevel}, lock.PrimitiveOptions[string]{}, pkg + "primTopLevel"},
		{"closure", []func(context.Context, string) error{noop}, lock.PrimitiveOptions[string]{}, ""},
		{"method of a value receiver", []func(context.Context, string) error{primReportJob{}.Run}, lock.PrimitiveOptions[string]{}, ""},
		{"two jobs behind an interface", []func(context.Context, string) error{report.Run, cleanup.Run}, lock.PrimitiveOptions[string]{}, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			mem := lock.NewMemoryProvider()
			ctx := ctxTimeout(t, 5*time.Second)
			for i, h := range tc.handlers {
				rec := newRecorder()
				c := newClient(t, mem, rec.option())
				p, err := lock.New(c, h, tc.opts)
				if tc.want == "" {
					assert.ErrorIs(t, err, lock.ErrInvalidArgument, "handler %d: New should refuse to guess a name", i)
					assert.Nil(t, p, "handler %d: New should return no Primitive with an error", i)
					continue
				}
				require.NoError(t, err, "handler %d", i)
				assert.Equal(t, tc.want, p.Name("a"), "handler %d: the lock's name", i)
				require.NoError(t, p.Run(ctx, "a"), "handler %d should run", i)
				events := drain(rec)
				if assert.NotEmpty(t, events, "handler %d: Run should emit events", i) {
					assert.Equal(t, c.Key(tc.want), events[0].Key, "handler %d: Run should take the lock that Name names", i)
				}
			}
		})
	}
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

// Run passes the Primitive's key and options to the Client and its
// outcome back (Run's doc): nil when the handler ran, the handler's error
// (the lock released all the same), or a *NotAcquiredError naming the key,
// without running the handler, when another holds the lock (ErrHeld), a run
// ended within the grace period (ErrGracePeriod), the wait timed out
// (ErrTimeout) or the caller's context ended. The handler's context carries
// the lock, whose key is the Client's prefix and the name (Alepha's
// middleware ignored the prefix), and Run emits the imperative API's
// events (Alepha's primitive emitted none). Each case runs on its own
// Client, beside another replica over the same backend.
func TestPrimitive_Run(t *testing.T) {
	errBoom := errors.New("boom")
	// hold takes the lock in another replica.
	hold := func(t *testing.T, _ backend, other *lock.Client, name string, _ lock.Options) {
		mustHold(t, other, name)
	}
	cases := []struct {
		what string
		opts lock.Options
		// before runs on the other replica, with the case's name and options.
		before func(t *testing.T, b backend, other *lock.Client, name string, o lock.Options)
		cancel bool             // cancel Run's context 100 ms in
		fail   error            // the handler's error
		want   []error          // what Run's error matches; none: Run returns nil
		not    []error          // what it must not match
		events []lock.EventKind // the events of Run's Client
	}{
		{what: "ran", events: []lock.EventKind{lock.EventAcquired, lock.EventReleased}},
		{what: "handler failed", fail: errBoom, want: []error{errBoom}, not: []error{lock.ErrNotAcquired, lock.ErrLost},
			events: []lock.EventKind{lock.EventAcquired, lock.EventReleased}},
		{what: "held", before: hold, want: []error{lock.ErrNotAcquired, lock.ErrHeld},
			events: []lock.EventKind{lock.EventContended, lock.EventSkipped}},
		{what: "held under another prefix", before: func(t *testing.T, b backend, _ *lock.Client, name string, _ lock.Options) {
			mustHold(t, newClient(t, b.replica(t), lock.WithPrefix("q:")), name)
		}, events: []lock.EventKind{lock.EventAcquired, lock.EventReleased}},
		{what: "grace period", opts: lock.Options{GracePeriod: time.Minute},
			before: func(t *testing.T, _ backend, other *lock.Client, name string, o lock.Options) {
				p, err := lock.New(other, func(context.Context, error) error { return nil },
					lock.PrimitiveOptions[error]{Name: name, Options: o})
				require.NoError(t, err)
				require.NoError(t, p.Run(ctxTimeout(t, 5*time.Second), nil), "the other replica's run should run")
			},
			want: []error{lock.ErrNotAcquired, lock.ErrGracePeriod}, events: []lock.EventKind{lock.EventSkipped}},
		{what: "wait timed out", opts: lock.Options{Wait: true, MaxDuration: 300 * time.Millisecond}, before: hold,
			want: []error{lock.ErrNotAcquired, lock.ErrTimeout}, events: []lock.EventKind{lock.EventContended, lock.EventSkipped}},
		{what: "wait cancelled", opts: lock.Options{Wait: true}, before: hold, cancel: true,
			want: []error{lock.ErrNotAcquired, context.Canceled}, not: []error{lock.ErrTimeout},
			events: []lock.EventKind{lock.EventContended, lock.EventSkipped}},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range cases {
			t.Run(tc.what, func(t *testing.T) {
				ctx := ctxTimeout(t, 10*time.Second)
				name := uniqueName(t)
				key := "p:{" + name + "}"
				rec := newRecorder()
				c := newClient(t, b.replica(t), lock.WithPrefix("p:"), rec.option())
				other := newClient(t, b.replica(t), lock.WithPrefix("p:"))
				if tc.before != nil {
					tc.before(t, b, other, name, tc.opts)
				}
				var runs atomic.Int32
				var held *lock.Lock
				p, err := lock.New(c, func(ctx context.Context, fail error) error {
					runs.Add(1)
					held, _ = lock.FromContext(ctx)
					if b.raw != nil {
						n, err := b.raw.Exists(ctx, key).Result()
						assert.NoError(t, err)
						assert.EqualValues(t, 1, n, "Redis should hold the record under the prefixed key")
					}
					return fail
				}, lock.PrimitiveOptions[error]{Name: name, Options: tc.opts})
				require.NoError(t, err)
				runCtx := ctx
				if tc.cancel {
					var cancel context.CancelFunc
					runCtx, cancel = context.WithCancel(ctx)
					defer cancel()
					timer := time.AfterFunc(100*time.Millisecond, cancel)
					defer timer.Stop()
				}

				err = p.Run(runCtx, tc.fail)

				if len(tc.want) == 0 {
					assert.NoError(t, err, "the run should succeed")
				}
				for _, want := range tc.want {
					assert.ErrorIs(t, err, want)
				}
				for _, not := range tc.not {
					assert.NotErrorIs(t, err, not)
				}
				events := drain(rec)
				assert.Equal(t, tc.events, eventKinds(events), "Run's events")
				for _, e := range events {
					assert.Equal(t, key, e.Key, "%v should carry the prefixed key", e.Kind)
				}
				if err == nil || errors.Is(err, errBoom) { // the handler ran
					assert.EqualValues(t, 1, runs.Load(), "the handler should run once")
					if assert.NotNil(t, held, "the handler's context should carry the lock") {
						assert.Equal(t, key, held.Key(), "the lock's key should be the prefix and the name")
						assert.Positive(t, held.Token(), "the grant should carry a fencing token")
						assert.NotEmpty(t, held.Owner(), "the lock should have an owner")
						assertClosed(t, held.Done(), "the lock should be released when Run returns")
						assert.NoError(t, held.Err(), "a cleanly released lock has no error")
					}
					l, err := other.Acquire(ctx, name, lock.Options{})
					if assert.NoError(t, err, "the lock should be free once Run returns") {
						assert.NoError(t, l.Release(ctx))
					}
					return
				}
				assert.Zero(t, runs.Load(), "the handler must not run without the lock")
				var na *lock.NotAcquiredError
				if assert.ErrorAs(t, err, &na, "a run that did not get the lock should say so") {
					assert.Equal(t, key, na.Key, "the error should name the prefixed key")
					if errors.Is(err, lock.ErrHeld) {
						assert.Positive(t, na.RetryAfter, "the error should say how long the holder's record has left")
					}
				}
			})
		}
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
			p, err := lock.New(c, func(context.Context, int) error {
				probe.section(!wait, callers)
				return nil
			}, lock.PrimitiveOptions[int]{Name: name, Options: lock.Options{Wait: wait}})
			require.NoError(t, err)

			errs := probe.together(callers, func(i int) error { return p.Run(ctx, i) })

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
