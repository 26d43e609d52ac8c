package lock

import (
	"context"
	"errors"
)

// run calls fn under l and releases l. A loss is reported once: fn's error
// is often the loss itself (its context's cause).
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	l.outer, _ = FromContext(ctx)
	l.scope = scope{Context: ctx, l: l}
	hctx, cancel := context.WithCancelCause(&l.scope)
	l.onLoss(cancel)
	return under(ctx, hctx, cancel, fn, l.Release)
}

// under runs fn under a hold (a Lock's, a Hold's, a Term's): with hctx,
// the hold's context, which its caller has made to end on a loss; then it
// ends hctx (cancel) and the hold (end, a release or a resignation), even
// when fn panics, and returns fn's error joined with end's (joinRelease).
func under(ctx, hctx context.Context, cancel context.CancelCauseFunc, fn, end func(context.Context) error) (err error) {
	defer func() {
		cancel(nil)
		err = joinRelease(err, end(ctx))
	}()
	return fn(hctx)
}

// joinRelease returns err, the error of a function run under a hold (a
// Lock's, a Hold's, a Term's), joined with rerr, the error of the release
// that ended the hold; but without rerr when it is a loss that err already
// carries (fn's error is often the loss itself, its context's cause), or
// [ErrReleased] (fn released the hold itself).
func joinRelease(err, rerr error) error {
	if rerr == nil || errors.Is(rerr, ErrReleased) || reported(err, rerr) {
		return err
	}
	return errors.Join(err, rerr)
}

// reported reports whether rerr is a loss that err already carries. (Its
// own function: the *LostError that errors.As fills escapes, and would be
// allocated on every call of joinRelease, a clean release's too.)
func reported(err, rerr error) bool {
	var lost *LostError
	return errors.As(rerr, &lost) && errors.Is(err, lost)
}

// The keys of the values [FromContext] and [HoldFromContext] find.
type (
	ctxKey  struct{}
	holdKey struct{}
)

// scope is the context of a handler run under l: ctx, in which [FromContext]
// finds l, and [HoldFromContext] h when l is the first member of a Hold run
// (Hold.run). It lives in the Lock, saving an allocation.
type scope struct {
	context.Context
	l *Lock
	h *Hold
}

func (s *scope) Value(key any) any {
	switch {
	case key == (ctxKey{}):
		return s.l
	case key == (holdKey{}) && s.h != nil:
		return s.h
	}
	return s.Context.Value(key)
}

// FromContext returns the lock held by the innermost call whose function
// received ctx, and whether there is one: [Client.Do], Middleware, a
// Primitive's Run, Lead's function or a Term's Context (the term's lock),
// and [Semaphore.Do], [RWMutex.Do] and RDo, and DoAll (the hold's first
// member; [HoldFromContext] gives every member).
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(ctxKey{}).(*Lock)
	return l, ok
}

// heldBy reports whether ctx's call chain holds the lock under key with c.
func heldBy(ctx context.Context, c *Client, key string, counted bool) bool {
	l, _ := FromContext(ctx)
	for ; l != nil; l = l.outer {
		if l.c == c && l.key == key && l.claim.counted() == counted && l.held() {
			return true
		}
	}
	return false
}

// HoldFromContext returns the Hold of the innermost [Semaphore.Do],
// [RWMutex.Do] or RDo, or DoAll whose function received ctx, and whether
// there is one. Its Locks are the members, each with its own key and
// fencing token: in DoAll's function, a write to each locked resource can
// be fenced with its own lock's token ([FromContext] gives the first member
// only).
func HoldFromContext(ctx context.Context) (*Hold, bool) {
	h, ok := ctx.Value(holdKey{}).(*Hold)
	return h, ok
}
