package lock

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// AcquireAll takes the locks called names, all of them or none: the caller
// holds every one, or fails holding none. It never holds some of them
// while it waits for the rest, so callers that list overlapping names in
// any order cannot deadlock: it tries every lock at once; when one is
// held, it releases those it took, waits for the held one (as Acquire with
// o.Wait, in its queue), and tries the others again while it holds that
// one, until every lock is taken, o.MaxWait has passed, or ctx ends.
// Without o.Wait it tries once and fails with the *NotAcquiredError of a
// held lock. The options apply to each lock; the Hold's members
// ([Hold.Locks]) are in the order of their keys, each with its own lease and
// fencing token, and the loss of any one ends the hold, its *LostError
// naming the lock.
//
// The locks are ordinary ones, on whatever keys (on a Redis Cluster,
// names in different slots work as well): there is no instant at which
// all are taken at once, but nobody else holds any of them while the Hold
// lasts, and a caller that fails releases what it took before it returns.
// While a caller tries, another caller can find a lock of the set held
// and wait for it, as for any lock. Duplicate names count once.
func (c *Client) AcquireAll(ctx context.Context, names []string, o Options) (*Hold, error) {
	if len(names) == 0 {
		return nil, invalidf("no lock names")
	}
	keys := make([]string, len(names))
	for i, name := range names {
		key, err := c.checkName(name)
		if err != nil {
			return nil, err
		}
		keys[i] = key
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	o, err := o.resolved()
	if err != nil {
		return nil, err
	}
	if o.Wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.MaxWait, ErrTimeout)
		defer cancel()
	}
	var first *Lock // granted by a wait; held while the others are tried
	for round := 0; ; round++ {
		locks, busy, err := c.tryAll(ctx, keys, o, first)
		switch {
		case err != nil:
			return nil, err
		case busy == nil:
			return holdAll(ctx, c, locks)
		case !o.Wait:
			return nil, busy
		}
		if round > 0 {
			// Callers that want the same locks in turn: a pause of a few
			// milliseconds at random, more as rounds fail, lets one through.
			pause := time.Duration(rand.Int64N(int64(min(round, 20)) * int64(time.Millisecond)))
			select {
			case <-ctx.Done():
				return nil, &NotAcquiredError{Key: busy.Key, Reason: context.Cause(ctx), Holder: busy.Holder, ownHolder: busy.ownHolder}
			case <-time.After(pause):
			}
		}
		wo := o
		wo.MaxWait = NoHoldLimit // ctx bounds the wait
		if first, err = c.acquire(ctx, busy.Key, c.newOwner(""), claim{}, wo); err != nil {
			return nil, err
		}
	}
}

// tryAll tries to take every lock under keys but first's, which the caller
// holds already, all at once. It returns them all, in the order of keys;
// or, when one was held, the *NotAcquiredError of the first such key, or
// the first other error, after releasing every lock it took and first.
func (c *Client) tryAll(ctx context.Context, keys []string, o Options, first *Lock) ([]*Lock, *NotAcquiredError, error) {
	o.Wait = false
	locks := make([]*Lock, len(keys))
	errs := make([]error, len(keys))
	try := func(i int) {
		if first != nil && keys[i] == first.key {
			locks[i] = first
			return
		}
		locks[i], errs[i] = c.acquire(ctx, keys[i], c.newOwner(""), claim{}, o)
	}
	together(len(keys), try)
	var busy *NotAcquiredError
	var failed error
	for _, err := range errs {
		var na *NotAcquiredError
		switch {
		case err == nil:
		case errors.As(err, &na) && (na.Reason == ErrHeld || na.Reason == ErrGracePeriod):
			if busy == nil {
				busy = na
			}
		case failed == nil:
			failed = err
		}
	}
	if busy == nil && failed == nil {
		return locks, nil, nil
	}
	_ = releaseLocks(ctx, slices.DeleteFunc(locks, func(l *Lock) bool { return l == nil }), nil)
	if failed != nil {
		return nil, nil, failed
	}
	return nil, busy, nil
}

// holdAll returns the Hold of locks, all taken, unless one was lost
// already (its lease ran out while the others were taken: a paused
// process, a slow answer): then it releases them and returns the loss.
func holdAll(ctx context.Context, c *Client, locks []*Lock) (*Hold, error) {
	for _, l := range locks {
		if err := l.lostAlready(); err != nil {
			_ = releaseLocks(ctx, locks, nil)
			return nil, err
		}
	}
	return newHold(c, 0, locks), nil
}

// DoAll takes the locks called names as AcquireAll does, runs fn while
// holding them all, and releases them. fn's context is cancelled, with the
// *LostError of the lock lost as cause, if any of them is lost.
func (c *Client) DoAll(ctx context.Context, names []string, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	h, err := c.AcquireAll(ctx, names, o)
	if err != nil {
		return err
	}
	return h.run(ctx, fn)
}
