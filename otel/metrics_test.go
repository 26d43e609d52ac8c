package lockotel

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/seed05627090/lock"
)

// holds are the events of a hold acquired and released: a plain lock, a
// Semaphore's permits, an RWMutex's reader (a hold of a Semaphore or an
// RWMutex is a claim under the name's own key).
var holds = []struct {
	name   string
	events []lock.Event
}{
	{"plain", held("{job}", "host/0123456789abcdef")},
	{"permit", held("{pool}", "host/0123456789abcdef~n4")},
	{"reader", held("{doc}", "host/0123456789abcdef~r16")},
}

func held(key, owner string) []lock.Event {
	return []lock.Event{
		{Kind: lock.EventAcquired, Key: key, Owner: owner, Waited: time.Millisecond},
		{Kind: lock.EventReleased, Key: key, Owner: owner, Held: time.Millisecond},
	}
}

func newTestMetrics(tb testing.TB) *metrics {
	tb.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := newMetrics(mp.Meter(ScopeName), false)
	require.NoError(tb, err)
	return m
}

// recordAll records events as the hook does, lock.PartOf included.
func (m *metrics) recordAll(events []lock.Event) {
	for _, e := range events {
		part, _, _ := lock.PartOf(e.Key, e.Owner)
		m.record(e, part)
	}
}

// TestRecordAllocations checks that the metrics of a hold, of a plain lock
// or of a Semaphore or an RWMutex, allocate no more than the SDK
// does for the same four measurements with an attribute set made
// beforehand: lock.PartOf and the sets by part and outcome add nothing.
func TestRecordAllocations(t *testing.T) {
	ctx := context.Background()
	m := newTestMetrics(t)
	set := metric.WithAttributeSet(attribute.NewSet(outcomeAttr.String(outcomeAcquired)))
	sdk := testing.AllocsPerRun(1000, func() {
		m.acquisitions.Add(ctx, 1, set)
		m.wait.Record(ctx, 0.001, set)
		m.hold.Record(ctx, 0.001, set)
		m.releases.Add(ctx, 1, set)
	})
	for _, h := range holds {
		if part, _, _ := lock.PartOf(h.events[0].Key, h.events[0].Owner); h.name != "plain" {
			require.Equal(t, h.name, part, "the part of the %s hold", h.name)
		}
		got := testing.AllocsPerRun(1000, func() { m.recordAll(h.events) })
		assert.Equal(t, sdk, got, "allocations of a %s lock's hold, as many as the SDK's own", h.name)
	}
}

// BenchmarkRecord measures the metrics of a hold (four measurements).
func BenchmarkRecord(b *testing.B) {
	for _, h := range holds {
		b.Run(h.name, func(b *testing.B) {
			m := newTestMetrics(b)
			b.ReportAllocs()
			for b.Loop() {
				m.recordAll(h.events)
			}
		})
	}
}
