package lock

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestDetachedContextNeedsNoGoroutine: the context of a release or a
// clean-up (a detachedCtx) lets contexts derived from it follow its end
// without a goroutine each, as the context package's own do (issue 21: a
// provider that derived a child from a release context got a helper
// goroutine), and the derived contexts still end when it does.
func TestDetachedContextNeedsNoGoroutine(t *testing.T) {
	c, err := NewClient(NewMemoryProvider(), WithReleaseTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	caller, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := c.detached(caller)

	before := runtime.NumGoroutine()
	children := make([]context.Context, 100)
	for i := range children {
		var stop context.CancelFunc
		children[i], stop = context.WithCancel(d)
		defer stop()
	}
	if grew := runtime.NumGoroutine() - before; grew >= len(children)/2 {
		t.Errorf("%d contexts derived from a detached context started %d goroutines", len(children), grew)
	}
	cancel() // the caller's cancellation does not reach them
	for _, ch := range children {
		select {
		case <-ch.Done():
			t.Fatal("a derived context ended with the caller's cancellation")
		default:
		}
	}
	for i, ch := range children {
		select {
		case <-ch.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("derived context %d did not end with the release timeout", i)
		}
	}
}

// TestLookAgain: when a queued waiter looks again if nothing wakes it. A
// lock's first lookers look when the record they saw expires, the others
// at a poll interval that grows with their place; a counted name's
// waiters look when the claim they saw expire first does, a millisecond
// later for each waiter ahead, so that a busy name is not looked at by
// every waiter each time a claim could expire (with 192 waiters of a
// Semaphore(64) and 20 ms holds, 0.07 more script calls a hold when all
// looked at once: cd bench && go run . -holds -claims -run sem64x20).
func TestLookAgain(t *testing.T) {
	c := &Client{poll: time.Second}
	ttl := 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		counted  bool
		place    int
		seenTTL  time.Duration
		want     time.Duration
		headTTL  time.Duration // issue 38
		promised time.Duration
	}{
		{"lock, head", false, 0, ttl, ttl + time.Millisecond, 0, 0},
		{"lock, last looker", false, lookers - 1, ttl, ttl + time.Millisecond, 0, 0},
		{"lock, further back", false, lookers, ttl, 2 * time.Second, 0, 0},
		{"lock, TTL unknown", false, 0, 0, time.Second, 0, 0},
		{"lock, far back", false, 100 * lookers, ttl, time.Minute, 0, 0},
		{"counted, head", true, 0, ttl, ttl + time.Millisecond, 0, 0},
		{"counted, place 100", true, 100, ttl, ttl + 101*time.Millisecond, 0, 0},
		{"counted, place 1000", true, 1000, ttl, 1300*time.Millisecond + time.Millisecond, 0, 0},
		{"counted, TTL unknown", true, 40, 0, 3 * time.Second, 0, 0},
		{"counted, TTL longer than the poll", true, 0, time.Hour, time.Second + time.Millisecond, 0, 0},
		{"counted, the head's entry runs out first", true, 3, time.Hour, 200*time.Millisecond + 4*time.Millisecond, 200 * time.Millisecond, 0},
		{"counted, the claim expires first", true, 1, 100 * time.Millisecond, 102 * time.Millisecond, 500 * time.Millisecond, 0},
		{"counted, the head's entry, TTL unknown", true, 2, 0, 203 * time.Millisecond, 200 * time.Millisecond, 0},
		{"counted, within the look promised", true, 40, 0, time.Second, 0, time.Second},
		{"counted, far back, the head's entry not looked at", true, 40, 0, 3 * time.Second, 200 * time.Millisecond, 0},
		{"counted, the last looker, the head's entry", true, lookers - 1, 0, 200*time.Millisecond + lookers*time.Millisecond, 200 * time.Millisecond, 0},
		{"lock, no head's entry", false, 1, 0, time.Second, 200 * time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &waiter{acquisition: acquisition{c: c}, place: tc.place, seenTTL: tc.seenTTL, headTTL: tc.headTTL, promised: tc.promised}
			if tc.counted {
				w.claim = claim{weight: 1, limit: 64}
			}
			if got := w.lookAgain(); got != tc.want {
				t.Errorf("lookAgain() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestQueueTTL: a counted waiter's queue entry lasts until a handoff window
// after its next look is due, and it promises that look (issue 38).
func TestQueueTTL(t *testing.T) {
	c := &Client{poll: time.Second}
	for _, tc := range []struct {
		place int
		want  time.Duration
	}{{0, 1300 * time.Millisecond}, {lookers - 1, 1300 * time.Millisecond}, {2 * lookers, 3300 * time.Millisecond}, {1000 * lookers, time.Minute + 300*time.Millisecond}} {
		w := &waiter{acquisition: acquisition{c: c}, req: Wait{TTL: 300 * time.Millisecond}, place: tc.place}
		if got := w.queueTTL(); got != tc.want {
			t.Errorf("place %d: queueTTL() = %v, want %v", tc.place, got, tc.want)
		}
		if w.promised != tc.want-300*time.Millisecond {
			t.Errorf("place %d: promised %v, want %v", tc.place, w.promised, tc.want-300*time.Millisecond)
		}
	}
}
