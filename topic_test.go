package lock

import (
	"testing"
	"time"
)

// A waiter put back after a failed transfer can be claimed again at once; the
// second outcome must not block on the first (settle used to send both on a
// one-slot channel that the waiter had not read yet).
func TestWaitersClaimTwice(t *testing.T) {
	var ws waiters
	w := ws.join("k", "o", time.Second)
	if got := ws.claim("k"); got != w {
		t.Fatalf("claim = %v, want the waiter", got)
	}
	ws.settle("k", w, grant{ok: false})
	if !ws.queued("k") {
		t.Fatal("a failed transfer puts the waiter back in the queue")
	}
	if got := ws.claim("k"); got != w {
		t.Fatalf("second claim = %v, want the waiter", got)
	}
	done := make(chan struct{})
	go func() {
		ws.settle("k", w, grant{ok: true})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the second settle blocked")
	}
	if g := <-w.grantc; !g.ok {
		t.Fatal("the waiter's only outcome is the grant")
	}
}

// A waiter that gives up after a grant was delivered but before it read it
// must be told to take it (and free it), or the lock stays held for a lease.
func TestWaitersLeaveAfterGrant(t *testing.T) {
	var ws waiters
	w := ws.join("k", "o", time.Second)
	ws.claim("k")
	ws.settle("k", w, grant{ok: true})
	if outcome, _ := ws.leave("k", w, true); !outcome {
		t.Fatal("leave must report the pending grant")
	}
	if g := <-w.grantc; !g.ok {
		t.Fatal("the pending outcome is the grant")
	}
}
