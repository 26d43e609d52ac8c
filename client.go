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
	busy   busyKeys    // keys seen contended lately (recent.go)

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
