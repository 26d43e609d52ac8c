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
