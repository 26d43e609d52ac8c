package lockotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	lockotel "github.com/seed05627090/lock/otel"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestAcquireRelease checks a granted and released lock: one acquisition
// acquired, one release, a wait and a hold, no key on the metrics, and a
// trace of a wait followed by its hold.
func TestAcquireRelease(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	c := newClient(t, lock.NewMemoryProvider(), tm.events(t))

	l, err := c.Acquire(ctx, "report", lock.Options{})
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, l.Release(ctx))

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"acquired": 1}, counts(t, rm, "lock.acquisitions"))
	assert.Equal(t, map[string]int64{"released": 1}, counts(t, rm, "lock.releases"))
	assert.Empty(t, counts(t, rm, "lock.contended"), "no contention")
	assert.Empty(t, counts(t, rm, "lock.losses"), "no loss")
	wait := histograms(t, rm, "lock.wait.duration")
	assert.Equal(t, uint64(1), wait["acquired"].Count, "one wait, acquired")
	hold := histograms(t, rm, "lock.hold.duration")
	require.Contains(t, hold, "released")
	assert.Equal(t, uint64(1), hold["released"].Count, "one hold, released")
	assert.GreaterOrEqual(t, hold["released"].Sum, 0.005, "the hold lasted the sleep, in seconds")
	assert.False(t, hasKey(rm), "no metric carries lock.key by default")

	waits, holds := tm.ended("lock.wait"), tm.ended("lock.hold")
	require.Len(t, waits, 1, "one wait span")
	require.Len(t, holds, 1, "one hold span")
	w, h := waits[0], holds[0]
	assert.False(t, w.Parent().IsValid(), "the wait is the root of its own trace")
	assert.Equal(t, w.SpanContext().TraceID(), h.SpanContext().TraceID(), "wait and hold share a trace")
	assert.Equal(t, w.SpanContext().SpanID(), h.Parent().SpanID(), "the hold is the wait's child")
	assert.Equal(t, w.EndTime(), h.StartTime(), "the hold starts where the wait ends")
	assert.GreaterOrEqual(t, h.EndTime().Sub(h.StartTime()), 5*time.Millisecond, "the hold span lasts the hold")
	assert.Equal(t, "acquired", attr(w, "lock.outcome").AsString())
	assert.Equal(t, l.Key(), attr(h, "lock.key").AsString())
	assert.Equal(t, l.Owner(), attr(h, "lock.owner").AsString())
	assert.Equal(t, int64(l.Token()), attr(h, "lock.token").AsInt64())
	assert.Equal(t, "released", attr(h, "lock.outcome").AsString())
	assert.Equal(t, codes.Unset, h.Status().Code, "a clean release is no error")
	assert.Equal(t, codes.Unset, w.Status().Code)
}

// TestSkipped checks each way an acquisition fails: its outcome, its wait,
// its contention, and its wait span (an error only for a timeout or a
// failure).
func TestSkipped(t *testing.T) {
	tests := []struct {
		name      string
		lock      string // the name of the lock asked for
		outcome   string
		contended bool
		status    codes.Code
		reason    error
		// acquire runs the acquisition under test on c; h holds the lock
		// without telemetry; contended is closed when c finds the lock held.
		acquire func(ctx context.Context, h, c *lock.Client, contended <-chan struct{}) error
	}{
		{name: "held", lock: "job", outcome: "held", contended: true, reason: lock.ErrHeld,
			acquire: func(ctx context.Context, h, c *lock.Client, _ <-chan struct{}) error {
				_, err := c.Acquire(ctx, "job", lock.Options{})
				return err
			}},
		{name: "grace period", lock: "window", outcome: "grace_period", reason: lock.ErrGracePeriod,
			acquire: func(ctx context.Context, h, c *lock.Client, _ <-chan struct{}) error {
				_, err := c.Acquire(ctx, "window", lock.Options{Wait: true})
				return err
			}},
		{name: "timeout", lock: "job", outcome: "timeout", contended: true, status: codes.Error, reason: lock.ErrTimeout,
			acquire: func(ctx context.Context, h, c *lock.Client, _ <-chan struct{}) error {
				_, err := c.Acquire(ctx, "job", lock.Options{Wait: true, MaxWait: 50 * time.Millisecond})
				return err
			}},
		{name: "canceled", lock: "job", outcome: "canceled", contended: true, reason: context.DeadlineExceeded,
			acquire: func(ctx context.Context, h, c *lock.Client, _ <-chan struct{}) error {
				ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				_, err := c.Acquire(ctx, "job", lock.Options{Wait: true})
				return err
			}},
		{name: "closed", lock: "job", outcome: "closed", contended: true, reason: lock.ErrClosed,
			acquire: func(ctx context.Context, h, c *lock.Client, contended <-chan struct{}) error {
				go func() {
					<-contended
					_ = c.Close()
				}()
				_, err := c.Acquire(ctx, "job", lock.Options{Wait: true})
				return err
			}},
		{name: "cause of the caller's own", lock: "job", outcome: "error", contended: true, status: codes.Error, reason: errShutdown,
			acquire: func(ctx context.Context, h, c *lock.Client, _ <-chan struct{}) error {
				ctx, cancel := context.WithTimeoutCause(ctx, 50*time.Millisecond, errShutdown)
				defer cancel()
				_, err := c.Acquire(ctx, "job", lock.Options{Wait: true})
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			mem := lock.NewMemoryProvider()
			h := newClient(t, mem)
			held, err := h.Acquire(ctx, "job", lock.Options{})
			require.NoError(t, err)
			defer func() { _ = held.Release(ctx) }()
			window, err := h.Acquire(ctx, "window", lock.Options{GracePeriod: time.Minute})
			require.NoError(t, err)
			require.NoError(t, window.Release(ctx))

			tm := newTelemetry(t)
			contended := make(chan struct{})
			var once sync.Once
			c := newClient(t, mem, tm.events(t), lock.WithEvents(func(e lock.Event) {
				if e.Kind == lock.EventContended {
					once.Do(func() { close(contended) })
				}
			}))
			err = tt.acquire(ctx, h, c, contended)
			assert.ErrorIs(t, err, lock.ErrNotAcquired)
			assert.ErrorIs(t, err, tt.reason)

			rm := tm.collect(t)
			assert.Equal(t, map[string]int64{tt.outcome: 1}, counts(t, rm, "lock.acquisitions"))
			wait := histograms(t, rm, "lock.wait.duration")
			assert.Len(t, wait, 1, "one wait")
			assert.Equal(t, uint64(1), wait[tt.outcome].Count, "one wait, by its outcome")
			if tt.contended {
				assert.Equal(t, map[string]int64{"": 1}, counts(t, rm, "lock.contended"), "the lock was found held")
			} else {
				assert.Empty(t, counts(t, rm, "lock.contended"), "the lock was not held, but closed")
			}
			if tt.outcome == "timeout" {
				assert.GreaterOrEqual(t, wait["timeout"].Sum, 0.05, "the wait lasted MaxWait")
			}
			assert.Empty(t, counts(t, rm, "lock.releases"))
			assert.Empty(t, histograms(t, rm, "lock.hold.duration"), "nothing held")

			assert.Empty(t, tm.ended("lock.hold"), "nothing held")
			waits := tm.ended("lock.wait")
			require.Len(t, waits, 1, "one wait span")
			w := waits[0]
			assert.Equal(t, tt.outcome, attr(w, "lock.outcome").AsString())
			assert.Equal(t, h.Key(tt.lock), attr(w, "lock.key").AsString())
			assert.Equal(t, tt.status, w.Status().Code)
			require.Len(t, w.Events(), 1, "the error, as an event")
			assert.Equal(t, "exception", w.Events()[0].Name)
			assert.Equal(t, w.EndTime(), w.Events()[0].Time, "the error at the end of the wait")
		})
	}
}

var errShutdown = errors.New("shutting down")

// TestLost checks a lock whose record is deleted behind its holder's back:
// the renewal finds it gone, and the loss is counted, with its hold, and ends
// the hold span with an error.
func TestLost(t *testing.T) {
	ctx := context.Background()
	mem := lock.NewMemoryProvider()
	tm := newTelemetry(t)
	c := newClient(t, mem, tm.events(t))

	// 600ms: the grant must come back before the lease ends (with 30ms a slow
	// reply on a loaded machine returned the loss instead of the lock); the
	// renewal after 200ms finds the record gone.
	l, err := c.Acquire(ctx, "job", lock.Options{Lease: 600 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, mem.Release(ctx, l.Key(), l.Owner()))
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal did not notice the record was gone")
	}

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"acquired": 1}, counts(t, rm, "lock.acquisitions"))
	assert.Equal(t, map[string]int64{"": 1}, counts(t, rm, "lock.losses"))
	assert.Empty(t, counts(t, rm, "lock.releases"), "lost, not released")
	hold := histograms(t, rm, "lock.hold.duration")
	assert.Len(t, hold, 1)
	assert.Equal(t, uint64(1), hold["lost"].Count, "one hold, lost")

	holds := tm.ended("lock.hold")
	require.Len(t, holds, 1, "the loss ended the hold span")
	h := holds[0]
	assert.Equal(t, "lost", attr(h, "lock.outcome").AsString())
	assert.Equal(t, codes.Error, h.Status().Code, "a loss is an error")
	require.Len(t, h.Events(), 1)
	assert.Equal(t, "exception", h.Events()[0].Name)

	assert.ErrorIs(t, l.Release(ctx), lock.ErrLost)
	rm = tm.collect(t)
	assert.Zero(t, counts(t, rm, "lock.renewals")["error"], "the renewal that found the lock lost is no failed renewal")
	assert.Empty(t, counts(t, rm, "lock.releases"), "releasing a lost lock is no release")
	assert.Equal(t, map[string]int64{"": 1}, counts(t, rm, "lock.losses"), "a loss is counted once")
	assert.Len(t, tm.ended("lock.hold"), 1)
}

// TestRenewals counts renewals by outcome: renewed, and error for a renewal
// that the provider failed (tried again).
func TestRenewals(t *testing.T) {
	ctx := context.Background()
	p := &failingUpdate{Provider: lock.NewMemoryProvider()}
	tm := newTelemetry(t)
	c := newClient(t, p, tm.events(t))
	// Renewed every 300ms; a renewal may run up to 600ms late before the lock
	// is lost (with 60ms, a 40ms late timer lost it before fail was set, and
	// then no renewal ever failed). The failed renewal comes within 300ms of
	// fail, long before the lease runs out, and is still counted as an error.
	l, err := c.Acquire(ctx, "job", lock.Options{Lease: 900 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return counts(t, tm.collect(t), "lock.renewals")["renewed"] >= 2
	}, 10*time.Second, 10*time.Millisecond, "renewals every third of a lease are counted")
	p.fail.Store(true)
	require.Eventually(t, func() bool {
		return counts(t, tm.collect(t), "lock.renewals")["error"] >= 1
	}, 10*time.Second, 5*time.Millisecond, "a failed renewal is counted as an error")
	p.fail.Store(false)
	_ = l.Release(ctx) // may have been lost meanwhile on a slow machine
}

// failingUpdate is a provider whose renewals fail while fail is set.
type failingUpdate struct {
	lock.Provider
	fail atomic.Bool
}

func (p *failingUpdate) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.fail.Load() {
		return errors.New("connection refused")
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
}

// failingRelease is a provider whose Release fails.
type failingRelease struct{ lock.Provider }

func (failingRelease) Release(context.Context, string, string) error {
	return errors.New("connection refused")
}

// TestReleaseFails checks a release that the provider failed: counted as a
// release with the error outcome, and its hold span marked as an error.
func TestReleaseFails(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	c := newClient(t, failingRelease{lock.NewMemoryProvider()}, tm.events(t))
	l, err := c.Acquire(ctx, "job", lock.Options{})
	require.NoError(t, err)
	require.Error(t, l.Release(ctx))

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"error": 1}, counts(t, rm, "lock.releases"))
	assert.Empty(t, counts(t, rm, "lock.losses"))
	assert.Equal(t, uint64(1), histograms(t, rm, "lock.hold.duration")["error"].Count)
	holds := tm.ended("lock.hold")
	require.Len(t, holds, 1)
	assert.Equal(t, codes.Error, holds[0].Status().Code)
	assert.Equal(t, "error", attr(holds[0], "lock.outcome").AsString())
}

// TestKeyAttribute checks that WithKeyAttribute puts the key on every metric.
func TestKeyAttribute(t *testing.T) {
	ctx := context.Background()
	mem := lock.NewMemoryProvider()
	tm := newTelemetry(t, lockotel.WithKeyAttribute())
	c := newClient(t, mem, tm.events(t))
	for _, name := range []string{"a", "b"} {
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = c.Acquire(ctx, name, lock.Options{})
		require.ErrorIs(t, err, lock.ErrHeld)
		require.NoError(t, l.Release(ctx))
	}

	rm := tm.collect(t)
	want := map[string]int64{}
	for _, name := range []string{"a", "b"} {
		want[c.Key(name)+" acquired"] = 1
		want[c.Key(name)+" held"] = 1
	}
	assert.Equal(t, want, keyedCounts(t, rm, "lock.acquisitions"))
	assert.Equal(t, map[string]int64{c.Key("a") + " ": 1, c.Key("b") + " ": 1}, keyedCounts(t, rm, "lock.contended"))
	assert.Equal(t, map[string]int64{c.Key("a") + " released": 1, c.Key("b") + " released": 1}, keyedCounts(t, rm, "lock.releases"))
}

// TestGlobalProviders checks that Events without options records with the
// global providers.
func TestGlobalProviders(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	otel.SetMeterProvider(tm.meters)
	otel.SetTracerProvider(tm.tracers)
	t.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	events, err := lockotel.Events()
	require.NoError(t, err)
	c := newClient(t, lock.NewMemoryProvider(), events)
	require.NoError(t, c.Do(ctx, "job", lock.Options{}, func(context.Context) error { return nil }))

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"acquired": 1}, counts(t, rm, "lock.acquisitions"))
	assert.Len(t, tm.ended("lock.hold"), 1)
}

// TestConcurrent checks that the hook keeps count when many goroutines
// acquire and release at once: every hold is recorded and every hold span
// ended, each in the trace of its own wait.
func TestConcurrent(t *testing.T) {
	const workers, runs = 8, 20
	ctx := context.Background()
	tm := newTelemetry(t)
	c := newClient(t, lock.NewMemoryProvider(), tm.events(t))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range runs {
				err := c.Do(ctx, "shared", lock.Options{Wait: true}, func(context.Context) error { return nil })
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"acquired": workers * runs}, counts(t, rm, "lock.acquisitions"))
	assert.Equal(t, map[string]int64{"released": workers * runs}, counts(t, rm, "lock.releases"))
	assert.Equal(t, uint64(workers*runs), histograms(t, rm, "lock.hold.duration")["released"].Count)
	assert.LessOrEqual(t, counts(t, rm, "lock.contended")[""], int64(workers*runs), "at most one contention per acquisition")

	waits := map[string]bool{}
	for _, w := range tm.ended("lock.wait") {
		waits[w.SpanContext().SpanID().String()] = true
	}
	holds := tm.ended("lock.hold")
	assert.Len(t, waits, workers*runs)
	assert.Len(t, holds, workers*runs, "every hold span ended")
	for _, h := range holds {
		assert.True(t, waits[h.Parent().SpanID().String()], "a hold's parent is a wait")
	}
}

// telemetry is an SDK meter provider read by hand and an SDK tracer provider
// that keeps the ended spans.
type telemetry struct {
	reader  *sdkmetric.ManualReader
	meters  *sdkmetric.MeterProvider
	spans   *tracetest.SpanRecorder
	tracers *sdktrace.TracerProvider
	opts    []lockotel.Option
}

func newTelemetry(t *testing.T, opts ...lockotel.Option) *telemetry {
	t.Helper()
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tm.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.tracers = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	tm.opts = append([]lockotel.Option{lockotel.WithMeterProvider(tm.meters), lockotel.WithTracerProvider(tm.tracers)}, opts...)
	t.Cleanup(func() {
		_ = tm.meters.Shutdown(context.Background())
		_ = tm.tracers.Shutdown(context.Background())
	})
	return tm
}

// events returns the lock.ClientOption that records to tm.
func (tm *telemetry) events(t *testing.T) lock.ClientOption {
	t.Helper()
	o, err := lockotel.Events(tm.opts...)
	require.NoError(t, err)
	return o
}

func (tm *telemetry) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	return rm
}

// ended returns the ended spans called name.
func (tm *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// newClient returns a Client on p that polls every 10ms (unless opts say
// otherwise), closed at the end of the test (internal/testenv's NewClient).
func newClient(t *testing.T, p lock.Provider, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	return testenv.NewClient(t, p, append([]lock.ClientOption{lock.WithPollInterval(10 * time.Millisecond)}, opts...)...)
}

// find returns the metric called name, and whether it was recorded.
func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// counts returns the values of counter name by outcome ("" for none).
func counts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, ok := find(rm, name)
	if !ok {
		return out
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is an int64 sum, not %T", name, m.Data)
	assert.True(t, sum.IsMonotonic, "%s is a counter", name)
	for _, p := range sum.DataPoints {
		out[outcomeOf(p.Attributes)] += p.Value
	}
	return out
}

// keyedCounts returns the values of counter name by "key outcome".
func keyedCounts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, ok := find(rm, name)
	require.True(t, ok, "%s recorded", name)
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		key, _ := p.Attributes.Value("lock.key")
		out[fmt.Sprintf("%s %s", key.AsString(), outcomeOf(p.Attributes))] += p.Value
	}
	return out
}

// histograms returns the data points of histogram name by outcome.
func histograms(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	m, ok := find(rm, name)
	if !ok {
		return out
	}
	assert.Equal(t, "s", m.Unit, "%s is in seconds", name)
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a float64 histogram, not %T", name, m.Data)
	for _, p := range h.DataPoints {
		out[outcomeOf(p.Attributes)] = p
	}
	return out
}

func outcomeOf(s attribute.Set) string {
	v, _ := s.Value("lock.outcome")
	return v.AsString()
}

// hasKey reports whether a data point of any metric carries lock.key.
func hasKey(rm metricdata.ResourceMetrics) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.HasValue("lock.key") {
						return true
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.HasValue("lock.key") {
						return true
					}
				}
			}
		}
	}
	return false
}

// attr returns the value of span attribute key.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestParts checks lock.part on the metrics and spans of the holds of a
// Semaphore and an RWMutex: a permit, a reader, a writer, each one claim
// under the name's own key, and nothing else (no gate); an election's role
// (issue 31, item 7); a plain lock has none. With the key attribute or
// without.
func TestParts(t *testing.T) {
	for name, opts := range map[string][]lockotel.Option{"without key": nil, "with key": {lockotel.WithKeyAttribute()}} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			tm := newTelemetry(t, opts...)
			c := newClient(t, lock.NewMemoryProvider(), tm.events(t))
			want := map[string]string{} // the part of each hold, by owner
			sem, err := c.Semaphore("pool", 2)
			require.NoError(t, err)
			permit, err := sem.Acquire(ctx, 1, lock.Options{})
			require.NoError(t, err)
			rw, err := c.RWMutex("doc", 4)
			require.NoError(t, err)
			reader, err := rw.RLock(ctx, lock.Options{})
			require.NoError(t, err)
			require.Len(t, permit.Locks(), 1)
			want[permit.Locks()[0].Owner()] = "permit"
			require.NoError(t, permit.Release(ctx))
			require.Len(t, reader.Locks(), 1)
			want[reader.Locks()[0].Owner()] = "reader"
			require.NoError(t, reader.Release(ctx))
			writer, err := rw.Lock(ctx, lock.Options{})
			require.NoError(t, err)
			require.Len(t, writer.Locks(), 1)
			want[writer.Locks()[0].Owner()] = "writer"
			require.NoError(t, writer.Release(ctx))
			plain, err := c.Acquire(ctx, "job", lock.Options{})
			require.NoError(t, err)
			want[plain.Owner()] = ""
			require.NoError(t, plain.Release(ctx))
			term, err := c.Campaign(ctx, "scheduler", lock.ElectionOptions{})
			require.NoError(t, err)
			want[term.Owner()] = "role"
			require.NoError(t, term.Resign(ctx))

			rm := tm.collect(t)
			// One acquisition and one release per hold: no gate.
			assert.Equal(t, map[string]int64{"permit acquired": 1, "reader acquired": 1, "writer acquired": 1, "role acquired": 1, "none acquired": 1},
				partCounts(t, rm, "lock.acquisitions"))
			assert.Equal(t, map[string]int64{"permit acquired": 1, "reader acquired": 1, "writer acquired": 1, "role acquired": 1, "none acquired": 1},
				partCounts(t, rm, "lock.wait.duration"))
			assert.Equal(t, map[string]int64{"permit released": 1, "reader released": 1, "writer released": 1, "role released": 1, "none released": 1},
				partCounts(t, rm, "lock.releases"))
			assert.Equal(t, map[string]int64{"permit released": 1, "reader released": 1, "writer released": 1, "role released": 1, "none released": 1},
				partCounts(t, rm, "lock.hold.duration"))

			keys := map[string]string{"permit": c.Key("pool"), "reader": c.Key("doc"), "writer": c.Key("doc")} // a hold's key is its name's
			spans := tm.spans.Ended()
			assert.Len(t, spans, 2*5, "a wait and a hold for each hold")
			for _, s := range spans {
				key, owner := attr(s, "lock.key").AsString(), attr(s, "lock.owner").AsString()
				part, ok := want[owner]
				if !assert.True(t, ok, "%s of %s: a span of a hold taken here", s.Name(), key) {
					continue
				}
				if k, ok := keys[part]; ok {
					assert.Equal(t, k, key, "%s of a %s: the key of its name", s.Name(), part)
				}
				got := attr(s, "lock.part")
				if part == "" {
					assert.Equal(t, attribute.EMPTY, got.Type(), "%s of %s: no lock.part on a plain lock", s.Name(), key)
				} else {
					assert.Equal(t, part, got.AsString(), "%s of %s: lock.part", s.Name(), key)
				}
			}
		})
	}
}

// partCounts returns the values of counter name, or the counts of
// histogram name, by "part outcome": part "none" for no lock.part.
func partCounts(t *testing.T, rm metricdata.ResourceMetrics, name string) map[string]int64 {
	t.Helper()
	m, ok := find(rm, name)
	require.True(t, ok, "%s recorded", name)
	out := map[string]int64{}
	add := func(s attribute.Set, n int64) {
		part := "none"
		if v, ok := s.Value("lock.part"); ok {
			part = v.AsString()
		}
		out[part+" "+outcomeOf(s)] += n
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, p.Value)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, int64(p.Count))
		}
	}
	return out
}
