package locktest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed05627090/lock"
)

// ElectionFailover benchmarks, on the backend, how long a role is without
// a running leader: from the leader's death (its provider stops answering,
// at a random point of its renewal cycle; its record is left to expire) or
// from the start of its Resign, until the function of a Lead waiting
// behind it, on a provider of its own, runs. It runs the sub-benchmarks
// "resign" and "death"; one op is one round, and the figures are the
// metrics (the rounds' p50, p99 and max in ms, and the max against the
// lease plus the successor's poll interval), not ns/op, which counts each
// round's set-up. Lease 1 s (or the backend's MinLease, if longer); the
// successor's Client polls every second (the default). A leader that lost its term before its Resign (its
// renewals held up on a loaded machine) is not counted, but reported as
// lost-before-resign. A backend's benchmark calls it, with a bounded count:
//
//	func BenchmarkElectionFailover(b *testing.B) { locktest.ElectionFailover(b, backend) }
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func ElectionFailover(b *testing.B, backend Backend) {
	const lease, poll = time.Second, time.Second
	for _, death := range []bool{false, true} {
		name := "resign"
		if death {
			name = "death"
		}
		b.Run(name, func(b *testing.B) {
			next, err := lock.NewClient(backend.New(b), lock.WithPollInterval(poll))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = next.Close() })
			leaders := backend.New(b) // the leaders' own connections
			var took []time.Duration
			lost := 0 // rounds whose leader lost its term before its Resign
			for round := range b.N {
				role := uniqueName(b) + ":" + strconv.Itoa(round)
				var dead atomic.Bool
				lc, err := lock.NewClient(silenced(leaders, &dead))
				if err != nil {
					b.Fatal(err)
				}
				leader, err := lc.Campaign(context.Background(), role, lock.ElectionOptions{Lease: lease})
				if err != nil {
					b.Fatal(err)
				}
				s := startSuccessor(b, next, role)
				var from time.Time
				if death {
					time.Sleep(time.Duration(rand.Int64N(int64(lease / 3)))) // anywhere in the renewal cycle
					dead.Store(true)
					from = time.Now()
				} else {
					from = time.Now()
					err := leader.Resign(context.Background())
					if errors.Is(err, lock.ErrLost) {
						// Its renewals did not get through in time (a loaded
						// machine): not a handover; the successor takes the
						// role when the record expires.
						lost++
						_ = s.ran(b, 3*(lease+poll))
						s.end(b)
						_ = lc.Close()
						continue
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				took = append(took, s.ran(b, 3*(lease+poll)).Sub(from))
				s.end(b)
				_ = lc.Close()
			}
			reportFailover(b, took, max(lease, backend.MinLease)+poll)
			if lost > 0 {
				b.ReportMetric(float64(lost), "lost-before-resign")
			}
		})
	}
}

// benchSuccessor is a Lead of a role that waits behind its leader: started
// receives when its function starts.
type benchSuccessor struct {
	started chan time.Time
	stop    context.CancelFunc
	done    chan error
}

// startSuccessor starts a Lead of role on c and returns once it waits in the
// role's queue.
func startSuccessor(b *testing.B, c *lock.Client, role string) *benchSuccessor {
	b.Helper()
	ctx, stop := context.WithCancel(context.Background())
	s := &benchSuccessor{started: make(chan time.Time, 1), stop: stop, done: make(chan error, 1)}
	go func() {
		s.done <- c.Lead(ctx, role, func(ctx context.Context) error {
			s.started <- time.Now()
			<-ctx.Done()
			return nil
		}, lock.LeadOptions{})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := c.Inspect(context.Background(), role)
		if err == nil && st.Waiters == 1 {
			return s
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("the successor does not wait for %q: %+v, %v", role, st, err)
		}
	}
}

// ran returns when the successor's function started, failing b after within.
func (s *benchSuccessor) ran(b *testing.B, within time.Duration) time.Time {
	b.Helper()
	select {
	case at := <-s.started:
		return at
	case <-time.After(within):
		s.stop()
		b.Fatalf("the successor did not run within %v", within)
	}
	return time.Time{}
}

// end stops the successor's Lead (it resigns) and waits for it.
func (s *benchSuccessor) end(b *testing.B) {
	b.Helper()
	s.stop()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		b.Fatal("the successor's Lead did not return")
	}
}

// reportFailover reports the p50, p99 and max of took, in ms, and the max
// against bound (the lease kept plus the successor's poll interval).
func reportFailover(b *testing.B, took []time.Duration, bound time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(at(0.5)), "p50-ms")
	b.ReportMetric(ms(at(0.99)), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	b.ReportMetric(float64(took[len(took)-1])/float64(bound), "max/(lease+poll)")
}
