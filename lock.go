package lock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lock is a held lock. Its lease is renewed in the background until Release,
// until it is lost, or until MaxDuration. Its methods are safe for concurrent
// use.
//
// One timer keeps the lease: it fires for each renewal, every third of a
// lease, and, while a renewal is under way, at the lease's end, measured on
// this process's monotonic clock from the request that granted or last
// renewed it: then it declares the lock lost, whatever call to the provider
// is still under way. So the holder is told before another process can be
// granted the lock, however slowly the provider answers. (The timers of a
// Client's locks share one runtime timer: see leaseTimers.)
type Lock struct {
	c          *Client
	key, owner string
	claim      claim // of a counted name; zero for a lock
	token      uint64
	opts       Options
	start      time.Time // monotonic, when the granting request was sent (MaxDuration counts from it)

	outer *Lock       // the lock held by the call chain that ran this one (see run)
	scope scope       // the context of the handler that run runs
	rel   detachedCtx // the context of the Release that ends the hold

	renewMu  sync.Mutex // one renewal at a time
	mu       sync.Mutex // guards what follows
	state    lockState
	leaseEnd time.Time // monotonic: the record expires no earlier than this (see leaseEnd)
	renewAt  time.Time // monotonic: the next renewal
	// The lease's timer fires at renewAt, or at leaseEnd while a renewal is
	// under way; due and slot are its place in c.leases, which guards them.
	due  time.Time
	slot int // in c.leases's heap; -1 when not in it
	// outcome is how the hold ended, once it did (lost or released): the
	// *LostError of a loss, the provider's error of a release that failed,
	// or nil after a clean release.
	outcome  error
	renewErr error         // the last renewal's provider error, nil after a success
	onLost   func(error)   // told of a loss (run's context)
	done     chan struct{} // made by the first call of Done, or by endLocked: closed when the hold ended
}

// lockState is where a Lock is in its life:
//
//	held  --Release-->  releasing  --the provider's answer-->  released
//	      --lease timer, renewal-->  lost  --Release-->  released
//
// Done is closed, and outcome final, on entering lost, and on entering
// released from releasing: only once the provider has said how the release
// ended.
type lockState int

const (
	held      lockState = iota
	releasing           // Release has asked the provider and waits for its answer
	released            // Release has ended: outcome says how
	lost                // lost while held; Release not called yet
)

// newLock returns the Lock of a grant with ttl requested at sent; keep
// starts its timers.
func newLock(c *Client, key, owner string, cl claim, token uint64, o Options, sent time.Time, ttl time.Duration) *Lock {
	l := &Lock{
		c:        c,
		key:      key,
		owner:    owner,
		claim:    cl,
		token:    token,
		opts:     o,
		start:    sent,
		leaseEnd: leaseEnd(sent, ttl),
		slot:     -1,
	}
	return l
}

// Key returns the lock's key (see [Client.Key]): with the Redis provider, the
// Redis key of its record.
func (l *Lock) Key() string { return l.key }

// Owner returns the id of this acquisition.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token of this grant: strictly greater than the
// token of every earlier grant of the same key by the same provider. Pass it to
// the resource the lock protects, which should reject a write carrying a token
// lower than one it has already seen.
func (l *Lock) Token() uint64 { return l.token }

// Done returns a channel that is closed when the lock is lost, or when a
// Release has ended. As with a context, once it is closed Err says how, and
// says it for good: a Release closes it only after the provider answered, so
// a lock that the release finds lost closes it with Err already the
// *LostError.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// held reports whether l is still held: neither released nor lost.
func (l *Lock) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

// endLocked closes the channel of Done, or, if it was not asked for yet,
// makes it closed: the one place that closes it. The caller holds l.mu, and
// calls it once, after l moved to lost (once the loss is reported), or to
// released from releasing.
func (l *Lock) endLocked() {
	if l.done == nil {
		l.done = closedChan
		return
	}
	close(l.done)
}

// closedChan is the channel of Done of a Lock that ended before Done was
// first called.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// lossLocked returns the *LostError of the hold's loss, or nil; the caller
// holds l.mu. (outcome holds a loss as a bare *LostError, never wrapped.)
func (l *Lock) lossLocked() *LostError {
	e, _ := l.outcome.(*LostError)
	return e
}

// Err returns nil while the lock is held (and while a Release waits for the
// provider), and after a release that did not find it lost; the *LostError
// once the lock has been lost, whether a renewal, the lease timer or the
// release found it. A Release that failed with the provider's error is not a
// loss: Err stays nil (Release returned that error, and the record expires
// within its lease). Once Done is closed, Err no longer changes.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.lossLocked(); e != nil {
		return e
	}
	return nil
}

// onLoss makes fn the function called with the loss error when the lock is
// lost, at once if it already is.
func (l *Lock) onLoss(fn func(error)) {
	l.mu.Lock()
	if l.state == lost {
		err := l.outcome
		l.mu.Unlock()
		fn(err)
		return
	}
	l.onLost = fn
	l.mu.Unlock()
}

// lose marks the lock lost with e, unless it was released meanwhile, and
// then tells everyone who asked (outside l.mu, so that they may call the
// Lock's methods).
func (l *Lock) lose(e *LostError) error {
	l.mu.Lock()
	if l.state != held {
		defer l.mu.Unlock()
		return l.heldErrLocked()
	}
	l.state = lost
	l.stopTimersLocked()
	l.outcome = e
	onLost := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	// The log and the event first, then Done and the contexts: whoever they
	// wake finds the event delivered. Only this call moved the state to lost,
	// so only it closes done.
	l.reportLoss(e)
	l.mu.Lock()
	l.endLocked()
	l.mu.Unlock()
	if onLost != nil {
		onLost(e)
	}
	return e
}

// lostError returns the [LostError] of a loss of l for reason.
func (l *Lock) lostError(reason LostReason, cause error) *LostError {
	return &LostError{Key: l.key, Token: l.token, Reason: reason, Cause: cause}
}

// found returns the [LostError] of a loss that a renewal or the release found:
// the provider answered err, a *LostError (the record gone or another's).
// When the answer came before end, the lease's end, the record cannot have
// expired: it was removed early ([LostTaken], [LostRemoved]); otherwise the lease
// ran out. Who holds the key now is read once more (Inspect, bounded by a
// second), unless the provider said it; a failed read leaves Holder empty.
func (l *Lock) found(ctx context.Context, err error, end time.Time) *LostError {
	e := l.lostError(LostRemoved, nil)
	if !time.Now().Before(end) {
		e.Reason = LostLeaseRanOut
	}
	var pe *LostError
	if errors.As(err, &pe) && pe.Holder != "" && pe.Holder != l.owner {
		e.Holder = pe.Holder
	} else if !l.claim.counted() {
		ctx, cancel := context.WithTimeout(withoutCancel(ctx), min(l.c.releaseTimeout, time.Second))
		rec, err := l.c.provider.Inspect(ctx, l.key)
		cancel()
		if err == nil && rec.Owner != l.owner {
			e.Holder = rec.Owner
		}
	}
	if e.Holder != "" && e.Reason == LostRemoved {
		e.Reason = LostTaken
	}
	return e
}

// reportLoss logs the loss at warning level, the one event an operator must
// see, and emits [EventLost].
func (l *Lock) reportLoss(e *LostError) {
	heldFor := time.Since(l.start)
	args := []any{"key", l.key, "token", l.token, "held", heldFor, "reason", e.Reason.String()}
	if e.Holder != "" {
		args = append(args, "holder", e.Holder)
	}
	l.c.log.Warn("lock: lost", append(args, "err", e)...)
	l.c.emit(Event{Kind: EventLost, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, Err: e})
}

// heldErr returns nil while the lock is held, and why it is not otherwise.
func (l *Lock) heldErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldErrLocked()
}

// heldErrLocked is heldErr; the caller holds l.mu. A released lock's error
// names Extend, the one call that returns it.
func (l *Lock) heldErrLocked() error {
	if e := l.lossLocked(); e != nil {
		return e
	}
	if l.state == releasing || l.state == released {
		return &releasedError{op: "extend", key: l.key}
	}
	return nil
}

// gracePeriod returns how long the lock stays closed after a release now: the
// GracePeriod, or what is left of OncePer since the hold began, whichever is
// longer; zero (free it) when that is under a millisecond.
func (l *Lock) gracePeriod() time.Duration {
	if l.opts.GracePeriod == 0 && l.opts.OncePer == 0 {
		return 0
	}
	d := max(l.opts.GracePeriod, time.Until(l.start.Add(l.opts.OncePer)))
	if d < time.Millisecond {
		return 0
	}
	return d.Round(time.Millisecond)
}

// Release ends the hold: it deletes the record, hands it to the next waiter,
// or, with a GracePeriod or OncePer, keeps it closed for as long as they say.
// It runs on a context of its own (bounded by the release timeout) so that a
// cancelled ctx cannot leave the lock held. It returns nil after a clean
// release, the *LostError if the lock was lost before (or found gone or
// taken now), and the provider's error otherwise (matching [ErrUnavailable];
// the record then expires within its lease). Done is closed when it returns,
// with Err saying the same. When ctx has a deadline, Release returns by it
// (or, called after it, a moment after the call) whatever the provider
// does: if the provider has not answered by then, the release goes on in
// the background, still bounded by the release timeout, and Release
// returns an error matching ErrUnavailable and context.DeadlineExceeded;
// Done is closed, and Err final, when the release has ended. Release after
// Release returns what the first returned when it failed, and after a clean
// one an error matching [ErrReleased]; it does not call the provider, and
// while the first is under way it waits for its outcome (as long as ctx's
// deadline allows). Release on a nil *Lock (what a failed Acquire returns)
// returns an error matching [ErrInvalidArgument].
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return invalidf("Release on a nil *Lock: nothing was acquired")
	}
	l.mu.Lock()
	state, end := l.state, l.leaseEnd
	switch state {
	case held:
		l.state = releasing
		l.stopTimersLocked()
	case lost:
		l.state = released
	}
	l.onLost = nil
	l.mu.Unlock()
	c := l.c
	switch state {
	case releasing, released:
		return l.releasedAgain(ctx)
	case lost:
		// The lease ran out without a renewal; the record may still be ours.
		_ = c.settle(ctx, func(ctx context.Context) error { return c.release(ctx, l.key, l.owner, l.claim) })
		return l.Err() // the loss
	}
	// Only this call moved the state from held: l.rel is its own.
	l.rel = c.detach(ctx)
	if !c.bounded(ctx) {
		return l.release(&l.rel, end)
	}
	if err := c.settle(ctx, func(context.Context) error { return l.release(&l.rel, end) }); err != errUnsettled {
		return err
	}
	return &unsettledError{op: "release", key: l.key}
}

// release is Release of a held lock, on rctx, a context of its own; end is
// the lease's end when Release began.
func (l *Lock) release(rctx context.Context, end time.Time) error {
	c := l.c
	var err error
	closed := l.gracePeriod()
	if closed > 0 {
		err = c.provider.Finish(rctx, l.key, l.owner, closed)
	} else {
		err = c.release(rctx, l.key, l.owner, l.claim)
	}
	switch {
	case err == nil:
		c.answered()
		if c.debug {
			c.log.Debug("lock: released", "key", l.key, "token", l.token)
		}
		var heldFor time.Duration
		if len(c.hooks) > 0 { // else spare the clock read
			heldFor = time.Since(l.start)
		}
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, GracePeriod: closed})
		l.end(nil)
		return nil
	case errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord):
		e := l.lostError(LostCorrupt, err)
		if !errors.Is(err, ErrCorruptRecord) {
			e = l.found(rctx, err, end)
		}
		l.reportLoss(e)
		l.end(e)
		return e
	default:
		err = c.failed(context.Background(), "release", l.key, err) // the release's failure, whatever the caller's context
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: time.Since(l.start), Err: err})
		l.end(err)
		return err
	}
}

// end ends a release with its outcome: nil when clean, the *LostError when
// the release found the lock lost, or the provider's error. Err says so
// before Done is closed.
func (l *Lock) end(outcome error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = released
	l.outcome = outcome
	l.endLocked()
}

// releasedAgain is Release after Release: it waits for the first one's
// outcome (Done), as long as ctx's deadline allows (see Client.settle), and
// returns it, the loss or the failure, or [ErrReleased] after a clean
// release.
func (l *Lock) releasedAgain(ctx context.Context) error {
	if !l.c.waitFor(ctx, l.Done()) {
		return &unsettledError{op: "release", key: l.key}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outcome != nil {
		return l.outcome
	}
	return &releasedError{op: "release", key: l.key}
}
