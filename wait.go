package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Acquire takes the lock called name. On success the caller holds it, and it is
// renewed in the background until Release, loss, or MaxDuration. Without
// o.Wait it tries once; with it, it waits as Options.Wait says. It returns a
// *NotAcquiredError (ErrNotAcquired) when the lock was held, in its grace
// period, or the wait ended (its Reason is then the context's cause:
// ErrTimeout at MaxDuration, ErrClosed when the Client is closed), and the
// provider's error, naming the operation and the key, otherwise; after a
// failure nothing of the caller's is left stored. Acquiring, with Wait, a
// lock that ctx's call chain already holds (see FromContext) would wait for
// itself: it fails at once with ErrInvalidArgument.
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
	if o.Wait && heldBy(ctx, c, key) {
		return nil, invalidf("lock %q is held by this call chain: waiting for it would never end", key)
	}
	owner := c.newOwner()
	if !o.Wait || !c.busy.has(key) {
		// One attempt first: a free lock is granted in one round trip,
		// without the waiter's set-up; a waiter starts after a busy one.
		l, err := c.try(ctx, key, owner, o)
		if !o.Wait || l != nil || !errors.Is(err, ErrHeld) {
			return c.unlessClosed(ctx, l, err)
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
	l, err := c.wait(ctx, key, owner, o)
	return c.unlessClosed(ctx, l, err)
}

// unlessClosed returns l and err, unless the Client was closed meanwhile:
// then it releases l, so that no acquisition succeeds after Close.
func (c *Client) unlessClosed(ctx context.Context, l *Lock, err error) (*Lock, error) {
	if l != nil && c.closing.Err() != nil {
		_ = l.Release(ctx)
		return nil, c.notAcquired(ctx, l.key, l.owner, ErrClosed, "", 0)
	}
	return l, err
}

// try asks for the lock once. A lock held by another owner fails with a
// *NotAcquiredError whose reason is ErrHeld, reported (EventContended,
// EventSkipped) only without o.Wait: with it, the waiter goes on and reports.
func (c *Client) try(ctx context.Context, key, owner string, o Options) (*Lock, error) {
	if c.closing.Err() != nil {
		return nil, ErrClosed
	}
	sent := time.Now()
	rec, err := c.provider.Acquire(ctx, key, owner, o.Lease)
	if err != nil {
		// The record may have been stored with the reply lost: remove it.
		c.background(ctx, func(ctx context.Context) { _ = c.provider.Release(ctx, key, owner) })
		return nil, c.notAcquired(ctx, key, owner, c.failed("acquire", key, err), "", 0)
	}
	if rec.Owner == owner && !rec.Ended {
		return c.granted(key, owner, o, rec, sent), nil
	}
	if rec.Ended {
		return nil, c.notAcquired(ctx, key, owner, ErrGracePeriod, rec.Owner, rec.TTL)
	}
	c.busy.mark(key)
	if o.Wait {
		return nil, &NotAcquiredError{Key: key, Reason: ErrHeld, RetryAfter: rec.TTL, Holder: rec.Owner}
	}
	c.emit(Event{Kind: EventContended, Key: key, Owner: owner})
	return nil, c.notAcquired(ctx, key, owner, ErrHeld, rec.Owner, rec.TTL)
}

// wait acquires with o.Wait, for at most o.MaxWait: see waiter.
func (c *Client) wait(ctx context.Context, key, owner string, o Options) (*Lock, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, o.MaxWait, ErrTimeout)
	defer cancel()
	w := &waiter{
		c: c, key: key, o: o,
		req:    Waiter{Owner: owner, TTL: o.Lease, Fair: o.Fair, Contended: c.busy.has(key)},
		grants: make(chan Grant, 1),
		wake:   make(chan struct{}, 1),
	}
	c.inbox.join(ctx, w)
	defer c.inbox.leave(w)
	if c.debug {
		c.log.Debug("lock: waiting", "key", key, "owner", owner)
	}
	return w.run(ctx)
}

// notAcquired returns the error of an acquisition that failed for reason: a
// *NotAcquiredError, emitted as EventSkipped, when the lock was held or in
// its grace period or when ctx ended (its cause is then the reason, with the
// provider's error if one came with it), and reason itself (a provider
// error, naming the operation and the key) otherwise.
func (c *Client) notAcquired(ctx context.Context, key, owner string, reason error, holder string, retryAfter time.Duration) error {
	held := errors.Is(reason, ErrHeld) || errors.Is(reason, ErrGracePeriod) || errors.Is(reason, ErrClosed)
	switch cause := context.Cause(ctx); {
	case cause != nil && reason != nil && !held && !errors.Is(reason, ctx.Err()):
		reason = fmt.Errorf("%w: %w", cause, reason) // the provider failed as the context ended
	case cause != nil:
		reason = cause
	case !held:
		return reason
	}
	err := &NotAcquiredError{Key: key, Reason: reason, RetryAfter: retryAfter, Holder: holder}
	if c.debug {
		c.log.Debug("lock: skipped", "key", key, "owner", owner, "reason", reason, "holder", holder, "retry_after", retryAfter)
	}
	c.emit(Event{Kind: EventSkipped, Key: key, Owner: owner, Err: err})
	return err
}

// failed names the operation and the key of a provider error, keeping the
// error for errors.Is and errors.As. The library's own errors name the key
// already.
func (c *Client) failed(op, key string, err error) error {
	if errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrInvalidArgument) {
		return err
	}
	return fmt.Errorf("lock: %s %q: %w", op, key, err)
}

// granted returns the held Lock of a grant of rec to owner, requested at sent.
func (c *Client) granted(key, owner string, o Options, rec Record, sent time.Time) *Lock {
	ttl := o.Lease
	if rec.TTL > 0 && rec.TTL < ttl {
		ttl = rec.TTL
	}
	l := newLock(c, key, owner, rec.Token, o, sent, ttl)
	if c.debug {
		c.log.Debug("lock: acquired", "key", key, "owner", owner, "token", rec.Token)
	}
	c.emit(Event{Kind: EventAcquired, Key: key, Owner: owner, Token: rec.Token, MaxDuration: o.MaxDuration, Lease: o.Lease})
	return l
}

// busyKeys remembers the keys this Client found held lately. A waiter's
// first request for such a key asks the provider to join the key's queue
// first (Waiter.Contended): one command when others wait already. A key is
// forgotten a second after it was last seen busy.
type busyKeys struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

const busyFor = time.Second

func (b *busyKeys) mark(key string) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil || len(b.seen) >= 4096 {
		b.prune(now)
	}
	b.seen[key] = now
}

func (b *busyKeys) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.seen[key]
	return ok && time.Since(t) < busyFor
}

// prune forgets the keys not seen busy for busyFor, or all of them when
// that is not enough. The caller holds b.mu.
func (b *busyKeys) prune(now time.Time) {
	for k, t := range b.seen {
		if now.Sub(t) >= busyFor {
			delete(b.seen, k)
		}
	}
	if b.seen == nil || len(b.seen) >= 4096 {
		b.seen = make(map[string]time.Time)
	}
}
