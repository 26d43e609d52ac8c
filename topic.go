package lock

// The end-of-lock notifications: each Client listens on one topic of its
// own, its inbox, where the provider tells it (Provider.Listen) that a lock
// or a claim it waits for was handed to one of its waiters, or that a lock
// entered a grace period. Nothing else travels on it.

import (
	"context"
	"sync"
	"time"
)

// inbox is where a Client's waiters hear from the provider: one Listen per
// Client, opened by the first wait and kept until Close, on which the
// provider delivers only the grants made to this Client's waiters. A
// process hears nothing of locks it does not wait for, and a release costs
// the provider one message at most, to the waiter it hands the lock to.
//
// The inbox is joined before a waiter's first request, so that a grant made
// in answer to it always finds the waiter (no lost wake-up). A grant for an
// owner whose waiter gave up is handed back: released, owner-checked, which
// passes it on. (The waiter's own [Provider.Leave] does the same, but it may
// have failed, during an outage, and left the waiter in the queue.) A grant
// for an owner whose waiter took the lock is left alone: the waiter's own
// request found the lock its own before the message came (the reply and
// the message travel on different connections), and the lock is held.
type inbox struct {
	c *Client

	mu      sync.Mutex
	name    string
	stop    func()        // stops listening; nil until Listen has succeeded
	pending chan struct{} // closed when the Listen under way returns
	waiters map[string]*waiter
	gone    recent // owners of waiters that gave up, for goneFor
}

// goneFor is how long the inbox remembers a waiter that gave up, so that a
// grant made to it later is handed back (4096 waiters at most: see recent).
// A grant that comes later still (its Leave failed, and its entry stayed in
// a busy queue for longer) is left alone, and the lock is idle until the
// record's TTL ends.
const goneFor = 10 * time.Minute

// join registers w and makes sure the inbox is listened to before w first
// asks (subscribe before check): it starts Listen, or waits for the one
// under way. If Listen fails, w still finds a grant when it looks again,
// and the next waiter tries Listen again.
func (in *inbox) join(ctx context.Context, w *waiter) {
	in.mu.Lock()
	if in.waiters == nil {
		in.waiters = make(map[string]*waiter)
		in.name = in.c.prefix + "inbox:" + in.c.id
	}
	in.waiters[w.req.Owner] = w
	w.req.Inbox = in.name
	for in.pending != nil {
		pending := in.pending
		in.mu.Unlock()
		select {
		case <-pending:
		case <-ctx.Done():
			return
		}
		in.mu.Lock()
	}
	if in.stop != nil {
		in.mu.Unlock()
		return
	}
	pending := make(chan struct{})
	in.pending = pending
	in.mu.Unlock()

	stop, err := in.c.provider.Listen(ctx, in.name, in.deliver)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.pending = nil
	close(pending)
	if err != nil {
		in.c.log.Debug("lock: listen failed; waiters look every poll interval", "err", err)
		return
	}
	in.stop = stop
}

// leave unregisters w; unless w holds the lock, a grant that reached it too
// late, or reaches it later, is handed back.
func (in *inbox) leave(w *waiter) {
	in.mu.Lock()
	delete(in.waiters, w.req.Owner)
	if w.state != granted {
		in.gone.add(w.req.Owner, time.Now(), goneFor)
	}
	in.mu.Unlock()
	if w.state == granted {
		return
	}
	select {
	case g := <-w.grants:
		in.handBack(g)
	default:
	}
}

// handBack releases a lock handed to an owner that no longer waits for it,
// in the background.
func (in *inbox) handBack(g Notice) {
	c := in.c
	c.background(context.Background(), func(ctx context.Context) { _ = c.release(ctx, g.Key, g.Owner, claimOf(g)) })
}

// deliver hands g to its waiter, or back when its waiter gave up; a grant
// without owner (a grace period) wakes every waiter of its key, and one
// without key every waiter.
//
// A grant is put in its waiter's channel under in.mu, so that it happens
// either before leave unregisters the waiter (leave then finds it) or not
// at all (it is handed back here).
func (in *inbox) deliver(g Notice) {
	in.mu.Lock()
	if g.Owner != "" {
		w := in.waiters[g.Owner]
		if w != nil && w.key == g.Key {
			select {
			case w.grants <- g:
			default: // a grant of the same record is there already
			}
			in.mu.Unlock()
			return
		}
		gone := in.gone.remove(g.Owner, time.Now(), goneFor)
		in.mu.Unlock()
		if gone {
			in.handBack(g)
		}
		return
	}
	defer in.mu.Unlock()
	for _, w := range in.waiters {
		if g.Key == "" || w.key == g.Key {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// close stops listening.
func (in *inbox) close() {
	in.mu.Lock()
	stop := in.stop
	in.stop = nil
	in.mu.Unlock()
	if stop != nil {
		stop()
	}
}
