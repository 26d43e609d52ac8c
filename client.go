package lock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Client acquires, renews and releases locks on a Provider. Create one per
// process (or per provider) with [NewClient] and share it: it is safe for
// concurrent use. Close it when done.
type Client struct {
	provider       Provider
	prefix         string
	log            *slog.Logger
	clock          Clock
	hooks          []func(Event)
	debug          bool // log is enabled at debug level
	poll           time.Duration
	handoff        time.Duration // see WithHandoffWindow
	releaseTimeout time.Duration

	identity string // see WithIdentity
	id       string // this client's random id; it names its inbox
	owners   string // the start of every owner (see owner.go)
	seq      atomic.Uint64

	inbox  inbox       // the waiters, and the grants handed to them (topic.go)
	leases leaseTimers // the timers of held locks (lease.go)
	busy   busyKeys    // keys seen contended lately (acquire.go)

	shared  atomic.Pointer[sharedBound] // the deadline of detached contexts (see bound)
	lastErr atomic.Pointer[error]       // the provider's last error since its last success (see lastError)

	closing context.Context // cancelled with ErrClosed by Close
	stop    context.CancelCauseFunc
	mu      sync.Mutex     // guards closed and work.Add
	closed  bool           //
	work    sync.WaitGroup // acquisitions under way and background cleanups
}

// NewClient returns a Client that stores locks in p. It fails for a nil
// provider and a prefix that makes keys Redis Cluster cannot hash together.
func NewClient(p Provider, opts ...ClientOption) (*Client, error) {
	if p == nil {
		return nil, invalidf("nil provider")
	}
	c := &Client{
		provider:       p,
		prefix:         DefaultPrefix,
		log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock:          systemClock{},
		poll:           time.Second,
		handoff:        time.Second,
		releaseTimeout: 5 * time.Second,
		id:             uuid.NewString(),
	}
	for _, o := range opts {
		o(c)
	}
	owners, err := ownersOf(c.identity, c.id)
	if err != nil {
		return nil, err
	}
	c.owners = owners
	if !hasHashTag(c.Key("x")) {
		return nil, invalidf("prefix %q starts a Redis hash tag that is empty (\"{}\")", c.prefix)
	}
	c.debug = c.log.Enabled(context.Background(), slog.LevelDebug)
	c.closing, c.stop = context.WithCancelCause(context.Background())
	c.inbox.c = c
	return c, nil
}

// Close wakes every waiter of the Client with an error matching [ErrClosed],
// waits for acquisitions under way to end and for the cleanups of abandoned
// ones (each bounded by the release timeout), and stops listening for
// grants. No acquisition succeeds after Close returns. Locks already held
// stay held until released. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop(ErrClosed)
	c.work.Wait()
	c.inbox.close()
	return nil
}

// enter counts an acquisition or a cleanup as under way, unless the Client
// is closed. The caller calls c.work.Done when it ends.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.work.Add(1)
	return true
}

// Do acquires the lock called name, runs fn while holding it, and releases it,
// even when fn fails or panics. fn's context is cancelled, with a *LostError as
// its cause (context.Cause), if the lock is lost while fn runs; [FromContext]
// returns the held lock. Do returns the acquisition's error (fn not run), or
// fn's error joined with the release's (a *LostError when the lock was lost).
func (c *Client) Do(ctx context.Context, name string, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	key, err := c.checkName(name)
	if err != nil {
		return err
	}
	return c.do(ctx, key, o, fn)
}

// do is Do for the lock under key.
func (c *Client) do(ctx context.Context, key string, o Options, fn func(ctx context.Context) error) error {
	l, err := c.acquire(ctx, key, c.newOwner(""), claim{}, o)
	if err != nil {
		return err
	}
	return l.run(ctx, fn)
}

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
func (d *detachedCtx) Done() <-chan struct{}       { return d.bound.Done() }
func (d *detachedCtx) Err() error                  { return d.bound.Err() }
func (d *detachedCtx) Value(key any) any           { return d.values.Value(key) }

// AfterFunc arranges for f to run when d ends. The context package looks
// for it: a context derived from d (a provider's context.WithTimeout, say)
// follows d's end through it, rather than through a goroutine of its own,
// as it does for the contexts it makes itself.
func (d *detachedCtx) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(d.bound, f) }

func (c *Client) emit(e Event) {
	if len(c.hooks) == 0 {
		return
	}
	e.Time = c.clock.Now()
	for _, h := range c.hooks {
		h(e)
	}
}

// failed names the operation and the key of a provider error, as an
// acquisition's does, and remembers it as the provider's last error (see
// lastError) unless it is a context's. ctx is the caller's context, or
// context.Background() when the call ran on a context of the library's
// own: a call that ended because the caller's context did is no sign of the
// provider's health (the error does not match [ErrUnavailable]).
func (c *Client) failed(ctx context.Context, op, key string, err error) error {
	if errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrInvalidArgument) {
		return err
	}
	ended := isContextErr(err)
	if !ended {
		c.lastErr.Store(&err)
	}
	return &opError{op: op, key: key, err: err, callerEnded: ended && ctx.Err() != nil}
}

// answered forgets the provider's last error: a call has succeeded.
func (c *Client) answered() {
	if c.lastErr.Load() != nil {
		c.lastErr.Store(nil)
	}
}

// lastError returns the last error a call of c to the provider returned
// since the last success, other than a context's; nil when there is none.
func (c *Client) lastError() error {
	if p := c.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}
