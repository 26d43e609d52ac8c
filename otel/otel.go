// Package lockotel records the locks of github.com/seed05627090/lock as
// OpenTelemetry metrics and traces: acquisitions by outcome, contention, wait
// and hold times, releases and losses, and a span for each wait and each hold.
// It listens to the Client's events (lock.WithEvents), so it sees every lock
// the Client takes, through every API.
//
//	events, err := lockotel.Events() // the global MeterProvider and TracerProvider
//	if err != nil {
//		return err
//	}
//	c, err := lock.NewClient(provider, events)
//
// It is a module of its own, so that the lock module requires no telemetry
// library.
package lockotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed05627090/lock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/seed05627090/lock/otel"

// Option configures Events.
type Option func(*config)

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	keys    bool
}

// WithMeterProvider records the metrics with mp. The default, and what nil
// means, is otel.GetMeterProvider() when Events is called: the global
// provider, which passes them on to the one set later with
// otel.SetMeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	}
}

// WithTracerProvider records the spans with tp. The default, and what nil
// means, is otel.GetTracerProvider() when Events is called (global, as for
// WithMeterProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tracers = tp
		}
	}
}

// WithKeyAttribute adds the lock's key (attribute lock.key) to every metric.
// It is off by default: a key often names a user, an order or a tick of a
// schedule, and a metric keeps one series per distinct key for as long as
// the process lives, which a metrics backend bills and may refuse. Turn it
// on only for a small, fixed set of lock names. Spans carry the key always.
func WithKeyAttribute() Option {
	return func(c *config) { c.keys = true }
}

// Events returns the option of lock.NewClient that records the Client's
// locks. It fails only when the meter refuses to create an instrument; the
// option is then nil. The option may be given to several Clients.
//
// Metrics (attribute lock.outcome where said; lock.part on the holds of a
// Semaphore or an RWMutex and on an election's role; lock.key with
// WithKeyAttribute):
//
//   - lock.acquisitions, counter: acquisitions that ended, by outcome:
//     acquired, held, grace_period, timeout, canceled, closed, error;
//   - lock.contended, counter: acquisitions that found the lock held;
//   - lock.wait.duration, histogram in seconds: how long acquisitions took
//     (lock.Event.Waited), by outcome;
//   - lock.hold.duration, histogram in seconds: how long locks were held
//     (lock.Event.Held), by outcome: released, lost, error;
//   - lock.releases, counter: releases, by outcome: released, error;
//   - lock.losses, counter: locks lost before their release;
//   - lock.renewals, counter: lease renewals, by outcome: renewed, error.
//
// The attribute lock.part says what a hold is, as lock.PartOf does: a
// Semaphore's permits (permit), an RWMutex's reader or writer (reader,
// writer), an election's role (role). A plain lock has none. It holds the
// kind alone (not the Semaphore's name nor its size), so that a metric has
// at most five times the series it would have without it.
//
// Spans: each acquisition's "lock.wait", the root of a trace of its own,
// and a granted lock's "lock.hold", its child, from the grant to the
// release or loss, with lock.part as the metrics have it. They are built
// from the events' timestamps, and are not children of the caller's span:
// events carry no context.
//
// The hook does no I/O and does not wait: it records measurements and
// starts and ends spans on the goroutine that caused the event, and keeps
// the hold span of each held lock until its release or loss.
func Events(opts ...Option) (lock.ClientOption, error) {
	cfg := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := newMetrics(cfg.meters.Meter(ScopeName), cfg.keys)
	if err != nil {
		return nil, err
	}
	s := &spans{tracer: cfg.tracers.Tracer(ScopeName)}
	return lock.WithEvents(func(e lock.Event) {
		part, _, _ := lock.PartOf(e.Key, e.Owner)
		m.record(e, part)
		s.record(e, part)
	}), nil
}
