package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seed05627090/lock/check"
)

// Sentinel errors. Test for them with errors.Is; the types below carry the details.
var (
	// ErrNotAcquired reports that a lock was not acquired, for one of these
	// reasons, which the error also matches: another acquisition held it
	// ([ErrHeld], also one of the caller's own Client); it was in its grace
	// period ([ErrGracePeriod]); a wait lasted MaxWait ([ErrTimeout]); the
	// caller's context ended (its cause: context.Canceled,
	// context.DeadlineExceeded or the cause it was given); the Client closed
	// during the acquisition ([ErrClosed]; a call made after Close gets
	// ErrClosed alone); or the grant came after its lease had run out
	// ([ErrGrantedLate]). Errors that match it are *NotAcquiredError
	// values. It is not only "someone else has it": an acquisition that
	// ended (by MaxWait, the context or Close) while a call to the provider
	// had failed or gone unanswered matches [ErrUnavailable] too, an outage
	// rather than a refusal. To skip a lock that someone else has, test [ErrHeld] (and
	// [ErrGracePeriod], [ErrTimeout] for a wait), or test [ErrUnavailable]
	// first. A provider's error while the context lives, bad input and a
	// corrupt record never match it.
	ErrNotAcquired = errors.New("lock: not acquired")

	// ErrHeld is the reason of a [NotAcquiredError] when another owner held the
	// lock: another acquisition, in any process, or of the caller's own Client
	// (the message then says "held by this Client").
	ErrHeld = errors.New("lock: held by another owner")

	// ErrGracePeriod is the reason of a [NotAcquiredError] when the lock had ended
	// but was kept closed for its grace period ("at most once per window").
	ErrGracePeriod = errors.New("lock: in grace period")

	// ErrTimeout is the reason of a [NotAcquiredError] when a wait lasted
	// [Options.MaxWait] without acquiring the lock.
	ErrTimeout = errors.New("lock: wait timed out")

	// ErrLost reports that a lock stopped being held before its holder released it:
	// its lease expired, renewal failed, it reached its MaxDuration, or the record
	// was found gone or owned by someone else. Errors that match it are
	// *LostError values; their Reason says which.
	ErrLost = errors.New("lock: lost")

	// ErrReleased reports a call on a Lock that was already released: Extend
	// after Release, or Release after a clean Release. It is a mistake of the
	// caller, not a loss: such errors do not match [ErrLost].
	ErrReleased = errors.New("lock: already released")

	// ErrUnavailable reports that the provider could not be reached or
	// answered with an error (the network's, the server's, a reply the
	// library could not read). The provider's error is in the chain
	// (errors.Is, errors.As, errors.Unwrap). An acquisition whose context
	// ended while the provider had not answered matches it too, beside the
	// context's error, with the last error a call of the Client to the
	// provider returned since its last success, when there was one: a
	// deadline shorter than the provider's own retries then says what kept
	// the provider from answering. A call the context had ended before it
	// was sent does not count, nor, for a waiter the provider had queued
	// already, a look or renewal that the end of the wait cut short less
	// than a second after it was sent: that wait timed out in the queue. A
	// refusal ([ErrHeld], [ErrGracePeriod], [ErrTimeout] while waiting in the
	// queue), a loss and bad input never match it.
	ErrUnavailable = errors.New("lock: provider unavailable")

	// ErrInvalidArgument reports bad input: an empty or oversized name or owner,
	// a negative duration, a nil handler or provider; or a name taken as
	// another kind than it is in use as (a lock, an election's role, a
	// Semaphore, an [RWMutex]: see [Kind]), or with another limit. Nothing
	// was changed.
	ErrInvalidArgument = check.ErrInvalidArgument

	// ErrCorruptRecord reports a stored value that is not a record this library
	// wrote. Errors that match it are *RecordError values. The value is left as
	// it is.
	ErrCorruptRecord = errors.New("lock: corrupt record")

	// ErrClosed reports a call on a Client after Close.
	ErrClosed = errors.New("lock: client closed")

	// ErrGrantedLate is the Reason of a [NotAcquiredError] when the lock was
	// granted, but the grant reached the caller after the lease it asked
	// for had run out (a slow answer, a paused process): the record may
	// have expired and been granted to another, so it was handed back,
	// never held, and it is not a loss. Trying again is safe.
	ErrGrantedLate = errors.New("lock: granted after its lease had run out (a slow answer or a paused process); handed back")
)

// NotAcquiredError is returned when a lock was not acquired. It matches
// [ErrNotAcquired], and its Reason and Provider with errors.Is and errors.As.
type NotAcquiredError struct {
	// Key is the full key of the lock (prefix and name).
	Key string
	// Reason is why: [ErrHeld], [ErrGracePeriod], [ErrTimeout] (MaxWait),
	// [ErrClosed] (the Client closed during the wait), the cause of the
	// caller's context that ended the wait (context.Canceled,
	// context.DeadlineExceeded or the cause it was given), or a grant that
	// came after its lease ran out ([ErrGrantedLate]).
	Reason error
	// Provider is set when the wait ended while a call to the provider had
	// failed or had not been answered: the provider's error, or a note that
	// it did not answer with the last error it returned before (see
	// [ErrUnavailable]), which it matches. Nil for a refusal, and for a wait
	// that ended while the provider answered.
	Provider error
	// RetryAfter is how long the record that blocked the caller had left to live
	// when it was last seen; zero when unknown.
	RetryAfter time.Duration
	// Holder is the owner of that record (see [Lock.Owner]), when known.
	Holder string

	ownHolder bool // Holder is an acquisition of the Client that was refused
}

// Error names the key and the reason, and the holder's identity when its
// Client set one ([WithIdentity]): "lock: could not acquire "lock:{job}": held
// by another owner (worker-2)". An owner without an identity is a random id
// that says nothing to a reader; it is in Holder. When the holder is an
// acquisition of the very Client that was refused (another request of the
// same process, or a lock the caller holds already), it says so: "held by
// this Client (worker-1)".
func (e *NotAcquiredError) Error() string {
	reason := trimPrefix(e.Reason)
	if e.Reason == ErrHeld && e.ownHolder {
		reason = "held by this Client"
	}
	msg := "lock: could not acquire " + strconv.Quote(e.Key) + ": " + reason
	if e.Provider != nil {
		msg += ": " + trimPrefix(e.Provider)
	}
	switch id := identityOf(e.Holder); {
	case e.Reason == ErrHeld:
		if id != "" {
			msg += " (" + id + ")"
		}
	case e.ownHolder && id != "":
		msg += " (holder: this Client, " + id + ")"
	case e.ownHolder:
		msg += " (holder: this Client)"
	case id != "":
		msg += " (holder " + id + ")"
	}
	return msg
}

// Is reports whether target is [ErrNotAcquired].
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the reason, and the provider's error when there is one.
func (e *NotAcquiredError) Unwrap() []error {
	if e.Provider == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Provider}
}

// LostError is returned when a held lock was lost. It matches [ErrLost] with
// errors.Is and unwraps to its cause, when there is one.
type LostError struct {
	// Key is the full key of the lock.
	Key string
	// Token is the fencing token of the grant that was lost.
	Token uint64
	// Reason says why the lock was lost, as far as the holder can tell (see
	// [LostReason]). It is zero ([LostUnknown]) in the [LostError] a Provider
	// returns: the Client that holds the lock fills it in.
	Reason LostReason
	// Holder is the owner found holding the key when the loss was found
	// (see [Lock.Owner]), when another owner held it; empty otherwise.
	Holder string
	// Cause says how the loss was found: nil when the record was found gone or
	// owned by another owner; otherwise the error that kept the lease from being
	// renewed, or an error saying the lock reached its MaxDuration.
	Cause error
}

// Error names the key, the token and the reason: "lock: lost "lock:{job}"
// (token 7): another owner holds it (worker-2): its record was removed
// before its lease ran out (a forced release, or the server lost it)".
func (e *LostError) Error() string {
	msg := "lock: lost " + strconv.Quote(e.Key) + " (token " + strconv.FormatUint(e.Token, 10) + ")"
	held := "another owner holds it"
	if id := identityOf(e.Holder); id != "" {
		held += " (" + id + ")"
	}
	const removed = "its record was removed before its lease ran out (a forced release, or the server lost it)"
	switch {
	case e.Reason == LostTaken:
		msg += ": " + held + ": " + removed
	case e.Reason == LostRemoved:
		msg += ": " + removed
	case e.Reason == LostLeaseRanOut:
		msg += ": " + errLeaseRanOut.Error()
		if e.Holder != "" {
			msg += "; " + held
		}
	case e.Cause != nil:
		msg += ": " + trimPrefix(e.Cause)
	}
	return msg
}

// LostReason says why a held lock was lost, as far as its holder can tell.
// A renewal or a release that finds the record gone or another's cannot see
// who removed it: when that happens before the lease ran out by the
// holder's clock, the record did not expire, so it was removed early, by a
// forced release ([Client.ForceRelease], lockctl) or by the server losing it
// (a restart without persistence, a failover to a replica that had not
// received it, a flush); the library cannot tell these apart.
type LostReason int

// The reasons of a loss.
const (
	// LostUnknown: the [LostError] did not come from the Client that held the
	// lock (a Provider's).
	LostUnknown LostReason = iota
	// LostTaken: a renewal or the release found another owner (Holder)
	// holding the key before the lease ran out: the record was removed
	// early (see [LostReason]) and granted again.
	LostTaken
	// LostRemoved: a renewal or the release found the key free before the
	// lease ran out: the record was removed early (see [LostReason]).
	LostRemoved
	// LostLeaseRanOut: the lease ran out by the holder's clock before a
	// renewal succeeded, while no renewal had failed: the process was
	// paused (a GC pause, a stopped VM), a renewal was slower than the rest
	// of the lease, or the release came after the lease's end and found the
	// record gone or another's (Holder set then).
	LostLeaseRanOut
	// LostUnreachable: the lease ran out while renewals failed: the
	// provider could not be reached or answered with an error (Cause, which
	// also matches errors.Is with that error).
	LostUnreachable
	// LostMaxDuration: the hold reached [Options.MaxDuration].
	LostMaxDuration
	// LostCorrupt: the record was found not to be a record (Cause is the
	// *RecordError).
	LostCorrupt
)

func (r LostReason) String() string {
	switch r {
	case LostTaken:
		return "taken by another owner"
	case LostRemoved:
		return "removed before the lease ran out"
	case LostLeaseRanOut:
		return "lease ran out"
	case LostUnreachable:
		return "provider unreachable"
	case LostMaxDuration:
		return "max duration reached"
	case LostCorrupt:
		return "corrupt record"
	}
	return "unknown"
}

// Is reports whether target is [ErrLost].
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// RecordError is returned when a stored value is not a record this library
// wrote (corrupted, or written by something else). It matches [ErrCorruptRecord].
// The stored value is never changed by the call that reports it.
type RecordError struct {
	// Key is the key that holds the value.
	Key string
	// Lock is the key of the lock whose call found the value, when that is
	// not Key (the Redis provider's fencing counter); empty otherwise.
	Lock string
	// Value is what the key holds.
	Value string
}

func (e *RecordError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	if e.Lock != "" {
		return fmt.Sprintf("lock: corrupt record at %q (the fencing counter of %q): %q", e.Key, e.Lock, v)
	}
	return fmt.Sprintf("lock: corrupt record at %q: %q", e.Key, v)
}

// Is reports whether target is [ErrCorruptRecord].
func (e *RecordError) Is(target error) bool { return target == ErrCorruptRecord }

// releasedError is [ErrReleased] for one call on one lock.
type releasedError struct{ op, key string }

func (e *releasedError) Error() string {
	return "lock: " + e.op + " " + strconv.Quote(e.key) + ": already released"
}

// Is reports whether target is [ErrReleased].
func (e *releasedError) Is(target error) bool { return target == ErrReleased }

// opError is a provider's error, with the operation and the key it failed
// on (no key within a [NotAcquiredError], which names it). It matches
// [ErrUnavailable] unless the call ended because the caller's context did,
// which says nothing of the provider.
type opError struct {
	op, key     string
	err         error
	callerEnded bool // err is the error of the caller's context, which ended
}

func (e *opError) Error() string {
	msg := e.err.Error()
	if e.key == "" { // within a NotAcquiredError, which names the key
		return e.op + ": " + msg
	}
	// A provider of this module may have named the operation and the key
	// itself (the Redis provider's List): say them once.
	prefix := "lock: " + e.op + " " + strconv.Quote(e.key) + ": "
	if strings.HasPrefix(msg, prefix) {
		return msg
	}
	return prefix + msg
}

func (e *opError) Unwrap() error { return e.err }

// Is reports whether target is [ErrUnavailable], unless the caller's context
// ended the call.
func (e *opError) Is(target error) bool {
	return target == ErrUnavailable && !e.callerEnded
}

// unansweredError is the Provider of a [NotAcquiredError] of an acquisition
// whose context ended before the provider answered the call op: it matches [ErrUnavailable] and unwraps to last, the last error
// a call of the Client to the provider returned since its last success
// (nil when there was none).
type unansweredError struct {
	op   string
	last error
}

func (e *unansweredError) Error() string {
	msg := e.op + ": no answer from the provider"
	if e.last != nil {
		msg += " (its last error: " + trimPrefix(e.last) + ")"
	}
	return msg
}

func (e *unansweredError) Is(target error) bool { return target == ErrUnavailable }
func (e *unansweredError) Unwrap() error        { return e.last }

// errUnsettled is what Client.settle returns when the caller's deadline
// came before the provider answered its clean-up, which goes on in the
// background.
var errUnsettled = errors.New("no answer from the provider by the deadline")

// unsettledError is the error of a call (op on key) that returned at its
// deadline while its clean-up (a release, a Leave) went on in the
// background (see Client.settle). It matches [ErrUnavailable] and
// context.DeadlineExceeded.
type unsettledError struct{ op, key string }

func (e *unsettledError) Error() string {
	return "lock: " + e.op + " " + strconv.Quote(e.key) + ": no answer from the provider by the deadline; the call goes on in the background"
}

func (e *unsettledError) Is(target error) bool {
	return target == ErrUnavailable || target == context.DeadlineExceeded
}

// isContextErr reports whether err is a context's error.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// invalidf is check.Invalidf: an error matching ErrInvalidArgument.
func invalidf(format string, args ...any) error { return check.Invalidf(format, args...) }

// trimPrefix drops the "lock: " of a nested error message so that it is said once.
func trimPrefix(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 6 && s[:6] == "lock: " {
		return s[6:]
	}
	return s
}
