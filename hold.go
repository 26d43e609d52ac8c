package lock

// Holds: what a semaphore, a read-write lock and a multi-lock grant. A
// semaphore's or a read-write lock's hold is one claim on a counted name
// (see semaphore.go); a multi-lock's is a set of ordinary locks, held
// together. Every member has its own lease, renewal and fencing token, and
// the loss of any one ends the whole hold.

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// Hold is what a Semaphore or an [RWMutex] grants (one member: the claim,
// a Lock whose Key is the name's), or the locks of AcquireAll, held
// together. Each member is a Lock with a lease of its own, renewed in the
// background; the
// loss of any member ends the hold: its Context is cancelled with that
// member's *LostError as cause (the error names the member's key), and the
// other members are released at once. Its methods are safe for concurrent
// use.
type Hold struct {
	c      *Client
	token  uint64
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	locks []*Lock // set by newHold, never changed
	// outcome is how the hold ended, once it did: the *LostError of the
	// first member lost (set at the loss, and kept whatever the release
	// says), else the provider's errors of the release, or nil after a
	// clean one. The release sets it before done is closed.
	outcome  error
	write    bool        // an RWMutex's write hold, until Downgrade
	released bool        // Release was called
	onEnd    func(error) // run's: told how the hold ended, as its Context is

	relOnce sync.Once
	done    chan struct{} // closed when the members are released
}

// newHold returns the hold of locks, whose token is token, and watches the
// members for a loss.
func newHold(c *Client, token uint64, locks []*Lock) *Hold {
	h := &Hold{c: c, token: token, locks: locks, done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	for _, l := range locks {
		h.watch(l)
	}
	return h
}

// watch ends h when l is lost while it is a member.
func (h *Hold) watch(l *Lock) {
	l.onLoss(func(err error) {
		var e *LostError
		if !errors.As(err, &e) {
			e = l.lostError(LostCorrupt, err)
		}
		h.lose(l, e)
	})
}

// lose ends h for the loss e of l, a member: the context first, then the
// other members are released.
func (h *Hold) lose(l *Lock, e *LostError) {
	h.mu.Lock()
	first := h.lostLocked() == nil && slices.Contains(h.locks, l)
	onEnd := h.onEnd
	if first {
		h.outcome = e
		h.onEnd = nil
	}
	h.mu.Unlock()
	if !first {
		return
	}
	h.cancel(e)
	if onEnd != nil {
		onEnd(e)
	}
	h.c.background(context.Background(), func(ctx context.Context) { h.releaseAll(ctx) })
}

// Locks returns the members of the hold, in the order of their keys for
// AcquireAll; the one claim of a Semaphore's or an [RWMutex]'s hold. Each
// has its key and its own fencing token ([Lock.Token]).
func (h *Hold) Locks() []*Lock {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Lock(nil), h.locks...)
}

// Token returns the fencing token of the grant, for a Semaphore's and an
// [RWMutex]'s holds: its claim's, strictly greater than every earlier hold's
// of the same name, readers' and writers' alike. For AcquireAll it is
// zero: each member has its own (Locks).
func (h *Hold) Token() uint64 { return h.token }

// Context returns a context that is cancelled when the hold ends: on the
// loss of a member, with its *LostError as cause (context.Cause), at the
// moment that member's lease timer declares it, so before another caller
// can be granted it; at Release, with context.Canceled.
func (h *Hold) Context() context.Context { return h.ctx }

// Done returns a channel that is closed once every member was released:
// after Release, or after a loss (the others are released then).
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err returns nil while the hold lasts and after a clean Release, and the
// *LostError of the first member lost otherwise.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.lostLocked(); e != nil {
		return e
	}
	return nil
}

// lostLocked returns the *LostError of the first member lost, or nil. The
// caller holds h.mu.
func (h *Hold) lostLocked() *LostError {
	e, _ := h.outcome.(*LostError)
	return e
}

// Release ends the hold: it cancels the Context and releases every member
// (together: one round trip's time). It returns nil after a clean release,
// the *LostError of the first member lost, and the provider's errors
// otherwise (joined). Release after Release answers as [Lock.Release] does:
// what the first returned when it failed, and after a clean one an error
// matching [ErrReleased]; while the first is under way it waits for its
// outcome. Release on a nil *Hold (what a failed acquisition returns)
// returns an error matching [ErrInvalidArgument].
func (h *Hold) Release(ctx context.Context) error {
	if h == nil {
		return invalidf("Release on a nil *Hold: nothing was acquired")
	}
	h.mu.Lock()
	again := h.released
	h.released = true
	onEnd := h.onEnd
	h.onEnd = nil
	h.mu.Unlock()
	h.cancel(context.Canceled)
	if onEnd != nil {
		onEnd(context.Canceled)
	}
	h.releaseAll(ctx)
	h.mu.Lock()
	outcome := h.outcome
	h.mu.Unlock()
	if again && outcome == nil {
		return &releasedError{op: "release", key: h.locks[0].key}
	}
	return outcome
}

// releaseAll releases the members, once; every call returns when they are.
func (h *Hold) releaseAll(ctx context.Context) {
	h.relOnce.Do(func() {
		defer close(h.done)
		h.mu.Lock()
		locks := h.locks
		h.mu.Unlock()
		var lost *LostError
		err := releaseLocks(ctx, locks, &lost)
		h.mu.Lock()
		switch {
		case h.lostLocked() != nil:
		case lost != nil:
			h.outcome = lost
		default:
			h.outcome = err
		}
		h.mu.Unlock()
	})
	<-h.done
}

// releaseLocks releases locks together and returns their errors, joined,
// but for a loss, which it stores in *lost (the first) and an [ErrReleased];
// lost may be nil.
func releaseLocks(ctx context.Context, locks []*Lock, lost **LostError) error {
	var errs []error
	if len(locks) == 1 {
		errs = []error{locks[0].Release(ctx)} // a claim's: on the stack
	} else {
		errs = releaseEach(ctx, locks)
	}
	var rest []error
	for _, err := range errs {
		var e *LostError
		switch {
		case err == nil, errors.Is(err, ErrReleased):
		case errors.As(err, &e):
			if lost != nil && *lost == nil {
				*lost = e
			}
		default:
			rest = append(rest, err)
		}
	}
	return errors.Join(rest...)
}

// releaseEach releases locks together and returns their errors.
func releaseEach(ctx context.Context, locks []*Lock) []error {
	errs := make([]error, len(locks))
	together(len(locks), func(i int) { errs[i] = locks[i].Release(ctx) })
	return errs
}

// run calls fn under h, with a context that ends on a loss (cause: the
// *LostError) or when ctx ends, and releases h. [HoldFromContext] finds h in
// it, [FromContext] h's first member, and the call chain (Lock.outer) every
// member, so that a wait for any of them from fn fails at once rather than
// wait for itself.
func (h *Hold) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	outer, _ := FromContext(ctx)
	for i := len(h.locks) - 1; i >= 0; i-- {
		h.locks[i].outer, outer = outer, h.locks[i]
	}
	first := h.locks[0]
	first.scope = scope{Context: ctx, l: first, h: h}
	hctx, cancel := context.WithCancelCause(&first.scope)
	h.mu.Lock()
	lost := h.lostLocked()
	if lost == nil {
		h.onEnd = cancel
	}
	h.mu.Unlock()
	if lost != nil {
		cancel(lost)
	}
	return under(ctx, hctx, cancel, fn, h.Release)
}

// together calls fn(0) … fn(n-1) at once, each on a goroutine of its own
// (but for a single call), and returns when every call has returned.
func together(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}
