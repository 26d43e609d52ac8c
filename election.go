package lock

// Elections: a role (a scheduler, the consumer of a singleton queue, the one
// writer of a table) is a lock that its leader holds for as long as it
// lives. Campaign waits for it in the lock's fair queue and holds it with no
// limit; its fencing token is the term's number. Lead campaigns, runs the
// leader's work, and campaigns again, for as long as its context lives.
// Observe reads who leads, every poll interval. All three are built on
// Acquire, the lease timer and Inspect: every Provider runs them as it is.

import (
	"context"
	"errors"
	"time"
)

// DefaultLeadPause is how long Lead waits, when [LeadOptions.Pause] is zero,
// after a term ends before it campaigns again, and after a campaign that
// failed (doubled for each failure in a row, up to 16 times).
const DefaultLeadPause = time.Second

// ElectionOptions say how a candidate campaigns for a role and holds it.
// The zero value holds the role with a [DefaultLease] renewed with no limit.
type ElectionOptions struct {
	// Lease is the TTL of the role's record while a leader holds it,
	// renewed every Lease/3: a leader whose process dies is succeeded within
	// a lease and a round trip (the first candidates look again as the TTL
	// they read runs out, not at their next poll). Zero means [DefaultLease].
	Lease time.Duration

	// TermLimit, when set, bounds a term: at its end the leader loses the
	// role ([LostMaxDuration]) and must campaign again, behind the
	// candidates already waiting. Zero sets no limit: the term lasts until
	// Resign or a loss. (It is not called MaxDuration because it differs
	// from [Options.MaxDuration], whose zero means an hour.)
	TermLimit time.Duration
}

// options returns the Options of the role's lock: a fair wait, bounded by
// the caller's context alone, and a hold of o.TermLimit, or [NoHoldLimit].
func (o ElectionOptions) options() (Options, error) {
	if o.TermLimit < 0 {
		return Options{}, invalidf("negative TermLimit %v", o.TermLimit)
	}
	lo := Options{Wait: true, Fair: true, Lease: o.Lease, MaxDuration: o.TermLimit}
	if lo.MaxDuration == 0 {
		lo.MaxDuration = NoHoldLimit
	}
	lo.MaxWait = NoHoldLimit
	return lo.resolved()
}

// Term is one candidate's leadership of a role: a lock held under the role's
// name, renewed until Resign or a loss. Its token is the term's number,
// strictly greater than every earlier term's of the role (it is the lock's
// fencing token: pass it to [RedisFence], [SQLFence] or postgres.Fence so that
// a paused former leader cannot write). Its methods are safe for concurrent
// use.
type Term struct {
	role   string
	l      *Lock
	since  time.Time
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Campaign waits to lead role, in arrival order (the lock's fair queue:
// every candidate of the role, in any process, is served in the order it
// began to wait), for as long as ctx allows, and returns the Term it won.
// role is a lock name: Inspect, List, ForceRelease and lockctl show and free
// the role under it ([Status.Kind] "role"). A role is not a lock: Campaign on a
// name held with Acquire or Do, and Acquire or Do on a role held by a
// Campaign, fail with [ErrInvalidArgument] as soon as they see the other
// holding it; so do Campaign on a name in use as a Semaphore or an
// [RWMutex], and they on a role (see [Kind]).
//
// ctx bounds the wait only: the Term outlives it (its Context keeps ctx's
// values, not its cancellation), until Resign or a loss. A campaign that
// fails returns an error and no Term, and leaves nothing of the candidate
// stored: a *NotAcquiredError with the context's error (or [ErrClosed] when
// the Client closes during the campaign; ErrClosed itself when it was
// closed before), also when ctx ended just as the role was granted (the
// role is then handed on at once); a *LostError when the role was lost
// before Campaign could return it (the process was paused past the lease);
// the provider's error; ErrInvalidArgument for a bad role or options, or a
// name held as a lock. A
// wait that the provider interrupts (a grant that expired before the
// candidate took it up, a queue entry gone) is taken up again by the lock's
// waiter, which keeps waiting: it never returns a role it does not hold.
func (c *Client) Campaign(ctx context.Context, role string, o ElectionOptions) (*Term, error) {
	key, err := c.checkName(role)
	if err != nil {
		return nil, err
	}
	lo, err := o.options()
	if err != nil {
		return nil, err
	}
	l, err := c.acquire(ctx, key, c.newOwner(roleTag), claim{}, lo)
	if err != nil {
		return nil, err
	}
	c.announce(ctx, key, Notice{Owner: l.Owner(), Token: l.Token(), TTL: lo.Lease}) // to Observe
	if ctx.Err() != nil {
		err = &NotAcquiredError{Key: key, Reason: context.Cause(ctx)}
	} else {
		err = l.heldErr()
	}
	if err != nil {
		if l.Release(ctx) == nil { // hands the role on
			c.announce(ctx, key, Notice{})
		}
		return nil, err
	}
	t := &Term{role: role, l: l, since: time.Now()}
	l.outer, _ = FromContext(ctx)
	t.ctx, t.cancel = context.WithCancelCause(&scope{Context: withoutCancel(ctx), l: l})
	l.onLoss(t.cancel)
	return t, nil
}

// Role returns the role the term leads.
func (t *Term) Role() string { return t.role }

// Token returns the term's number: the lock's fencing token, strictly
// greater than the number of every earlier term of the role on the same
// provider.
func (t *Term) Token() uint64 { return t.l.Token() }

// Owner returns the id of the term's lock ([Lock.Owner]): what Observe and
// Inspect report as the leader's Owner.
func (t *Term) Owner() string { return t.l.Owner() }

// Since returns when Campaign won the term, by this process's clock.
func (t *Term) Since() time.Time { return t.since }

// Context returns a context that is cancelled when the term ends: on a loss
// with the *LostError as its cause (context.Cause), at the moment the lease
// timer declares it, which is before the role's record can expire and so
// before another candidate's Campaign can return; at Resign with
// context.Canceled, before the role is handed on. It has the values of
// Campaign's context, and [FromContext] returns the term's Lock.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns a channel that is closed when the term is lost, or when a
// Resign has ended: as [Lock.Done], only once the outcome is known, so Err
// read after it is final.
func (t *Term) Done() <-chan struct{} { return t.l.Done() }

// Err returns nil while the term lasts and after a clean Resign, and the
// *LostError ([ErrLost]) once the role was lost, as [Lock.Err].
func (t *Term) Err() error { return t.l.Err() }

// Resign ends the term: it cancels the term's Context, then releases the
// role's lock, which hands the role to the first candidate waiting, in the
// release itself (one call to the provider). It runs on a context of its
// own, bounded by the Client's release timeout, so a cancelled ctx cannot
// leave the role held. It returns nil after a clean handover or release,
// the *LostError when the role had been lost, and the provider's error
// otherwise (the record then expires within its lease, and the next
// candidate takes the role then). Resign after Resign returns what
// [Lock.Release] after Release does.
func (t *Term) Resign(ctx context.Context) error {
	t.cancel(nil)
	err := t.l.Release(ctx)
	if err == nil { // else the record ended before, or ends at its expiry, when observers read
		t.l.c.announce(ctx, t.l.key, Notice{})
	}
	return err
}

// LeadOptions configure Lead. The zero value campaigns with the zero
// [ElectionOptions], calls no hook, and pauses [DefaultLeadPause] between terms.
type LeadOptions struct {
	ElectionOptions

	// OnElected is called with each term Lead wins, on Lead's goroutine,
	// before fn runs. Nil means none.
	OnElected func(t *Term)

	// OnStopped is called with each term OnElected was called for, once it
	// has ended (Done is closed): fn has returned, the role was handed on
	// or lost. err is fn's error, joined with the loss (once: fn's error is
	// often the loss itself) or with Resign's error; nil when fn returned
	// nil and the role was handed on cleanly. It is never called for a term
	// Lead did not win, nor when fn panicked. Nil means none.
	OnStopped func(t *Term, err error)

	// Pause is how long Lead waits after a term ends before it campaigns
	// again, and after a campaign that failed (doubled for each failure in
	// a row, up to 16 times): a flapping provider is not hammered. The
	// role passes to the other candidates at once; only this candidate's
	// return to the queue waits. Zero means [DefaultLeadPause].
	Pause time.Duration
}

// Lead leads role whenever this process can, until ctx ends: it campaigns
// (see Campaign), runs fn under a context that ends with the term, waits
// for fn to return, ends the term, and campaigns again. fn never runs
// twice at once, and a term's work ends before the next term begins.
//
// fn's context is cancelled when the term is lost (with the *LostError as
// cause, before another candidate can be elected) or when ctx ends (with
// ctx's cause); it carries the term's Lock ([FromContext]), whose Token is
// the term's number, for fenced writes. When fn returns, Lead resigns the
// role, whatever fn returned: a leader is a process running fn, so fn
// should return only when its context ends; one that returns nil earlier
// (its work done) hands the role to the next candidate and campaigns again
// after Pause, at the back of the queue. A loss, a failed campaign (the
// provider unreachable) and an error of fn do not stop Lead: it pauses and
// campaigns again, without a restart of the process. A panic in fn resigns
// the role and is not recovered.
//
// Lead returns context.Cause(ctx) once ctx has ended and the last term,
// if any, has ended; an error matching [ErrClosed] when the Client is closed
// while Lead campaigns or pauses (a *NotAcquiredError when it closes during
// a campaign; a term under way is not ended by Close); [ErrInvalidArgument]
// for a nil fn, a bad role or bad options, at once.
func (c *Client) Lead(ctx context.Context, role string, fn func(ctx context.Context) error, o LeadOptions) error {
	if fn == nil {
		return invalidf("nil function")
	}
	if _, err := c.checkName(role); err != nil {
		return err
	}
	if _, err := o.options(); err != nil {
		return err
	}
	if o.Pause < 0 {
		return invalidf("negative Pause %v", o.Pause)
	}
	if o.Pause == 0 {
		o.Pause = DefaultLeadPause
	}
	for failures := 0; ; {
		t, err := c.Campaign(ctx, role, o.ElectionOptions)
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidArgument):
			return err
		case err != nil:
			failures++
			pause := o.Pause << min(failures-1, 4)
			c.log.Warn("lock: campaign failed", "role", role, "err", err, "again_in", pause)
			if err := c.pauseLead(ctx, pause); err != nil {
				return err
			}
			continue
		}
		failures = 0
		c.serve(ctx, t, fn, o)
		if err := c.pauseLead(ctx, o.Pause); err != nil {
			return err
		}
	}
}

// serve runs fn for the term t that Lead won, and ends the term.
func (c *Client) serve(ctx context.Context, t *Term, fn func(ctx context.Context) error, o LeadOptions) {
	if c.debug {
		c.log.Debug("lock: elected", "role", t.role, "term", t.Token())
	}
	if o.OnElected != nil {
		o.OnElected(t)
	}
	fctx, cancel := context.WithCancelCause(t.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()
	failedOnItsOwn := false
	err := under(ctx, fctx, cancel, func(fctx context.Context) error {
		err := fn(fctx)
		failedOnItsOwn = err != nil && fctx.Err() == nil && ctx.Err() == nil
		return err
	}, t.Resign)
	if failedOnItsOwn {
		c.log.Warn("lock: leader's function failed", "role", t.role, "term", t.Token(), "err", err)
	} else if c.debug {
		c.log.Debug("lock: term ended", "role", t.role, "term", t.Token(), "err", err)
	}
	if o.OnStopped != nil {
		o.OnStopped(t, err)
	}
}

// pauseLead waits d, and returns nil; or ctx's cause if ctx ends first, or
// [ErrClosed] if the Client closes first.
func (c *Client) pauseLead(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.closing.Done():
		return ErrClosed
	}
}
