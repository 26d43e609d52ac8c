// Package lock provides distributed locks for Go services that run as several
// replicas: a job that must run once, a migration the others wait for, an order
// that two requests must not process at once. A Provider stores the locks (in
// memory, or in Redis for several processes); a Client acquires, renews and
// releases them; Middleware and New wrap a handler so that it runs under a lock.
//
//	c, _ := lock.NewClient(lock.NewMemoryProvider())
//	defer c.Close()
//	err := c.Do(ctx, "nightly-report", lock.Options{}, func(ctx context.Context) error {
//		return sendReport(ctx) // runs in one replica at a time
//	})
//
// A held lock is a lease that the holder renews while it runs. When it is lost
// (renewal fails, the record is gone, MaxDuration is reached) the holder is
// told: its context is cancelled with an error matching ErrLost. Every grant
// carries a fencing token that the protected resource can check.
package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Client acquires, renews and releases locks on a Provider. Create one per
// process (or per provider) with NewClient and share it: it is safe for
// concurrent use. Close it to stop its subscription.
type Client struct {
	provider       Provider
	topic          Topic
	prefix         string
	log            *slog.Logger
	clock          Clock
	hooks          []func(Event)
	debug          bool // log is enabled at debug level
	poll           time.Duration
	releaseTimeout time.Duration

	id  string // this client's random id; owners are id-sequence
	seq atomic.Uint64

	waiters waiters
	bg      sync.WaitGroup // cleanups of failed attempts

	mu     sync.Mutex
	closed bool

	subMu      sync.Mutex // serializes subscribing; never held with mu
	subscribed atomic.Bool
	stopSub    func()
}

// NewClient returns a Client that stores locks in p. It fails only for a nil
// provider.
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
		releaseTimeout: 5 * time.Second,
		id:             uuid.NewString(),
	}
	if t, ok := p.(Topic); ok {
		c.topic = t
	}
	for _, o := range opts {
		o(c)
	}
	c.debug = c.log.Enabled(context.Background(), slog.LevelDebug)
	return c, nil
}

// Close stops the Client's subscription to end-of-lock announcements and waits
// for its background cleanups. Locks already held stay held until released;
// later acquisitions fail with ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.subMu.Lock()
	stop := c.stopSub
	c.stopSub = nil
	c.subMu.Unlock()
	if stop != nil {
		stop()
	}
	c.bg.Wait()
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Key returns the key of the lock called name: the Client's prefix and name.
func (c *Client) Key(name string) string { return c.prefix + name }

// Acquire takes the lock called name. On success the caller holds it, and it is
// renewed in the background until Release, loss, or MaxDuration. Without
// o.Wait it tries once; with it, it waits as Options.Wait says. It returns a
// *NotAcquiredError (ErrNotAcquired) when the lock was held, in its grace
// period, or the wait ended, and the provider's error otherwise; after a failure
// nothing of the caller's is left stored.
func (c *Client) Acquire(ctx context.Context, name string, o Options) (*Lock, error) {
	if name == "" {
		return nil, invalidf("empty lock name")
	}
	o, err := o.resolved()
	if err != nil {
		return nil, err
	}
	key := c.Key(name)
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	return c.acquire(ctx, key, c.newOwner(), o)
}

// Do acquires the lock called name, runs fn while holding it, and releases it,
// even when fn fails or panics. fn's context is cancelled, with a *LostError as
// its cause (context.Cause), if the lock is lost while fn runs; FromContext
// returns the held lock. Do returns the acquisition's error (fn not run), or
// fn's error joined with the release's (a *LostError when the lock was lost).
func (c *Client) Do(ctx context.Context, name string, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	l, err := c.Acquire(ctx, name, o)
	if err != nil {
		return err
	}
	return l.run(ctx, fn)
}

func (l *Lock) run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, l))
	l.onLoss(cancel)
	defer func() {
		cancel(nil)
		err = errors.Join(err, l.Release(ctx))
	}()
	return fn(hctx)
}

func (c *Client) newOwner() string {
	return c.id + "-" + strconv.FormatUint(c.seq.Add(1), 36)
}

// acquire runs one acquisition: one attempt, or with o.Wait a wait.
func (c *Client) acquire(ctx context.Context, key, owner string, o Options) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, c.skip(key, owner, err, 0)
	}
	if _, ok := c.provider.(Queuer); o.Fair && !ok {
		return nil, invalidf("Options.Fair needs a provider that keeps a wait queue (a Queuer)")
	}
	// A waiter asks once before it waits only while the Client has no
	// subscription yet: an uncontended Client never subscribes.
	if o.Wait && c.subscribed.Load() {
		return c.wait(ctx, key, owner, o, false)
	}
	rec, sent, err := c.attempt(ctx, key, owner, o, o.Wait && o.Fair)
	if err != nil {
		// Not a NotAcquiredError, even if ctx ended meanwhile: nobody was seen
		// holding the lock.
		return nil, err
	}
	if l := c.granted(key, owner, o, rec, sent); l != nil {
		return l, nil
	}
	if rec.Ended {
		return nil, c.skip(key, owner, ErrGracePeriod, rec.TTL)
	}
	c.emit(Event{Kind: EventContended, Key: key, Owner: owner})
	if o.Wait {
		return c.wait(ctx, key, owner, o, true)
	}
	return nil, c.skip(key, owner, ErrHeld, rec.TTL)
}

// wait acquires with o.Wait. It subscribes to announcements and joins the
// key's local queue before it asks, so that every release after that reaches
// it: only the head of the queue asks (all of them with o.Fair, whose order the
// provider keeps), at once and again when an announcement or the fallback poll
// wakes it. A waiter that arrives while others wait in this process queues
// behind them without asking. looked says whether the caller has asked once
// already (and reported the contention).
func (c *Client) wait(ctx context.Context, key, owner string, o Options, looked bool) (*Lock, error) {
	wctx, cancel := context.WithTimeout(ctx, o.MaxDuration)
	defer cancel()
	c.subscribe(wctx)
	w := c.waiters.join(key, owner, o.Lease)
	c.log.Debug("lock: waiting", "key", key, "owner", owner)

	var retryAfter time.Duration
	start := time.Now()
	// joined: w is in the provider's wait queue (if it keeps one): at once
	// with o.Fair, after a poll interval of waiting otherwise. From then on
	// nobody overtakes it, and it asks whenever it is woken.
	joined := o.Fair
	// fail leaves the queues and returns err. A waiter that a releaser has
	// claimed meanwhile takes the transfer's outcome, and frees a lock it was
	// given.
	fail := func(err error) (*Lock, error) {
		outcome, unsure := c.waiters.leave(key, w, true)
		if outcome {
			if g := <-w.grantc; g.ok {
				_ = c.granted(key, owner, o, g.rec, g.sent).Release(ctx)
			}
		}
		// A transfer to w may have happened with no reply (unsure).
		c.forget(ctx, key, owner, unsure, joined)
		return nil, err
	}
	ended := func() (*Lock, error) {
		reason := ctx.Err()
		if reason == nil {
			reason = ErrTimeout
		}
		return fail(c.skip(key, owner, reason, retryAfter))
	}

	timer := time.NewTimer(0) // the first look
	defer timer.Stop()
	for {
		select {
		case g := <-w.grantc: // only a grant: w has not given up
			l := c.granted(key, owner, o, g.rec, g.sent)
			l.chain = g.chain
			return l, nil
		case <-w.wake:
		case <-timer.C:
		case <-wctx.Done():
			return ended()
		}
		joined = joined || time.Since(start) >= c.poll
		// Only the head of this process's queue asks, unless w is in the
		// provider's queue, which keeps the order.
		if c.waiters.startAttempt(key, w, joined) {
			rec, sent, err := c.attempt(wctx, key, owner, o, joined)
			c.waiters.endAttempt(w)
			switch {
			case err != nil && looked && wctx.Err() != nil:
				return ended()
			case err != nil:
				return fail(err) // as without Wait: nobody was seen holding it
			case rec.Ended:
				return fail(c.skip(key, owner, ErrGracePeriod, rec.TTL))
			}
			if l := c.granted(key, owner, o, rec, sent); l != nil {
				_, _ = c.waiters.leave(key, w, false)
				return l, nil
			}
			retryAfter = rec.TTL
		}
		if !looked {
			c.emit(Event{Kind: EventContended, Key: key, Owner: owner})
			looked = true
		}
		// Poll no later than the holder's expiry and the poll interval, with
		// jitter so that processes do not poll in step.
		next := c.poll
		if retryAfter > 0 && retryAfter < next {
			next = retryAfter
		}
		next += time.Duration(rand.Int64N(int64(next)/8 + 1))
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// attempt asks the provider once, in the order of the provider's wait queue if
// it keeps one, joining it when join is true. When the provider fails (the
// record or the queue entry may have been stored with no reply), it removes
// any record and queue entry of owner's in the background (Close waits for
// it), so that a failed acquisition leaves nothing behind and the caller gets
// the error at once.
func (c *Client) attempt(ctx context.Context, key, owner string, o Options, join bool) (Record, time.Time, error) {
	sent := time.Now()
	var rec Record
	var err error
	if q, ok := c.provider.(Queuer); ok {
		// Never overtake the provider's queue; join it when asked to.
		wait := time.Duration(0)
		if join {
			wait = 3 * c.poll // a waiter looks again at least every poll interval
		}
		rec, err = q.AcquireQueued(ctx, key, owner, o.Lease, wait)
	} else {
		rec, err = c.provider.Acquire(ctx, key, owner, o.Lease)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrCorruptRecord) {
			c.forget(ctx, key, owner, true, join)
		}
		return Record{}, sent, err
	}
	return rec, sent, nil
}

// forget removes, in the background, what an acquisition that ended without
// the lock may have left: owner's record when release is true (announcing the
// release), its place in the provider's queue when dequeue is true.
func (c *Client) forget(ctx context.Context, key, owner string, release, dequeue bool) {
	q, queued := c.provider.(Queuer)
	dequeue = dequeue && queued
	if !release && !dequeue {
		return
	}
	c.background(ctx, func(ctx context.Context) {
		if release && c.provider.Release(ctx, key, owner) == nil {
			c.announce(key)
		}
		if dequeue {
			_ = q.Dequeue(ctx, key, owner)
		}
	})
}

// background runs fn on a detached context in a goroutine that Close waits
// for; after Close, it runs fn at once.
func (c *Client) background(ctx context.Context, fn func(ctx context.Context)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		dctx, cancel := c.detached(ctx)
		defer cancel()
		fn(dctx)
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		dctx, cancel := c.detached(ctx)
		defer cancel()
		fn(dctx)
	}()
}

// granted returns the held Lock when rec says owner holds key, else nil.
func (c *Client) granted(key, owner string, o Options, rec Record, sent time.Time) *Lock {
	if rec.Owner != owner || rec.Ended {
		return nil
	}
	ttl := o.Lease
	if rec.TTL > 0 && rec.TTL < ttl {
		ttl = rec.TTL
	}
	l := &Lock{
		c:           c,
		key:         key,
		owner:       owner,
		token:       rec.Token,
		opts:        o,
		start:       sent,
		maxDeadline: sent.Add(o.MaxDuration),
		leaseEnd:    leaseEnd(sent, ttl),
		done:        make(chan struct{}),
	}
	l.mu.Lock()
	l.timer = time.AfterFunc(l.nextRenewal(sent, ttl), l.renew)
	l.mu.Unlock()
	if c.debug {
		c.log.Debug("lock: acquired", "key", key, "owner", owner, "token", rec.Token)
	}
	c.emit(Event{Kind: EventAcquired, Key: key, Owner: owner, Token: rec.Token, MaxDuration: o.MaxDuration, Lease: o.Lease})
	return l
}

func (c *Client) skip(key, owner string, reason error, retryAfter time.Duration) error {
	err := &NotAcquiredError{Key: key, Reason: reason, RetryAfter: retryAfter}
	c.emit(Event{Kind: EventSkipped, Key: key, Owner: owner, Err: err})
	return err
}

// subscribe starts the Client's one subscription to end-of-lock announcements,
// once. Without a topic, or if subscribing fails, waiters poll.
func (c *Client) subscribe(ctx context.Context) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.subscribed.Load() || c.topic == nil || c.isClosed() {
		return
	}
	stop, err := c.topic.Subscribe(ctx, c.waiters.notify)
	if err != nil {
		c.log.Debug("lock: subscribe failed; waiters poll", "err", err)
		return
	}
	c.subscribed.Store(true)
	c.stopSub = stop
}

// detached returns a context for a release, renewal or grace-period write: not
// cancelled with the caller's, bounded by the release timeout.
func (c *Client) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.releaseTimeout)
}

func (c *Client) emit(e Event) {
	if len(c.hooks) == 0 {
		return
	}
	e.Time = c.clock.Now()
	for _, h := range c.hooks {
		h(e)
	}
}

// announce wakes this process's waiters for key after a local release, when no
// topic does it.
func (c *Client) announce(key string) {
	if c.topic == nil {
		c.waiters.notify(key, "")
	}
}

// Lock is a held lock. Its lease is renewed in the background until Release,
// until it is lost, or until MaxDuration. Its methods are safe for concurrent
// use.
type Lock struct {
	c           *Client
	key, owner  string
	token       uint64
	opts        Options
	start       time.Time // monotonic, when the granting request was sent
	maxDeadline time.Time // monotonic
	chain       int       // transfers in a row in this process that led to this grant

	renewMu  sync.Mutex // one renewal at a time
	mu       sync.Mutex // guards what follows
	state    lockState
	leaseEnd time.Time // monotonic: the record expires no earlier than this (see leaseEnd)
	timer    *time.Timer
	lostErr  *LostError
	onLost   []func(error)
	done     chan struct{}
}

type lockState int

const (
	held lockState = iota
	released
	lost
)

type ctxKey struct{}

// FromContext returns the lock held by the Do, Middleware or Primitive call
// whose handler received ctx, and whether there is one.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(ctxKey{}).(*Lock)
	return l, ok
}

// Key returns the lock's key (prefix and name).
func (l *Lock) Key() string { return l.key }

// Owner returns the id of this acquisition.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token of this grant: strictly greater than the
// token of every earlier grant of the same key by the same provider. Pass it to
// the resource the lock protects, which should reject a write carrying a token
// lower than one it has already seen.
func (l *Lock) Token() uint64 { return l.token }

// Done returns a channel that is closed when the lock is released or lost.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err returns nil while the lock is held or after a clean release, and the
// *LostError once the lock has been lost.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return l.lostErr
	}
	return nil
}

// onLoss calls fn with the loss error when the lock is lost, at once if it
// already is.
func (l *Lock) onLoss(fn func(error)) {
	l.mu.Lock()
	if l.state == lost {
		err := l.lostErr
		l.mu.Unlock()
		fn(err)
		return
	}
	l.onLost = append(l.onLost, fn)
	l.mu.Unlock()
}

// Extend sets the lease to d from now (cut to what is left of MaxDuration) and
// goes on renewing with the configured lease. It returns a *LostError when the
// lock is no longer held, and the provider's error otherwise (the lock is then
// still held until its current lease ends). It gives up at the end of the
// current lease: a renewal that arrives later is too late.
func (l *Lock) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return invalidf("Extend duration %v is not positive", d)
	}
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	return l.refresh(ctx, d)
}

// refresh renews the record to ttl d (cut to MaxDuration), before the current
// lease ends, and schedules the next renewal. The caller holds l.renewMu:
// renewals run one at a time, outside l.mu, so that Release and Err never
// wait for the network.
func (l *Lock) refresh(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	err, end := l.heldErrLocked(), l.leaseEnd
	l.mu.Unlock()
	if err != nil {
		return err
	}
	now := time.Now()
	if l.overMax(now) {
		return l.lose(l.heldTooLong())
	}
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	d = min(d, l.maxDeadline.Sub(now))
	err = l.c.provider.Update(ctx, l.key, l.owner, d, false)
	switch {
	case errors.Is(err, ErrLost):
		return l.lose(nil) // found gone or taken
	case errors.Is(err, ErrCorruptRecord):
		return l.lose(err)
	case err != nil && !time.Now().Before(end):
		return l.lose(fmt.Errorf("%w: %w", errLeaseRanOut, err))
	case err != nil:
		if herr := l.heldErr(); herr != nil {
			return herr // lost meanwhile, or released
		}
		return fmt.Errorf("lock: renew %q: %w", l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return l.heldErrLocked()
	}
	l.leaseEnd = leaseEnd(now, d)
	// Timed from when the renewal was sent, as the lease is: a slow reply
	// must not push the next renewal past the lease end.
	l.timer.Reset(max(time.Until(now.Add(l.nextRenewal(now, d))), 0))
	return nil
}

// lose marks the lock lost with cause, unless it was released meanwhile, and
// then tells everyone who asked (outside l.mu, so that they may call the
// Lock's methods).
func (l *Lock) lose(cause error) error {
	l.mu.Lock()
	if l.state != held {
		defer l.mu.Unlock()
		return l.heldErrLocked()
	}
	l.state = lost
	l.timer.Stop()
	l.lostErr = &LostError{Key: l.key, Token: l.token, Cause: cause}
	onLost := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	// The event first, then Done and the contexts: whoever they wake finds
	// the event delivered. Only this call moved the state to lost, so only it
	// closes done.
	l.c.log.Debug("lock: lost", "key", l.key, "token", l.token, "cause", cause)
	l.c.emit(Event{Kind: EventLost, Key: l.key, Owner: l.owner, Token: l.token, Held: time.Since(l.start), Err: l.lostErr})
	close(l.done)
	for _, fn := range onLost {
		fn(l.lostErr)
	}
	return l.lostErr
}

// heldErr returns nil while the lock is held, and why it is not otherwise.
func (l *Lock) heldErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldErrLocked()
}

func (l *Lock) heldErrLocked() error {
	switch l.state {
	case lost:
		return l.lostErr
	case released:
		return &LostError{Key: l.key, Token: l.token, Cause: errors.New("already released")}
	}
	return nil
}

// leaseEnd returns until when a holder may count on a record granted or renewed
// with ttl by a request sent at sent: the server's TTL starts later than sent,
// and a margin of 1% + 1ms allows for the two clocks running at different
// rates, so the holder is told of a loss before another can take the lock.
func leaseEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - min(ttl/100+time.Millisecond, ttl/2))
}

// nextRenewal returns the delay until the next renewal of a lease of ttl
// granted at now: a third of the lease, or the end of the lease when it already
// reaches MaxDuration (then the timer finds the hold over).
func (l *Lock) nextRenewal(now time.Time, ttl time.Duration) time.Duration {
	if now.Add(ttl).Before(l.maxDeadline) {
		return ttl / 3
	}
	return leaseEnd(now, ttl).Sub(now)
}

// renew runs on the lease timer. It declares the lock lost once the lease has
// run out without a renewal, even while an Extend hangs; otherwise it renews
// the lease, and retries soon after a transient failure.
func (l *Lock) renew() {
	l.mu.Lock()
	state, end := l.state, l.leaseEnd
	l.mu.Unlock()
	if state != held {
		return
	}
	switch now := time.Now(); {
	case l.overMax(now):
		_ = l.lose(l.heldTooLong())
		return
	case !now.Before(end):
		_ = l.lose(errLeaseRanOut)
		return
	}
	if !l.renewMu.TryLock() {
		// An Extend is under way; look again soon, as after a failed renewal
		// (and at the lease end at the latest).
		l.resetTimer(min(l.opts.Lease/10, time.Until(end)))
		return
	}
	err := l.refresh(context.Background(), l.opts.Lease)
	l.renewMu.Unlock()
	if err != nil && !errors.Is(err, ErrLost) {
		// A transient failure: try again soon; the lease end is checked first.
		l.resetTimer(min(l.opts.Lease/10, time.Until(end)))
	}
}

// errLeaseRanOut is the cause of a loss found by the holder's own clock.
var errLeaseRanOut = errors.New("the lease ran out before it was renewed")

// overMax reports whether the hold has reached its MaxDuration (with the same
// margin as a lease).
func (l *Lock) overMax(now time.Time) bool {
	return !now.Before(leaseEnd(l.start, l.opts.MaxDuration))
}

func (l *Lock) heldTooLong() error {
	return fmt.Errorf("held for its MaxDuration %v", l.opts.MaxDuration)
}

// resetTimer fires the lease timer after d (at least a millisecond), while
// the lock is held.
func (l *Lock) resetTimer(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == held {
		l.timer.Reset(max(d, time.Millisecond))
	}
}

// maxChain bounds how many times in a row a process passes a lock straight to
// its own next waiter before it frees the lock for every process to compete
// for, so that waiters in other processes are not starved.
const maxChain = 16

// transfer passes the lock straight to the next waiter in this process, when
// there is one, the provider is a Transferer and the chain of transfers is not
// too long: one round trip, and the key is never free in between. It reports
// whether the release is done (with the error to report: never a *LostError
// for a transfer whose outcome is unknown); when it is not, the caller frees
// the lock.
func (l *Lock) transfer(ctx context.Context) (bool, error) {
	c := l.c
	tr, ok := c.provider.(Transferer)
	if !ok || l.chain >= maxChain {
		return false, nil
	}
	w := c.waiters.claim(l.key)
	if w == nil {
		return false, nil
	}
	sent := time.Now()
	rec, err := tr.Transfer(ctx, l.key, l.owner, w.owner, w.lease)
	// A record with no owner: released for the first waiter of the provider's
	// queue, in another process; w waits for its own turn.
	ok = err == nil && rec.Owner == w.owner
	known := err == nil || errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord)
	c.waiters.settle(l.key, w, grant{ok: ok, unsure: !known && !errors.Is(err, ErrInvalidArgument), rec: rec, sent: sent, chain: l.chain + 1})
	if known {
		return true, err
	}
	if errors.Is(err, ErrInvalidArgument) {
		return false, nil // refused: nothing changed; the caller frees the lock
	}
	// The transfer may or may not have happened. Free the lock if it is still
	// ours; the waiter, back at the head, finds out whether it is its own (or
	// frees it if it gives up). Either way the outcome is not known here.
	if rerr := c.provider.Release(ctx, l.key, l.owner); rerr == nil {
		return true, nil
	}
	return true, fmt.Errorf("handing over to a waiter: %w", err)
}

// Release ends the hold: it deletes the record, or, with a GracePeriod, keeps
// it closed for that long. It runs on a context of its own (bounded by the
// release timeout) so that a cancelled ctx cannot leave the lock held. It
// returns nil after a clean release, the *LostError if the lock was lost
// before (or found gone or taken now), and the provider's error otherwise (the
// record then expires within its lease). Release after Release returns what
// the first returned if it was a *LostError, and nil otherwise.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	state, lostErr := l.state, l.lostErr
	if state == held {
		l.state = released
		l.timer.Stop()
		close(l.done)
	}
	l.onLost = nil
	l.mu.Unlock()
	c := l.c
	switch state {
	case released:
		if lostErr != nil {
			return lostErr // the first Release found the lock lost
		}
		return nil
	case lost:
		// The lease ran out without a renewal; the record may still be ours.
		rctx, cancel := c.detached(ctx)
		_ = c.provider.Release(rctx, l.key, l.owner)
		cancel()
		c.announce(l.key)
		return l.lostErr
	}

	rctx, cancel := c.detached(ctx)
	defer cancel()
	var err error
	if g := l.opts.GracePeriod; g > 0 {
		err = c.provider.Update(rctx, l.key, l.owner, g, true)
	} else if handed, herr := l.transfer(rctx); handed {
		err = herr
	} else {
		err = c.provider.Release(rctx, l.key, l.owner)
	}
	c.announce(l.key)
	heldFor := time.Since(l.start)
	switch {
	case err == nil:
		if c.debug {
			c.log.Debug("lock: released", "key", l.key, "token", l.token)
		}
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, GracePeriod: l.opts.GracePeriod})
		return nil
	case errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord):
		cause := error(nil)
		if errors.Is(err, ErrCorruptRecord) {
			cause = err
		}
		l.mu.Lock()
		l.lostErr = &LostError{Key: l.key, Token: l.token, Cause: cause}
		l.mu.Unlock()
		c.emit(Event{Kind: EventLost, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, Err: l.lostErr})
		return l.lostErr
	default:
		err = fmt.Errorf("lock: release %q: %w", l.key, err)
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, Err: err})
		return err
	}
}
