package lockotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/seed05627090/lock"
)

// The attributes of the metrics and spans.
const (
	keyAttr     = attribute.Key("lock.key")
	outcomeAttr = attribute.Key("lock.outcome")
	ownerAttr   = attribute.Key("lock.owner")
	partAttr    = attribute.Key("lock.part")
	tokenAttr   = attribute.Key("lock.token")
)

// The outcomes of an acquisition (lock.acquisitions, lock.wait.duration)...
const (
	outcomeAcquired    = "acquired"
	outcomeHeld        = "held"
	outcomeGracePeriod = "grace_period"
	outcomeTimeout     = "timeout"
	outcomeCanceled    = "canceled"
	outcomeClosed      = "closed"
	outcomeError       = "error" // also the release that failed
	// ...and of a hold (lock.hold.duration, lock.releases).
	outcomeReleased = "released"
	outcomeLost     = "lost"
	// ...and of a renewal (lock.renewals).
	outcomeRenewed = "renewed"
)

// parts are the values of lock.part that lock.PartOf returns, and "" for a
// plain lock (no lock.part).
var parts = []string{"", "permit", "reader", "writer", "role"}

// outcomes are the values of lock.outcome, and "" for none.
var outcomes = []string{"", outcomeAcquired, outcomeHeld, outcomeGracePeriod, outcomeTimeout,
	outcomeCanceled, outcomeClosed, outcomeError, outcomeReleased, outcomeLost, outcomeRenewed}

// durationBuckets are the histograms' bounds in seconds: from an uncontended
// acquisition (well under a millisecond in memory, about one on a network)
// to a nightly job's hold (DefaultMaxDuration is an hour).
var durationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
}

// metrics are the instruments, and the attribute sets of every part and
// outcome, made once, for when the key is left out.
type metrics struct {
	acquisitions metric.Int64Counter
	contended    metric.Int64Counter
	releases     metric.Int64Counter
	losses       metric.Int64Counter
	renewals     metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram

	keys bool
	sets map[partOutcome]metric.MeasurementOption
}

// partOutcome are the attributes of a measurement but the key; "" for none.
type partOutcome struct{ part, outcome string }

func newMetrics(m metric.Meter, keys bool) (*metrics, error) {
	var errs [7]error
	ms := &metrics{keys: keys, sets: map[partOutcome]metric.MeasurementOption{}}
	ms.acquisitions, errs[0] = m.Int64Counter("lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions that ended, by outcome (lock.outcome): acquired, held, grace_period, timeout, canceled, closed, error."))
	ms.contended, errs[1] = m.Int64Counter("lock.contended", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisitions that found the lock held by another owner (whatever their outcome)."))
	ms.releases, errs[2] = m.Int64Counter("lock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Releases of held locks, by outcome (lock.outcome): released, error (the provider failed; the record expires with its lease)."))
	ms.losses, errs[3] = m.Int64Counter("lock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Held locks lost before their release: lease ran out, renewal failed, MaxDuration reached, record gone or taken."))
	ms.wait, errs[4] = m.Float64Histogram("lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long acquisitions took, from the call to the grant or the giving up, by outcome (lock.outcome)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	ms.hold, errs[5] = m.Float64Histogram("lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, until their release or loss, by outcome (lock.outcome): released, lost, error."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	ms.renewals, errs[6] = m.Int64Counter("lock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of held locks' leases (by the renewal timer or Extend), by outcome (lock.outcome): renewed, error (the provider failed; tried again within a tenth of a lease)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for _, p := range parts {
		for _, o := range outcomes {
			ms.sets[partOutcome{p, o}] = metric.WithAttributeSet(attribute.NewSet(attributes(p, o)...))
		}
	}
	return ms, nil
}

// record adds event e to the metrics; part is what its lock is part of
// (lock.PartOf), "" for a plain lock.
func (m *metrics) record(e lock.Event, part string) {
	ctx := context.Background() // events carry no context
	switch e.Kind {
	case lock.EventContended:
		m.contended.Add(ctx, 1, m.attrs(e, part, ""))
	case lock.EventAcquired, lock.EventSkipped:
		attrs := m.attrs(e, part, acquisitionOutcome(e))
		m.acquisitions.Add(ctx, 1, attrs)
		m.wait.Record(ctx, e.Waited.Seconds(), attrs)
	case lock.EventReleased, lock.EventLost:
		outcome := holdOutcome(e)
		m.hold.Record(ctx, e.Held.Seconds(), m.attrs(e, part, outcome))
		if outcome == outcomeLost {
			m.losses.Add(ctx, 1, m.attrs(e, part, ""))
		} else {
			m.releases.Add(ctx, 1, m.attrs(e, part, outcome))
		}
	case lock.EventRenewed:
		outcome := outcomeRenewed
		if e.Err != nil {
			outcome = outcomeError
		}
		m.renewals.Add(ctx, 1, m.attrs(e, part, outcome))
	}
}

// attrs returns the attributes of a measurement of e: its part and its
// outcome, if any, and its key when asked for.
func (m *metrics) attrs(e lock.Event, part, outcome string) metric.MeasurementOption {
	set, ok := m.sets[partOutcome{part, outcome}]
	if ok && !m.keys {
		return set
	}
	kv := attributes(part, outcome)
	if m.keys {
		kv = append(kv, keyAttr.String(e.Key))
	}
	return metric.WithAttributes(kv...)
}

// attributes returns lock.part and lock.outcome, each when it is not empty.
func attributes(part, outcome string) []attribute.KeyValue {
	var kv []attribute.KeyValue
	if part != "" {
		kv = append(kv, partAttr.String(part))
	}
	if outcome != "" {
		kv = append(kv, outcomeAttr.String(outcome))
	}
	return kv
}

// acquisitionOutcome says how the acquisition of an Acquired or Skipped
// event ended. A Skipped event's error is a *lock.NotAcquiredError whose
// reason tells the outcome; a context cancelled with a cause of the caller's
// own cannot be told from a failure, and counts as an error.
func acquisitionOutcome(e lock.Event) string {
	if e.Kind == lock.EventAcquired {
		return outcomeAcquired
	}
	switch err := e.Err; {
	case errors.Is(err, lock.ErrClosed):
		return outcomeClosed
	case errors.Is(err, lock.ErrTimeout):
		return outcomeTimeout
	case errors.Is(err, lock.ErrGracePeriod):
		return outcomeGracePeriod
	case errors.Is(err, lock.ErrHeld):
		return outcomeHeld
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	}
	return outcomeError
}

// holdOutcome says how the hold of a Released or Lost event ended.
func holdOutcome(e lock.Event) string {
	switch {
	case e.Kind == lock.EventLost:
		return outcomeLost
	case e.Err != nil:
		return outcomeError
	}
	return outcomeReleased
}
