package lockotel

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed05627090/lock"
)

// spans makes the spans of the locks from their events. Events come without
// a context, after the fact, so each span is made from the event's times:
// an acquisition's "lock.wait" span, the root of a trace of its own, covers
// [Time-Waited, Time] of its Acquired or Skipped event; a granted lock's
// "lock.hold" span, a child of that wait, starts at the Acquired event and
// ends at the Released or Lost event of the same owner.
type spans struct {
	tracer trace.Tracer
	holds  sync.Map // owner -> the trace.Span of its hold, until it ends
}

// record adds event e to the spans; part is what its lock is part of
// (lock.PartOf), "" for a plain lock.
func (s *spans) record(e lock.Event, part string) {
	switch e.Kind {
	case lock.EventAcquired:
		ctx := s.wait(e, part)
		_, hold := s.tracer.Start(ctx, "lock.hold", trace.WithTimestamp(e.Time), trace.WithAttributes(
			withPart(part, keyAttr.String(e.Key), ownerAttr.String(e.Owner), tokenAttr.Int64(int64(e.Token)))...))
		if hold.IsRecording() { // a span not sampled needs no end
			s.holds.Store(e.Owner, hold)
		}
	case lock.EventSkipped:
		s.wait(e, part)
	case lock.EventReleased, lock.EventLost:
		v, ok := s.holds.LoadAndDelete(e.Owner)
		if !ok {
			return
		}
		hold := v.(trace.Span)
		hold.SetAttributes(outcomeAttr.String(holdOutcome(e)))
		if e.Err != nil { // lost, or the release failed
			hold.RecordError(e.Err, trace.WithTimestamp(e.Time))
			hold.SetStatus(codes.Error, e.Err.Error())
		}
		hold.End(trace.WithTimestamp(e.Time))
	}
}

// wait records the "lock.wait" span of an Acquired or Skipped event and
// returns a context that holds it. A lock not acquired because it was held
// or in its grace period is how a lock that runs a job once works, and a
// wait that its caller or Close ended is no fault of the lock: their spans
// carry the error as an event, but only a timeout or a failure marks the
// span as an error.
func (s *spans) wait(e lock.Event, part string) context.Context {
	outcome := acquisitionOutcome(e)
	ctx, span := s.tracer.Start(context.Background(), "lock.wait",
		trace.WithTimestamp(e.Time.Add(-e.Waited)),
		trace.WithAttributes(withPart(part, keyAttr.String(e.Key), ownerAttr.String(e.Owner), outcomeAttr.String(outcome))...))
	if e.Err != nil {
		span.RecordError(e.Err, trace.WithTimestamp(e.Time))
		if outcome == outcomeTimeout || outcome == outcomeError {
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(e.Time))
	return ctx
}

// withPart returns kv and lock.part, when part is not empty.
func withPart(part string, kv ...attribute.KeyValue) []attribute.KeyValue {
	if part != "" {
		kv = append(kv, partAttr.String(part))
	}
	return kv
}
