package postgres_test

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

// BenchmarkAcquireRelease measures one uncontended Acquire and its Release,
// two round trips to the server, one key after another.
func BenchmarkAcquireRelease(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	for b.Loop() {
		if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, key, "o-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseParallel is BenchmarkAcquireRelease from several
// goroutines, each on keys of its own.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	base := "bench:" + randomHex(4) + ":"
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		key := base + strconv.FormatInt(n.Add(1), 10)
		for pb.Next() {
			if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
				b.Error(err)
				return
			}
			if err := p.Release(ctx, key, "o-1"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRenewal measures one renewal (Update) of a held record.
func BenchmarkRenewal(b *testing.B) {
	p := newProvider(b, testPrefix(b))
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	if _, err := p.Acquire(ctx, key, "o-1", 10*time.Second); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := p.Renew(ctx, key, "o-1", 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOver measures a lock passed from holder to holder through
// the queue: Release, NOTIFY, and the next holder's grant read by Listen.
func BenchmarkHandOver(b *testing.B) {
	prefix := testPrefix(b)
	p := newProvider(b, prefix)
	ctx := context.Background()
	key := "bench:" + randomHex(4)
	inbox := "inbox:" + randomHex(4)
	grants := make(chan lock.Grant, 1)
	stop, err := p.Listen(ctx, inbox, func(g lock.Grant) { grants <- g })
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	holder := "o-0"
	if _, err := p.Acquire(ctx, key, holder, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		w := lock.Waiter{Owner: "o-" + strconv.Itoa(i), TTL: 10 * time.Second, Inbox: inbox}
		if _, err := p.Queue(ctx, key, w); err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx, key, holder); err != nil {
			b.Fatal(err)
		}
		if g := <-grants; g.Owner != w.Owner {
			b.Fatalf("grant to %q, want %q", g.Owner, w.Owner)
		}
		holder = w.Owner
	}
	_ = p.Release(ctx, key, holder)
}

// BenchmarkElectionFailover measures how long a role is without a running
// leader: from the leader's death (its renewals stop getting through, at a
// random point of its renewal cycle; its record is left to expire) or from
// the start of its Resign, until the function of a Lead waiting behind it,
// on a pool of its own, runs. One op is one round; the figures are the
// metrics (the rounds' p50, p99 and max, and the max against the lease plus
// the successor's poll interval), not ns/op, which counts each round's
// set-up. Lease 1 s; the successor's Client polls every second (the
// default). A leader that lost its term before its Resign (its renewals
// held up on a loaded machine) is not counted, but reported as
// lost-before-resign. Run it with a bounded count:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 20x .
func BenchmarkElectionFailover(b *testing.B) {
	const lease, poll = time.Second, time.Second
	prefix := testPrefix(b)
	for _, death := range []bool{false, true} {
		name := "resign"
		if death {
			name = "death"
		}
		b.Run(name, func(b *testing.B) {
			next := newClient(b, newProvider(b, prefix), lock.WithPollInterval(poll))
			leaders := newProvider(b, prefix) // a pool of the leaders' own
			var took []time.Duration
			lost := 0 // rounds whose leader lost its term before its Resign
			for round := range b.N {
				role := "failover:" + name + ":" + randomHex(4) + ":" + strconv.Itoa(round)
				dying := &stoppedRenewals{Provider: leaders}
				lc, err := lock.NewClient(dying)
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
					dying.stopped.Store(true)
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
			reportFailover(b, took, lease+poll)
			if lost > 0 {
				b.ReportMetric(float64(lost), "lost-before-resign")
			}
		})
	}
}

// stoppedRenewals is a provider whose renewals stop getting through once
// stopped is set: the leader's process is gone, as far as the store can tell.
type stoppedRenewals struct {
	lock.Provider
	stopped atomic.Bool
}

func (p *stoppedRenewals) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.stopped.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
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
// against bound (the lease plus the successor's poll interval).
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
