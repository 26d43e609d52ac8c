// Command example takes a few locks on the memory provider with lockotel's
// hook, and prints the metrics and spans that they recorded: a lock taken and
// released, two workers that queue for one lock, a job refused while another
// replica runs it and during its grace period, a wait that times out, and a
// lock lost behind its holder's back.
//
//	cd otel && go run ./example
//
// A service would give the SDK providers a periodic reader and a batch span
// processor with an exporter (OTLP, Prometheus); here a ManualReader and a
// SpanRecorder keep what was recorded so that it can be printed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seed05627090/lock"
	lockotel "github.com/seed05627090/lock/otel"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = meters.Shutdown(ctx); _ = tracers.Shutdown(ctx) }()

	events, err := lockotel.Events(lockotel.WithMeterProvider(meters), lockotel.WithTracerProvider(tracers))
	if err != nil {
		return err
	}
	mem := lock.NewMemoryProvider()
	c, err := lock.NewClient(mem, events)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := takeLocks(ctx, c, mem); err != nil {
		return err
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	fmt.Println("metrics:")
	for _, line := range metricLines(rm) {
		fmt.Println("  " + line)
	}
	fmt.Println("spans:")
	for _, line := range spanLines(spans.Ended()) {
		fmt.Println("  " + line)
	}
	return nil
}

// takeLocks takes the locks whose metrics are printed.
func takeLocks(ctx context.Context, c *lock.Client, mem lock.Provider) error {
	// A lock taken and released.
	if err := c.Do(ctx, "nightly-report", lock.Options{}, func(context.Context) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}); err != nil {
		return err
	}

	// Two workers queue for one lock: the second waits for the first.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			errs[i] = c.Do(ctx, "migration", lock.Options{Wait: true}, func(context.Context) error {
				time.Sleep(30 * time.Millisecond)
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}

	// A job at most once a minute: refused while it runs (held), after it
	// (grace period), and to a waiter whose MaxWait runs out.
	job, err := c.Acquire(ctx, "hourly-sync", lock.Options{GracePeriod: time.Minute})
	if err != nil {
		return err
	}
	_, held := c.Acquire(ctx, "hourly-sync", lock.Options{})
	_, timeout := c.Acquire(ctx, "hourly-sync", lock.Options{Wait: true, MaxWait: 20 * time.Millisecond})
	if err := job.Release(ctx); err != nil {
		return err
	}
	_, grace := c.Acquire(ctx, "hourly-sync", lock.Options{})
	for _, err := range []error{held, timeout, grace} {
		if err == nil {
			return fmt.Errorf("hourly-sync was acquired twice")
		}
	}

	// A lock whose record is deleted behind its holder's back: the renewal
	// finds it gone.
	l, err := c.Acquire(ctx, "cache-rebuild", lock.Options{Lease: 30 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := mem.Release(ctx, l.Key(), l.Owner()); err != nil {
		return err
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the loss of %s went unnoticed", l.Key())
	}
	_ = l.Release(ctx) // a *lock.LostError
	return nil
}

// metricLines prints each data point on a line: a counter's value, a
// histogram's count and sum.
func metricLines(rm metricdata.ResourceMetrics) []string {
	enc := attribute.DefaultEncoder()
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, p.Attributes.Encoded(enc), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%.3f%s",
						m.Name, p.Attributes.Encoded(enc), p.Count, p.Sum, m.Unit))
				}
			}
		}
	}
	slices.Sort(lines)
	return lines
}

// spanLines prints each span on a line, in the order they began, a hold
// indented under its wait.
func spanLines(spans []sdktrace.ReadOnlySpan) []string {
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var lines []string
	for _, s := range spans {
		var key, outcome string
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "lock.key":
				key = kv.Value.AsString()
			case "lock.outcome":
				outcome = kv.Value.AsString()
			}
		}
		indent := ""
		if s.Parent().IsValid() {
			indent = "  "
		}
		status := ""
		if s.Status().Code == codes.Error {
			status = " (error: " + s.Status().Description + ")"
		}
		d := s.EndTime().Sub(s.StartTime()).Round(time.Millisecond)
		lines = append(lines, fmt.Sprintf("%s%-9s %-20s %-12s %v%s", indent, s.Name(), key, outcome, d, status))
	}
	return lines
}
