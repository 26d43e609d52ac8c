package lock

import (
	"context"
	"time"
)

// background runs fn on a detached context in a goroutine that Close waits
// for; after Close, it runs fn at once.
func (c *Client) background(ctx context.Context, fn func(ctx context.Context)) {
	if !c.enter() {
		fn(c.detached(ctx))
		return
	}
	go func() {
		defer c.work.Done()
		fn(c.detached(ctx))
	}()
}

// settle runs fn, a clean-up (a release, a Leave, a notice), on a detached
// context bounded by the release timeout, and returns its error. When ctx
// has a deadline that comes first, it waits for fn only until that
// deadline, or settleSlack from now if that is later, and settleSlack more:
// then fn goes on in the background (Close waits for it, and its context
// still ends it at the release timeout), and settle returns errUnsettled.
// So a call bounded by a deadline returns by it (and a moment), whatever the
// provider does; a provider that answers lets fn end first, and the call
// returns what it did.
func (c *Client) settle(ctx context.Context, fn func(ctx context.Context) error) error {
	if !c.bounded(ctx) {
		return fn(c.detached(ctx))
	}
	d, _ := ctx.Deadline()
	done := make(chan error, 1)
	c.background(ctx, func(ctx context.Context) { done <- fn(ctx) })
	t := time.NewTimer(max(time.Until(d), 0) + settleSlack)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errUnsettled
	}
}

// bounded reports whether ctx has a deadline that comes before the
// release timeout: a clean-up then needs settle to return by it.
func (c *Client) bounded(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < c.releaseTimeout
}

// settleSlack is how long past its deadline a call waits for its clean-up
// (see settle): enough for a provider that answers at all.
const settleSlack = 50 * time.Millisecond

// waitFor waits for ch to be closed, as settle waits for a clean-up, and
// reports whether it was.
func (c *Client) waitFor(ctx context.Context, ch <-chan struct{}) bool {
	d, ok := ctx.Deadline()
	if !ok {
		<-ch
		return true
	}
	select {
	case <-ch:
		return true
	default:
	}
	t := time.NewTimer(max(time.Until(d), 0) + settleSlack)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// detached returns a context for a release, a grace-period write or a
// clean-up: ctx's values without its cancellation, ended by the release
// timeout.
func (c *Client) detached(ctx context.Context) context.Context {
	d := c.detach(ctx)
	return &d
}

// detach is detached as a value, for a Lock to keep.
func (c *Client) detach(ctx context.Context) detachedCtx {
	return detachedCtx{values: withoutCancel(ctx), bound: c.bound()}
}

// withoutCancel is context.WithoutCancel, but ctx itself when it is never
// cancelled: no allocation for the context.Background of most callers.
func withoutCancel(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// bound returns a context that ends between nine tenths of the release
// timeout and the whole of it from now. Calls within a tenth of the timeout
// share one, and so one timer, rather than a timer each.
func (c *Client) bound() context.Context {
	if b := c.shared.Load(); b != nil && time.Until(b.end) > c.releaseTimeout-c.releaseTimeout/10 {
		return b.ctx
	}
	b := &sharedBound{end: time.Now().Add(c.releaseTimeout)}
	b.ctx, b.cancel = context.WithDeadline(context.Background(), b.end)
	c.shared.Store(b)
	return b.ctx
}

// sharedBound is a context that detached contexts share for their deadline.
// Its timer cancels it at end; nothing else does.
type sharedBound struct {
	end    time.Time
	ctx    context.Context
	cancel context.CancelFunc // never called: the deadline ends it
}

// detachedCtx has the values of one context and the deadline of another.
// values must hide any cancellation of its own (withoutCancel): context.Cause
// finds a cancelled parent through Value.
type detachedCtx struct {
	values context.Context
	bound  context.Context
}

func (d *detachedCtx) Deadline() (time.Time, bool) { return d.bound.Deadline() }

func (d *detachedCtx) Done() <-chan struct{} { return d.bound.Done() }

func (d *detachedCtx) Err() error { return d.bound.Err() }

func (d *detachedCtx) Value(key any) any { return d.values.Value(key) }

// AfterFunc arranges for f to run when d ends. The context package looks
// for it: a context derived from d (a provider's context.WithTimeout, say)
// follows d's end through it, rather than through a goroutine of its own,
// as it does for the contexts it makes itself.
func (d *detachedCtx) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(d.bound, f) }
