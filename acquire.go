package lock

import (
	"context"
	"errors"
	"time"
)

// Acquire takes the lock called name. On success the caller holds it, and it is
// renewed in the background until Release, loss, or MaxDuration. Without
// o.Wait it tries once; with it, it waits as [Options.Wait] says. It returns a
// *NotAcquiredError ([ErrNotAcquired]) when the lock was held, in its grace
// period, or the wait ended (its Reason is then the context's cause:
// [ErrTimeout] at MaxWait, [ErrClosed] when the Client closes during the wait),
// ErrClosed itself when the Client was closed before the call, and the
// provider's error, naming the operation and the key, otherwise.
//
// Acquire returns by ctx's deadline, or MaxWait, whichever comes first,
// and a moment (50 ms), whatever the provider does. After a failure it
// leaves nothing of the caller's stored when the provider answered the
// clean-up by then; otherwise the clean-up goes on in the background (Close
// waits for it), and what the provider may have stored expires with its
// TTL. A grant that reaches the caller after its context ended, or after
// the lease it asked for ran out, is handed back, never returned
// (docs/errors-and-events.md says more).
//
// Acquiring, with Wait, a lock that ctx's call chain already holds (see
// [FromContext]) would wait for itself: it fails at once with
// [ErrInvalidArgument]. So does Acquire, waiting or not, of a name in use
// as a Semaphore or an [RWMutex] (held or waited for; see [Kind]), or held
// as an election's role.
func (c *Client) Acquire(ctx context.Context, name string, o Options) (*Lock, error) {
	key, err := c.checkName(name)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, key, c.newOwner(""), claim{}, o)
}

// acquire takes cl under key for owner, as o says: a lock when cl is zero,
// else a claim on a counted name. Every acquisition goes this way: one
// attempt (try), then, with o.Wait, a waiter (wait); finish says how it
// ended.
func (c *Client) acquire(ctx context.Context, key, owner string, cl claim, o Options) (*Lock, error) {
	o, err := o.resolved()
	if err != nil {
		return nil, err
	}
	if o.Wait && heldBy(ctx, c, key, cl.counted()) {
		return nil, invalidf("%q is held by this call chain: waiting for it would never end", key)
	}
	a := acquisition{c: c, key: key, owner: owner, claim: cl, o: o, began: time.Now()}
	if o.Wait {
		// MaxWait bounds the whole call, its first attempt too.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.MaxWait, ErrTimeout)
		defer cancel()
	}
	if !o.Wait || !o.Fair && !c.busy.has(key) {
		// One attempt first: a free lock is granted in one round trip,
		// without the waiter's set-up; a waiter starts after a busy one. A
		// Fair wait starts with the waiter: the attempt could take a lock
		// that is free while others queue for it (its holder died).
		l, err := a.try(ctx)
		if !o.Wait || l != nil || !errors.Is(err, ErrHeld) && !errors.Is(err, ErrGrantedLate) {
			return a.finish(ctx, l, err)
		}
	}
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.work.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	defer stop()
	l, err := a.wait(ctx)
	return a.finish(ctx, l, err)
}

// acquisition is one call of Acquire: the key, a fresh owner, the options,
// and when it began.
type acquisition struct {
	c     *Client
	key   string
	owner string
	claim claim // of a counted name; zero for a lock
	o     Options
	began time.Time
}

// finish returns the acquisition's outcome, l and err, unless the Client
// was closed meanwhile: then it releases l, so that no acquisition succeeds
// after Close. (A grant that came after its lease ran out never reaches
// it: try and the waiter's confirm hand it back.)
func (a *acquisition) finish(ctx context.Context, l *Lock, err error) (*Lock, error) {
	if l != nil && a.c.closing.Err() != nil {
		_ = l.Release(ctx)
		return nil, a.notAcquired(ctx, ErrClosed, "", 0)
	}
	return l, err
}

// try asks for the lock once, as the acquisition begins (a.began counts as
// when the request was sent). A lock held by another owner fails with a
// *NotAcquiredError whose reason is [ErrHeld], reported ([EventContended],
// [EventSkipped]) only without o.Wait: with it, the waiter goes on and reports.
func (a *acquisition) try(ctx context.Context) (*Lock, error) {
	c, key, owner := a.c, a.key, a.owner
	if c.closing.Err() != nil {
		return nil, ErrClosed
	}
	if ended(ctx) {
		// Nothing asked: an error of the provider's from now on is one that
		// came while the context was live (see notAcquired).
		return nil, a.notAcquired(ctx, nil, "", 0)
	}
	rec, err := c.tryAcquire(ctx, key, owner, a.claim, a.o.Lease)
	if err != nil {
		if isContextErr(err) {
			ended(ctx) // a client that ends the call at ctx's deadline may beat ctx's own timer
		}
		// The record may have been stored with the reply lost: remove it.
		// The provider may not answer that either: in the background,
		// so that the caller is not kept waiting (Close waits for it).
		cl := a.claim
		c.background(ctx, func(ctx context.Context) { _ = c.release(ctx, key, owner, cl) })
		return nil, a.notAcquired(ctx, a.failed(ctx, "acquire", err), "", 0)
	}
	c.answered()
	if err := a.kindMix(rec); err != nil {
		return nil, err
	}
	if rec.Owner == owner && !rec.GracePeriod {
		late := time.Until(leaseEnd(a.began, a.leaseOf(rec))) <= 0 // the monotonic clock alone: half the cost of time.Now
		if !ended(ctx) && !late {
			return a.lockFor(rec, a.began), nil
		}
		// The grant came after the context ended, or after its lease ran
		// out (a slow answer, a paused process): not a hold. It is handed
		// back before the call returns (when the provider answers by the
		// caller's deadline: see settle), so that nothing of the caller's
		// is left stored. With Wait, the waiter goes on.
		cl := a.claim
		_ = c.settle(ctx, func(ctx context.Context) error { return c.release(ctx, key, owner, cl) })
		if ctx.Err() != nil {
			return nil, a.notAcquired(ctx, nil, "", 0)
		}
		if a.o.Wait {
			return nil, &NotAcquiredError{Key: key, Reason: ErrGrantedLate}
		}
		return nil, a.notAcquired(ctx, ErrGrantedLate, "", 0)
	}
	if rec.GracePeriod {
		return nil, a.notAcquired(ctx, ErrGracePeriod, rec.Owner, rec.TTL)
	}
	if err := roleMix(key, owner, rec.Owner); err != nil {
		return nil, err
	}
	c.busy.mark(key)
	if a.o.Wait {
		return nil, &NotAcquiredError{Key: key, Reason: ErrHeld, RetryAfter: rec.TTL, Holder: rec.Owner}
	}
	c.emit(Event{Kind: EventContended, Key: key, Owner: owner})
	return nil, a.notAcquired(ctx, ErrHeld, rec.Owner, rec.TTL)
}

// wait acquires with o.Wait, until ctx ends (at MaxWait, too): see waiter.
func (a *acquisition) wait(ctx context.Context) (*Lock, error) {
	// A wait starts once the key was seen busy, or at once when Fair: its
	// first look joins the key's queue if there is one, so that it is served
	// in arrival order. Its record is stored for the handoff window: a grant
	// that nobody takes up passes on (see WithHandoffWindow).
	w := &waiter{
		acquisition: *a,
		req:         Wait{Owner: a.owner, TTL: min(a.c.handoff, a.o.Lease), Look: LookJoin},
		grants:      make(chan Notice, 1),
		wake:        make(chan struct{}, 1),
	}
	a.c.inbox.join(ctx, w)
	defer a.c.inbox.leave(w)
	if a.c.debug {
		a.c.log.Debug("lock: waiting", "key", a.key, "owner", a.owner)
	}
	return w.run(ctx)
}

// notAcquired returns the error of an acquisition that failed for reason:
// a *NotAcquiredError, emitted as [EventSkipped], when the lock was refused
// (reason [ErrHeld], [ErrGracePeriod], [ErrClosed], a grant that came too late)
// or ctx ended (its cause is then the Reason, and a provider call that
// failed or went unanswered as it ended is the Provider), and reason itself
// otherwise (a provider error, naming the operation and the key; bad
// input; a corrupt record). A provider call that failed with the context's
// error was cut short by it (the caller checked the context before the
// call): it went unanswered, unless the Client closed.
func (a *acquisition) notAcquired(ctx context.Context, reason error, holder string, retryAfter time.Duration) error {
	err := &NotAcquiredError{Key: a.key, Reason: reason, RetryAfter: retryAfter, Holder: holder, ownHolder: a.c.owns(holder)}
	refusal := errors.Is(reason, ErrHeld) || errors.Is(reason, ErrGracePeriod) || errors.Is(reason, ErrClosed) || errors.Is(reason, ErrGrantedLate)
	var op *opError
	failed := errors.As(reason, &op)
	switch cause := context.Cause(ctx); {
	case cause == nil && refusal:
	case cause != nil && failed && !isContextErr(op.err):
		err.Reason, err.Provider = cause, &opError{op: op.op, err: op.err}
	case cause != nil && failed && !errors.Is(cause, ErrClosed):
		err.Reason, err.Provider = cause, &unansweredError{op: op.op, last: a.c.lastError()}
	case cause != nil && (reason == nil || refusal || failed):
		err.Reason = cause
	default:
		// The provider failed (or bad input, a corrupt record): not a
		// NotAcquiredError, but the end of the acquisition all the same.
		a.c.emit(Event{Kind: EventSkipped, Key: a.key, Owner: a.owner, Waited: time.Since(a.began), Err: reason})
		return reason
	}
	c := a.c
	if c.debug {
		c.log.Debug("lock: skipped", "key", a.key, "owner", a.owner, "reason", err.Reason, "provider", err.Provider, "holder", holder, "retry_after", retryAfter)
	}
	c.emit(Event{Kind: EventSkipped, Key: a.key, Owner: a.owner, Waited: time.Since(a.began), Err: err})
	return err
}

// ended reports whether ctx has ended, or will in a moment: its deadline
// has passed but its timer has not run yet (or the caller's context, its
// parent, has ended and the end has not reached ctx yet). It then waits for
// ctx to end, so that its error and cause are set. A call sent in that
// moment would be refused unsent (go-redis checks the context first), and
// its error, the context's, would read as if the provider had not
// answered; a grant that came in that moment came after the caller's
// deadline, and is handed on.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done()
		return true
	}
	return false
}

// failed names the operation and the key of a provider error, keeping the
// error for errors.Is and errors.As. The library's own errors name the key
// already.
func (a *acquisition) failed(ctx context.Context, op string, err error) error {
	return a.c.failed(ctx, op, a.key, err)
}

// lockFor returns the held Lock of a grant of rec, requested at sent, and
// starts its lease timer.
func (a *acquisition) lockFor(rec Record, sent time.Time) *Lock {
	c, o := a.c, a.o
	ttl := a.leaseOf(rec)
	l := newLock(c, a.key, a.owner, a.claim, rec.Token, o, sent, ttl)
	if c.debug {
		c.log.Debug("lock: acquired", "key", a.key, "owner", a.owner, "token", rec.Token)
	}
	// The event before the timers: a loss is never reported before its grant.
	if len(c.hooks) > 0 { // else spare the clock read
		c.emit(Event{Kind: EventAcquired, Key: a.key, Owner: a.owner, Token: rec.Token, MaxDuration: o.MaxDuration, Lease: o.Lease, Waited: time.Since(a.began)})
	}
	l.keep(sent, ttl)
	return l
}

// leaseOf returns the lease of a grant of rec: its TTL, or o.Lease when
// that is shorter or the TTL is unknown.
func (a *acquisition) leaseOf(rec Record) time.Duration {
	if rec.TTL > 0 && rec.TTL < a.o.Lease {
		return rec.TTL
	}
	return a.o.Lease
}
