package lock

import (
	"context"
	"sync"
	"time"
)

// Topic carries end-of-lock announcements between processes, so that waiters
// wake when a lock is released instead of polling. Both built-in providers
// implement it and announce, after the change, every release and every update
// that starts a grace period.
type Topic interface {
	// Subscribe calls notify for every announcement made after Subscribe
	// returns, until stop is called, with the lock's key and the owner whose
	// turn it is in the key's wait queue ("" when the queue is empty, and for
	// a grace period). notify must not block. stop waits until notify is no
	// longer running.
	Subscribe(ctx context.Context, notify func(key, next string)) (stop func(), err error)
}

// waiters is a Client's registry of goroutines waiting for locks: one FIFO queue
// per key. Only the head of a queue asks the provider for the lock; an
// announcement for the key wakes the head alone. So one process with many
// waiters on a key sends one attempt per release, and its waiters are served in
// arrival order. A local holder that releases may instead claim the head and
// transfer the lock to it directly (see Lock.Release).
type waiters struct {
	mu      sync.Mutex
	queues  map[string][]*waiter
	byOwner map[string]*waiter
}

type waiter struct {
	owner  string
	lease  time.Duration
	wake   chan struct{} // buffered: a wake-up is never lost and never blocks
	grantc chan grant    // buffered: a transfer's outcome (see settle)

	// Guarded by waiters.mu.
	attempting bool // asking the provider now: not to be claimed
	claimed    bool // taken out of the queue by a releaser transferring to it
	granted    bool // a transfer's grant waits in grantc
	unsure     bool // a transfer to it failed with no reply: it may hold the record
	gone       bool // gave up while claimed or granted: takes the outcome, then frees it
}

// grant is the outcome of a transfer to a claimed waiter.
type grant struct {
	ok     bool
	unsure bool // failed with no reply: the transfer may have happened
	rec    Record
	sent   time.Time // when the transfer was sent: the lease counts from here
	chain  int       // transfers in a row in this process, this one included
}

// join appends a new waiter to key's queue.
func (ws *waiters) join(key, owner string, lease time.Duration) *waiter {
	w := &waiter{owner: owner, lease: lease, wake: make(chan struct{}, 1), grantc: make(chan grant, 1)}
	ws.mu.Lock()
	if ws.queues == nil {
		ws.queues = make(map[string][]*waiter)
		ws.byOwner = make(map[string]*waiter)
	}
	ws.queues[key] = append(ws.queues[key], w)
	ws.byOwner[owner] = w
	ws.mu.Unlock()
	return w
}

// leave removes w from key's queue. When w was the head and passOn is true (w
// leaves without the lock, so an announcement it consumed may be the next
// waiter's), the new head is woken to look for itself. outcome is true when a
// releaser has claimed w or granted it the lock: the caller must then take the
// outcome from w.grantc. unsure is true when a transfer to w failed with no
// reply: w's owner may hold the record.
func (ws *waiters) leave(key string, w *waiter, passOn bool) (outcome, unsure bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.byOwner, w.owner)
	if w.claimed || w.granted {
		w.gone = true
		return true, w.unsure
	}
	q := ws.queues[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(ws.queues, key)
		} else {
			ws.queues[key] = q
			if i == 0 && passOn {
				signal(q[0])
			}
		}
		break
	}
	return false, w.unsure
}

// startAttempt reports whether w may ask the provider now: when it is first in
// key's queue, or anywhere in it when any is true. If so it marks w as asking,
// so that no releaser claims it meanwhile.
func (ws *waiters) startAttempt(key string, w *waiter, any bool) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	if !any && (len(q) == 0 || q[0] != w) {
		return false
	}
	w.attempting = true
	return true
}

func (ws *waiters) endAttempt(w *waiter) {
	ws.mu.Lock()
	w.attempting = false
	ws.mu.Unlock()
}

// claim takes the head of key's queue out of it for a transfer, unless there is
// none or it is asking the provider itself.
func (ws *waiters) claim(key string) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	if len(q) == 0 || q[0].attempting {
		return nil
	}
	w := q[0]
	delete(ws.byOwner, w.owner)
	if len(q) == 1 {
		delete(ws.queues, key)
	} else {
		ws.queues[key] = q[1:]
	}
	w.claimed = true
	return w
}

// settle delivers the outcome of a transfer to the claimed waiter w: on
// w.grantc when w got the lock or has given up (it waits for the outcome, and
// then leaves for good), so that w.grantc holds at most one outcome; otherwise
// by putting w back at the head of key's queue and waking it to look.
func (ws *waiters) settle(key string, w *waiter, g grant) {
	ws.mu.Lock()
	w.claimed = false
	w.unsure = w.unsure || g.unsure
	if g.ok || w.gone {
		w.granted = g.ok
		ws.mu.Unlock()
		w.grantc <- g
		return
	}
	ws.queues[key] = append([]*waiter{w}, ws.queues[key]...)
	ws.byOwner[w.owner] = w
	signal(w)
	ws.mu.Unlock()
}

// queued reports whether anyone waits for key in this process.
func (ws *waiters) queued(key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.queues[key]) > 0
}

// notify handles an announcement that key has ended: it wakes the waiter
// whose turn it is when that waiter is in this process, nobody when it is in
// another, and the head of key's queue when it is nobody's in particular.
func (ws *waiters) notify(key, next string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if next != "" {
		if w := ws.byOwner[next]; w != nil {
			signal(w)
		}
		return
	}
	if q := ws.queues[key]; len(q) > 0 {
		signal(q[0])
	}
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
