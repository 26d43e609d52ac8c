package lock

import "time"

// EventKind names what happened to a lock.
type EventKind int

// The events of a lock's life. Every acquisition that reaches the provider
// emits Acquired or Skipped (the latter possibly after Contended); every
// Acquired is followed by exactly one Released or Lost.
const (
	// EventAcquired: the lock was granted. Token, MaxDuration and Lease are set.
	EventAcquired EventKind = iota + 1
	// EventContended: the lock was held by another owner at the first attempt.
	EventContended
	// EventSkipped: the acquisition gave up; Err is the *NotAcquiredError,
	// or the provider's error when it failed.
	EventSkipped
	// EventReleased: the holder released the lock; Err is set when the release
	// failed (the record then expires within its lease). Held is how long it
	// was held; GracePeriod is set when the lock stays closed for one.
	EventReleased
	// EventLost: the lock stopped being held before a clean release (lease
	// expired, renewal failed, MaxDuration reached, record gone or taken). Err
	// is the *LostError, whose Reason says which. Held is how long it was
	// held until then.
	EventLost
	// EventForceReleased: this Client's ForceRelease freed a lock that Owner
	// held, with Token (see [Client.ForceRelease]). The holder, in whatever
	// process, emits Lost when it finds out.
	EventForceReleased
	// EventRenewed: a renewal (the lease's, or Extend) ended. Lease is the
	// TTL it asked for and Held how long the lock was held then. Err is set
	// when it failed for a reason that leaves the lock held for now (the
	// provider's error): the renewal timer tries again within a tenth of a
	// lease. A renewal that finds the lock lost emits Lost instead.
	EventRenewed
)

func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventContended:
		return "contended"
	case EventSkipped:
		return "skipped"
	case EventReleased:
		return "released"
	case EventLost:
		return "lost"
	case EventForceReleased:
		return "force-released"
	case EventRenewed:
		return "renewed"
	}
	return "unknown"
}

// Event is delivered to the hooks set with [WithEvents].
type Event struct {
	Kind EventKind
	// Key is the full key (prefix and name).
	Key string
	// Owner is the id of the acquisition, fresh for every call.
	Owner string
	// Token is the fencing token of the grant; zero before a grant.
	Token uint64
	// Time is when it happened, by the Client's clock.
	Time time.Time
	// MaxDuration and Lease are the hold's bounds (Acquired); Lease is also
	// the TTL a renewal asked for (Renewed).
	MaxDuration time.Duration
	Lease       time.Duration
	// Waited is how long the acquisition took, from the call to its grant or
	// its end (Acquired, Skipped).
	Waited time.Duration
	// Held is how long the lock was held (Released, Lost, Renewed).
	Held time.Duration
	// GracePeriod is how long the lock stays closed after a release
	// (Released): the GracePeriod, or what was left of OncePer.
	GracePeriod time.Duration
	// Err says why (Skipped, Lost), or, on Released, that the release
	// failed (the record then expires within its lease).
	Err error
}

func (c *Client) emit(e Event) {
	if len(c.hooks) == 0 {
		return
	}
	e.Time = c.clock.Now()
	for _, h := range c.hooks {
		h(e)
	}
}
