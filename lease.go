package lock

// Leases: a held lock is renewed by its lease timer, every third of a lease,
// and declared lost at the lease's end if no renewal succeeded; the timers of
// a Client's locks share one runtime timer (leaseTimers).

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// keep starts the lease's timer, for a grant with ttl requested at sent.
func (l *Lock) keep(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewAt = sent.Add(l.nextRenewal(sent, ttl))
	l.c.leases.set(l, l.renewAt)
}

// Extend sets the lease to d from now (cut to what is left of MaxDuration) and
// goes on renewing with the configured lease. It returns a *LostError when the
// lock was lost, an error matching [ErrReleased] when it was released, and the
// provider's error otherwise (matching [ErrUnavailable]; the lock is then still
// held until its current lease ends). It gives up at the end of the current
// lease: a renewal that arrives later is too late.
func (l *Lock) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return invalidf("Extend duration %v is not positive", d)
	}
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	return l.refresh(ctx, d)
}

// refresh renews the record to ttl d (cut to MaxDuration), before the current
// lease ends, and schedules the next renewal. The caller holds l.renewMu:
// renewals run one at a time, outside l.mu, so that Release and Err never
// wait for the network.
func (l *Lock) refresh(ctx context.Context, d time.Duration) error {
	l.mu.Lock()
	err, end := l.heldErrLocked(), l.leaseEnd
	l.mu.Unlock()
	if err != nil {
		return err
	}
	now := time.Now()
	if l.overMax(now) {
		return l.lose(l.lostError(LostMaxDuration, l.heldTooLong()))
	}
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	d = min(d, l.opts.MaxDuration-now.Sub(l.start))
	err = l.c.renew(rctx, l.key, l.owner, l.claim, d)
	switch {
	case errors.Is(err, ErrLost):
		return l.lose(l.found(ctx, err, end)) // found gone or taken
	case errors.Is(err, ErrCorruptRecord):
		return l.lose(l.lostError(LostCorrupt, err))
	case err != nil && !time.Now().Before(end):
		_ = l.c.failed(ctx, "renew", l.key, err) // remembered as the provider's last error
		return l.lose(l.lostError(LostUnreachable, fmt.Errorf("%w: %w", errLeaseRanOut, err)))
	case err != nil:
		if herr := l.heldErr(); herr != nil {
			return herr // lost meanwhile, or released
		}
		l.mu.Lock()
		l.renewErr = err
		l.mu.Unlock()
		err = l.c.failed(ctx, "renew", l.key, err)
		l.c.emit(Event{Kind: EventRenewed, Key: l.key, Owner: l.owner, Token: l.token, Lease: d, Held: time.Since(l.start), Err: err})
		return err
	}
	l.c.answered()
	l.mu.Lock()
	if l.state != held {
		// Released or lost while the renewal was under way: not reported,
		// so that no EventRenewed follows the hold's end.
		defer l.mu.Unlock()
		return l.heldErrLocked()
	}
	l.renewErr = nil
	l.leaseEnd = leaseEnd(now, d)
	// Timed from when the renewal was sent, as the lease is: a slow reply
	// must not push the next renewal past the lease end.
	l.renewAt = now.Add(l.nextRenewal(now, d))
	l.c.leases.set(l, l.renewAt)
	l.mu.Unlock()
	l.c.emit(Event{Kind: EventRenewed, Key: l.key, Owner: l.owner, Token: l.token, Lease: d, Held: time.Since(l.start)})
	return nil
}

// lostAlready returns the loss of l when it is lost, or when its lease
// has run out already (it then declares the loss), and nil otherwise.
func (l *Lock) lostAlready() error {
	l.mu.Lock()
	err, end := l.heldErrLocked(), l.leaseEnd
	l.mu.Unlock()
	if err == nil && !time.Now().Before(end) {
		return l.lose(l.lostError(LostLeaseRanOut, nil))
	}
	return err
}

// stopTimersLocked stops the lease's timer. The caller holds l.mu.
func (l *Lock) stopTimersLocked() {
	l.c.leases.stop(l)
}

// leaseEnd returns until when a holder may count on a record granted or renewed
// with ttl by a request sent at sent: the server's TTL starts later than sent,
// and a margin of 2% + 2ms allows for the two clocks running at different
// rates, so the holder is told of a loss before another can take the lock.
func leaseEnd(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - min(ttl/50+2*time.Millisecond, ttl/2))
}

// nextRenewal returns the delay, from now, of the renewal after a lease of
// ttl granted at now: a third of the lease, or the end of the lease when it
// already reaches MaxDuration (then the lease timer finds the hold over).
func (l *Lock) nextRenewal(now time.Time, ttl time.Duration) time.Duration {
	if now.Sub(l.start)+ttl < l.opts.MaxDuration {
		return ttl / 3
	}
	return leaseEnd(now, ttl).Sub(now)
}

// tick runs when the lease's timer fires, each time on a goroutine of its
// own: at the lease's end, it declares the lock lost (a renewal under way
// has not come back in time); when a renewal is due, it arms the timer for
// the lease's end and renews (which arms it for the next renewal when it
// succeeds); otherwise (a renewal moved both meanwhile) it arms the timer
// for the next renewal.
func (l *Lock) tick() {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	switch {
	case !now.Before(l.leaseEnd):
		renewErr := l.renewErr
		l.mu.Unlock()
		switch {
		case l.overMax(now):
			_ = l.lose(l.lostError(LostMaxDuration, l.heldTooLong()))
		case renewErr != nil:
			_ = l.lose(l.lostError(LostUnreachable, fmt.Errorf("%w: %w", errLeaseRanOut, renewErr)))
		default:
			_ = l.lose(l.lostError(LostLeaseRanOut, errLeaseRanOut))
		}
	case now.Before(l.renewAt):
		l.c.leases.set(l, l.renewAt)
		l.mu.Unlock()
	default:
		l.c.leases.set(l, l.leaseEnd)
		l.mu.Unlock()
		l.renew()
	}
}

// renew renews the lease, and tries again soon after a transient failure.
// It may block on the provider; the timer, armed for the lease's end,
// declares the loss meanwhile if the lease runs out.
func (l *Lock) renew() {
	l.mu.Lock()
	state, end := l.state, l.leaseEnd
	l.mu.Unlock()
	if state != held {
		return
	}
	if l.overMax(time.Now()) {
		_ = l.lose(l.lostError(LostMaxDuration, l.heldTooLong()))
		return
	}
	if !l.renewMu.TryLock() {
		// An Extend is under way; look again soon.
		l.resetRenewal(min(l.opts.Lease/10, time.Until(end)))
		return
	}
	err := l.refresh(context.Background(), l.opts.Lease)
	l.renewMu.Unlock()
	if err != nil && !errors.Is(err, ErrLost) {
		// A transient failure: try again soon; the lease timer watches the end.
		l.resetRenewal(min(l.opts.Lease/10, time.Until(end)))
	}
}

// errLeaseRanOut is the cause of a loss found by the holder's own clock.
var errLeaseRanOut = errors.New("the lease ran out before it was renewed")

// overMax reports whether the hold has reached its MaxDuration (with the same
// margin as a lease).
func (l *Lock) overMax(now time.Time) bool {
	return !now.Before(leaseEnd(l.start, l.opts.MaxDuration))
}

func (l *Lock) heldTooLong() error {
	return fmt.Errorf("held for its MaxDuration %v", l.opts.MaxDuration)
}

// resetRenewal renews again after d (at least a millisecond, and never
// after the lease's end, when the timer fires anyway), while the lock is
// held.
func (l *Lock) resetRenewal(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == held {
		l.renewAt = time.Now().Add(max(d, time.Millisecond))
		l.c.leases.set(l, minTime(l.renewAt, l.leaseEnd))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// leaseTimers are the lease timers of a Client's locks: one runtime timer,
// armed for the earliest of them, and a heap of the locks by when theirs
// fires. A release leaves the runtime timer as it is, and a lock taken later
// falls due later than it, so acquiring and releasing rarely touch it.
type leaseTimers struct {
	mu    sync.Mutex
	locks timeHeap[*Lock] // by when their timers fire
	timer *time.Timer     // made at the first set; fires at armed
	armed time.Time       // zero when the timer is not armed
}

// set makes l's timer fire at t: then l.tick runs, on a goroutine of its
// own. The caller holds l.mu.
func (s *leaseTimers) set(l *Lock, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.due = t
	if l.slot < 0 {
		heap.Push(&s.locks, l)
	} else {
		heap.Fix(&s.locks, l.slot)
	}
	s.armLocked()
}

// stop stops l's timer. The caller holds l.mu.
func (s *leaseTimers) stop(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.slot >= 0 {
		heap.Remove(&s.locks, l.slot)
	}
}

// armLocked arms the runtime timer for the earliest lock, unless it fires no
// later than that already (it arms itself again then).
func (s *leaseTimers) armLocked() {
	if len(s.locks) == 0 {
		return
	}
	due := s.locks[0].due
	if !s.armed.IsZero() && !s.armed.After(due) {
		return
	}
	s.armed = due
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(due), s.fire)
	} else {
		s.timer.Reset(time.Until(due))
	}
}

// fire runs the ticks of the locks whose timers are due, and arms the runtime
// timer for the next.
func (s *leaseTimers) fire() {
	s.mu.Lock()
	s.armed = time.Time{}
	now := time.Now()
	var due []*Lock
	for len(s.locks) > 0 && !s.locks[0].due.After(now) {
		due = append(due, heap.Pop(&s.locks).(*Lock))
	}
	s.armLocked()
	s.mu.Unlock()
	for _, l := range due {
		go l.tick()
	}
}

func (l *Lock) when() time.Time { return l.due }
func (l *Lock) place() *int     { return &l.slot }
