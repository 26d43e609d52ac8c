package lock

import (
	"log/slog"
	"time"
)

// Defaults for the zero values of Options.
const (
	// DefaultMaxDuration bounds a hold, and a wait, when [Options.MaxDuration]
	// (and MaxWait) is 0. A held lock is renewed while its holder's process
	// lives, so this cap only stops a holder that hangs; an hour lets the
	// usual nightly job or migration finish. Set MaxDuration for longer ones.
	DefaultMaxDuration = time.Hour
	// DefaultLease is the TTL of a held record when [Options.Lease] is 0. The
	// holder renews it every third of a lease while it runs, so a crashed
	// holder frees the lock within one lease.
	DefaultLease = 15 * time.Second
	// DefaultPrefix is put before every lock name to make its key.
	DefaultPrefix = "lock:"
)

// Options say how one acquisition behaves. The zero value tries once, holds for
// at most [DefaultMaxDuration] with a renewed [DefaultLease], and frees the lock at
// once on release.
type Options struct {
	// Wait makes an acquisition that finds the lock held wait for it, until it is
	// acquired, the lock enters a grace period, MaxWait has passed, or the
	// context ends. Without Wait, a held lock fails the call at once with [ErrHeld].
	Wait bool

	// MaxWait bounds a wait ([ErrTimeout]). Zero means MaxDuration
	// ([DefaultHTTPMaxWait] in [HTTPMiddleware]). Bound the
	// wait with MaxWait rather than with the context's deadline, which the
	// held lock's work inherits in Do, Middleware and New: "wait at most 10s,
	// then run for up to an hour" is MaxWait 10s, MaxDuration 1h.
	MaxWait time.Duration

	// MaxDuration is the hard upper bound of a hold: renewal stops there and the
	// holder is told the lock is lost. Zero means [DefaultMaxDuration];
	// [NoHoldLimit] holds the lock until it is released or lost.
	MaxDuration time.Duration

	// Lease is the TTL of the record while held; the holder renews it every
	// Lease/3. A holder that crashes frees the lock within one lease. Zero means
	// [DefaultLease]; a lease longer than MaxDuration is cut to it.
	Lease time.Duration

	// Fair keeps arrival order even when the lock is free. Waiters always
	// queue in the provider in arrival order, and each release hands the
	// lock to the first of them; but a lock can be free while waiters queue
	// (its holder died and the record expired, until a waiter looks again):
	// without Fair, an acquisition that finds it free takes it then; with
	// Fair (and Wait), it queues behind them, and the first waiter is served
	// (at once, or, on Redis, at that waiter's next look). Every acquisition
	// of a name should agree on Fair.
	Fair bool

	// GracePeriod keeps the lock closed for this long after the holder releases
	// it: every acquisition in that window fails with [ErrGracePeriod], waiters
	// included. The window counts from the end of the run (Alepha's grace
	// period): a job that runs an hour with a GracePeriod of an hour starts at
	// most once every two hours. Zero means none: the lock is freed at
	// release. Less than a millisecond is refused: providers store TTLs in
	// milliseconds.
	GracePeriod time.Duration

	// OncePer keeps the lock closed until OncePer after the hold began (the
	// granting request), however short the run: a job under it starts at most
	// once per OncePer across replicas (ShedLock's lockAtLeastFor). A run
	// longer than OncePer frees the lock at release. With GracePeriod too,
	// the lock stays closed until the later of the two ends. For a job on a
	// schedule, prefer a lock per tick (RunTick): replicas whose clocks differ
	// can still run one tick twice, or skip one, with a window alone.
	OncePer time.Duration
}

// resolved returns o with defaults applied, or an error for bad values.
func (o Options) resolved() (Options, error) {
	switch {
	case o.MaxDuration < 0:
		return o, invalidf("negative MaxDuration %v", o.MaxDuration)
	case o.Lease < 0:
		return o, invalidf("negative Lease %v", o.Lease)
	case o.GracePeriod < 0:
		return o, invalidf("negative GracePeriod %v", o.GracePeriod)
	case o.GracePeriod > 0 && o.GracePeriod < time.Millisecond:
		return o, invalidf("GracePeriod %v is less than 1ms", o.GracePeriod)
	case o.MaxWait < 0:
		return o, invalidf("negative MaxWait %v", o.MaxWait)
	case o.OncePer < 0:
		return o, invalidf("negative OncePer %v", o.OncePer)
	}
	if o.MaxDuration == 0 {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.MaxWait == 0 {
		o.MaxWait = o.MaxDuration
	}
	if o.Lease == 0 {
		o.Lease = DefaultLease
	}
	if o.Lease > o.MaxDuration {
		o.Lease = o.MaxDuration
	}
	if o.Lease < 3*time.Millisecond {
		return o, invalidf("Lease %v is less than 3ms", o.Lease)
	}
	return o, nil
}

// Clock tells the time. The memory provider measures TTLs with it and the
// Client stamps events with it; tests can pass a fake one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithPrefix sets the text put before every lock name to make its key. The
// default is [DefaultPrefix]; "" is allowed.
func WithPrefix(prefix string) ClientOption {
	return func(c *Client) { c.prefix = prefix }
}

// MaxIdentityLen is the longest identity [WithIdentity] accepts, in bytes.
const MaxIdentityLen = 64

// WithIdentity names the Client's process (a host and pid, a pod name) in
// the owner of every lock it acquires: the owner becomes
// identity/random-id-sequence, so that Inspect, List and lockctl show where a
// lock is held. An identity is at most [MaxIdentityLen] bytes without commas or
// white space; [NewClient] refuses another with [ErrInvalidArgument]. The
// default is none.
func WithIdentity(identity string) ClientOption {
	return func(c *Client) { c.identity = identity }
}

// WithLogger sends the Client's log records to l: at debug level,
// acquisitions, waits and releases; at warning level, a lost lock (with the
// key, the token, how long it was held and the [LostReason]) and a forced
// release; and the refusals of [HTTPMiddleware]'s default ErrorHandler. The
// default discards them. Errors returned to the caller are not logged, but
// for a loss, the one event an operator must see whoever handles the error.
func WithLogger(l *slog.Logger) ClientOption {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithEventClock sets the clock that stamps events ([Event.Time]); it changes
// nothing else (leases and waits run on the system's clock, and a memory
// provider's records on [MemoryClock]'s). The default is the system clock.
func WithEventClock(clock Clock) ClientOption {
	return func(c *Client) {
		if clock != nil {
			c.clock = clock
		}
	}
}

// WithEvents calls fn with every event of every lock of the Client, on the
// goroutine that caused it. fn must not block; it may be called from
// several goroutines at once, so events come in no set order, but for
// these: an acquisition's Contended comes before its Acquired or Skipped;
// a lock's Acquired comes before its other events, and exactly one
// Released or Lost follows it. A renewal whose reply comes after the lock
// was released or lost is not reported; one that ends just as the release
// begins may still report its Renewed after that Released. Several
// WithEvents options add several hooks.
func WithEvents(fn func(Event)) ClientOption {
	return func(c *Client) {
		if fn != nil {
			c.hooks = append(c.hooks, fn)
		}
	}
}

// WithPollInterval sets how often a waiter looks again when no grant reaches
// it: a message lost while the connection was broken, a holder that died and
// whose record expired. The default is one second. It is the interval of
// the first 16 waiters of a lock's queue, which also look as the record they
// saw expires; a waiter further back looks less often, every d times one
// more than its place divided by 16 (places 16 to 31 every 2d, 32 to 47
// every 3d...), and every waiter looks at least once a minute, whatever d.
// A waiter for a counted name (a [Semaphore]'s, an [RWMutex]'s) also looks
// soon after the claim it saw expire first does, a millisecond later for
// each waiter ahead of it.
func WithPollInterval(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.poll = d
		}
	}
}

// WithHandoffWindow sets how long a lock handed to a waiter stays its own
// before the waiter takes it up (the default is one second). A waiter's
// record, whether a release handed it over or the waiter's own request took
// it, is stored for the handoff window only, and the waiter's lease timer
// extends it to its lease a third of the window later; a grant handed over
// with less than half the window left, or whose age the waiter cannot tell,
// is extended before the waiter relies on it. A waiter whose process is
// stalled when the lock is handed to it (a long GC pause, SIGSTOP, a frozen
// VM) does not take it up: the record expires at the end of the window, and
// the next waiter's look takes it, so the lock idles for the window (plus
// the poll interval, when that is longer), not for a lease. The stalled waiter, when it resumes,
// finds the grant gone and waits again, at the back of the queue. A window
// at least as long as the lease turns this off: a handed-over record then
// lives a lease. d must be at least a millisecond; other values are ignored.
func WithHandoffWindow(d time.Duration) ClientOption {
	return func(c *Client) {
		if d >= time.Millisecond {
			c.handoff = d
		}
	}
}

// WithReleaseTimeout bounds the release and window writes and the clean-ups
// of abandoned acquisitions, which run on a context of their own (the
// caller's values, not its cancellation) so that a cancelled caller cannot
// leave a lock held. Each ends between nine tenths of d and d after it
// starts: calls that start within a tenth of d share one deadline. (A
// renewal is bounded by the end of the current lease instead.) The default
// is five seconds.
func WithReleaseTimeout(d time.Duration) ClientOption {
	return func(c *Client) {
		if d > 0 {
			c.releaseTimeout = d
		}
	}
}

// NoHoldLimit is a MaxDuration of a hundred years: no limit in practice,
// and the MaxDuration of a term whose [ElectionOptions.TermLimit] is zero.
// [Options.MaxDuration] has no value for "none" (zero means
// [DefaultMaxDuration]): set it to NoHoldLimit for a lock held until it is
// released or lost. A holder that hangs while its process lives keeps the
// lock, so watch its work, or set a MaxDuration.
const NoHoldLimit = 100 * 365 * 24 * time.Hour
