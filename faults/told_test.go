package faults_test

import (
	"time"

	"github.com/seed05627090/lock"
)

// When a cut-off holder was told of its loss, judged against when another
// client got the lock (TestBlackhole, TestElectionBlackholedLeader,
// TestElectionFailoverMemory).

// lossTimes returns a Client option whose events send the Time of the
// first EventLost of key ("" for any) to the channel it returns: stamped
// before the lock's Done closes and a term's context ends, where a
// goroutine woken by Done would add a scheduling hop.
func lossTimes(key string) (lock.ClientOption, <-chan time.Time) {
	lost := make(chan time.Time, 1)
	return lock.WithEvents(func(e lock.Event) {
		if e.Kind == lock.EventLost && (key == "" || e.Key == key) {
			select {
			case lost <- e.Time:
			default:
			}
		}
	}), lost
}

// toldAt waits up to wait for done to close and returns when the holder
// was told: the loss's time from lost, or the time done was seen closed
// when no EventLost came (the lock's Err says how); zero if done did not
// close within wait.
func toldAt(done <-chan struct{}, lost <-chan time.Time, wait time.Duration) time.Time {
	select {
	case <-done:
		select {
		case at := <-lost:
			return at
		default:
			return time.Now()
		}
	case <-time.After(wait):
		return time.Time{}
	}
}

// lateAllowance is how long after another client got a lock (or role) its
// cut-off holder may be told of the loss, this process having been held
// up for held at most meanwhile: a tenth of the lease (as
// TestNetworkFaults allows), plus held. The lease timer ends a lease 2% of
// it + 2 ms before the record can expire; a process not run for longer
// than that (two busy vCPUs under -race: timers 20-250 ms late) runs the
// other's grant and the late timer in either order. A holder told only
// when a hung call fails, or never, is later than that by far.
func lateAllowance(lease, held time.Duration) time.Duration { return lease/10 + held }
