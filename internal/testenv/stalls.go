package testenv

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Stalls measures how long this process's goroutines wait to be run: a
// goroutine that sleeps a millisecond at a time records the longest gap
// between its wake-ups beyond that millisecond. A test that judges the
// order of two events a few milliseconds apart (a lease timer's margin)
// uses it to tell a late library from a process held up by a loaded
// machine.
type Stalls struct {
	max atomic.Int64
}

// WatchStalls starts a Stalls, stopped at the end of the test.
func WatchStalls(t testing.TB) *Stalls {
	s := &Stalls{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			now := time.Now()
			if gap := int64(now.Sub(last) - time.Millisecond); gap > s.max.Load() {
				s.max.Store(gap)
			}
			last = now
		}
	}()
	t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
	return s
}

// Reset forgets the gaps seen so far.
func (s *Stalls) Reset() { s.max.Store(0) }

// Longest returns the longest gap seen since the last Reset.
func (s *Stalls) Longest() time.Duration { return time.Duration(s.max.Load()) }
