package lockotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/seed05627090/lock"
	lockotel "github.com/seed05627090/lock/otel"
)

// A lock taken, one refused while it is held, and the metrics they recorded.
func ExampleEvents() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader() // in a service: a periodic reader and an exporter
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	events, err := lockotel.Events(lockotel.WithMeterProvider(meters), lockotel.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		panic(err)
	}
	c, err := lock.NewClient(lock.NewMemoryProvider(), events)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	_, err = c.Acquire(ctx, "report", lock.Options{})
	fmt.Println("second acquisition held:", errors.Is(err, lock.ErrHeld))
	if err := l.Release(ctx); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	enc := attribute.DefaultEncoder() // "lock.outcome=acquired"
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count %d", m.Name, p.Attributes.Encoded(enc), p.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// second acquisition held: true
	// lock.acquisitions{lock.outcome=acquired} 1
	// lock.acquisitions{lock.outcome=held} 1
	// lock.contended{} 1
	// lock.hold.duration{lock.outcome=released} count 1
	// lock.releases{lock.outcome=released} 1
	// lock.wait.duration{lock.outcome=acquired} count 1
	// lock.wait.duration{lock.outcome=held} count 1
}
