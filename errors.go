package lock

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinel errors. Test for them with errors.Is; the types below carry the details.
var (
	// ErrNotAcquired reports that a lock was not acquired: it was held by another
	// owner, it was in its grace period, or the wait for it ended. Errors that match
	// it are *NotAcquiredError values, which also match the reason (ErrHeld,
	// ErrGracePeriod, ErrTimeout, or the context's error).
	ErrNotAcquired = errors.New("lock: not acquired")

	// ErrHeld is the reason of a NotAcquiredError when another owner held the lock.
	ErrHeld = errors.New("lock: held by another owner")

	// ErrGracePeriod is the reason of a NotAcquiredError when the lock had ended
	// but was kept closed for its grace period ("at most once per window").
	ErrGracePeriod = errors.New("lock: in grace period")

	// ErrTimeout is the reason of a NotAcquiredError when a wait lasted
	// Options.MaxWait without acquiring the lock.
	ErrTimeout = errors.New("lock: wait timed out")

	// ErrLost reports that a lock stopped being held before its holder released it:
	// its lease expired, renewal failed, it reached its MaxDuration, or the record
	// was found gone or owned by someone else. Errors that match it are
	// *LostError values.
	ErrLost = errors.New("lock: lost")

	// ErrInvalidArgument reports bad input: an empty or oversized name or owner,
	// a negative duration, a nil handler or provider. Nothing was changed.
	ErrInvalidArgument = errors.New("lock: invalid argument")

	// ErrCorruptRecord reports a stored value that is not a record this library
	// wrote. Errors that match it are *RecordError values. The value is left as
	// it is.
	ErrCorruptRecord = errors.New("lock: corrupt record")

	// ErrClosed reports a call on a Client after Close.
	ErrClosed = errors.New("lock: client closed")

	// ErrNotReplicated reports a grant or renewal that fewer replicas than
	// asked for acknowledged in time (see WaitForReplicas). The acquisition
	// failed and its record is removed; a renewal is tried again.
	ErrNotReplicated = errors.New("lock: not replicated")
)

// NotAcquiredError is returned when a lock was not acquired. It matches
// ErrNotAcquired and its Reason with errors.Is.
type NotAcquiredError struct {
	// Key is the full key of the lock (prefix and name).
	Key string
	// Reason is ErrHeld, ErrGracePeriod, ErrTimeout, or the error of the context
	// that ended the wait.
	Reason error
	// RetryAfter is how long the record that blocked the caller had left to live
	// when it was last seen; zero when unknown.
	RetryAfter time.Duration
	// Holder is the owner of that record (see Lock.Owner), when known.
	Holder string
}

func (e *NotAcquiredError) Error() string {
	return "lock: could not acquire " + strconv.Quote(e.Key) + ": " + trimPrefix(e.Reason)
}

// Is reports whether target is ErrNotAcquired.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the reason.
func (e *NotAcquiredError) Unwrap() error { return e.Reason }

// LostError is returned when a held lock was lost. It matches ErrLost with
// errors.Is and unwraps to its cause, when there is one.
type LostError struct {
	// Key is the full key of the lock.
	Key string
	// Token is the fencing token of the grant that was lost.
	Token uint64
	// Cause says how the loss was found: nil when the record was found gone or
	// owned by another owner; otherwise the error that kept the lease from being
	// renewed, or an error saying the lock reached its MaxDuration.
	Cause error
}

func (e *LostError) Error() string {
	msg := "lock: lost " + strconv.Quote(e.Key) + " (token " + strconv.FormatUint(e.Token, 10) + ")"
	if e.Cause != nil {
		msg += ": " + trimPrefix(e.Cause)
	}
	return msg
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// RecordError is returned when a stored value is not a record this library
// wrote (corrupted, or written by something else). It matches ErrCorruptRecord.
// The stored value is never changed by the call that reports it.
type RecordError struct {
	Key   string
	Value string
}

func (e *RecordError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "..."
	}
	return fmt.Sprintf("lock: corrupt record at %q: %q", e.Key, v)
}

// Is reports whether target is ErrCorruptRecord.
func (e *RecordError) Is(target error) bool { return target == ErrCorruptRecord }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

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
