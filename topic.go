package lock

import (
	"context"
	"sync"
)

// Topic carries end-of-lock announcements between processes, so that waiters
// wake when a lock is released instead of polling. Both built-in providers
// implement it and announce, after the change, every release and every update
// that starts a grace period.
type Topic interface {
	// Subscribe calls notify with the key of every announcement made after
	// Subscribe returns, until stop is called. notify must not block. stop
	// waits until notify is no longer running.
	Subscribe(ctx context.Context, notify func(key string)) (stop func(), err error)
}

// waiters is a Client's registry of goroutines waiting for locks: one FIFO queue
// per key. Only the head of a queue asks the provider for the lock; an
// announcement for the key wakes the head alone. So one process with many
// waiters on a key sends one attempt per release, and its waiters are served in
// arrival order.
type waiters struct {
	mu     sync.Mutex
	queues map[string][]*waiter
}

type waiter struct {
	wake chan struct{} // buffered: a wake-up is never lost and never blocks
}

// join appends a new waiter to key's queue.
func (ws *waiters) join(key string) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	if ws.queues == nil {
		ws.queues = make(map[string][]*waiter)
	}
	ws.queues[key] = append(ws.queues[key], w)
	ws.mu.Unlock()
	return w
}

// leave removes w from key's queue. When w was the head and passOn is true (w
// leaves without the lock, so an announcement it consumed may be the next
// waiter's), the new head is woken to look for itself.
func (ws *waiters) leave(key string, w *waiter, passOn bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(ws.queues, key)
			return
		}
		ws.queues[key] = q
		if i == 0 && passOn {
			signal(q[0])
		}
		return
	}
}

// head reports whether w is first in key's queue.
func (ws *waiters) head(key string, w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.queues[key]
	return len(q) > 0 && q[0] == w
}

// queued reports whether anyone waits for key in this process.
func (ws *waiters) queued(key string) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.queues[key]) > 0
}

// notify wakes the head of key's queue, if any.
func (ws *waiters) notify(key string) {
	ws.mu.Lock()
	if q := ws.queues[key]; len(q) > 0 {
		signal(q[0])
	}
	ws.mu.Unlock()
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
