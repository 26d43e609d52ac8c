package lock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock. Its lease is renewed in the background until Release,
// until it is lost, or until MaxDuration. Its methods are safe for concurrent
// use.
//
// One timer keeps the lease: it fires for each renewal, every third of a
// lease, and, while a renewal is under way, at the lease's end, measured on
// this process's monotonic clock from the request that granted or last
// renewed it: then it declares the lock lost, whatever call to the provider
// is still under way. So the holder is told before another process can be
// granted the lock, however slowly the provider answers. (The timers of a
// Client's locks share one runtime timer: see leaseTimers.)
type Lock struct {
	c           *Client
	key, owner  string
	token       uint64
	opts        Options
	start       time.Time // monotonic, when the granting request was sent
	maxDeadline time.Time // monotonic

	outer *Lock       // the lock held by the call chain that ran this one (see run)
	scope scope       // the context of the handler that run runs
	rel   detachedCtx // the context of the Release that ends the hold

	renewMu  sync.Mutex // one renewal at a time
	mu       sync.Mutex // guards what follows
	state    lockState
	leaseEnd time.Time // monotonic: the record expires no earlier than this (see leaseEnd)
	renewAt  time.Time // monotonic: the next renewal
	// The lease's timer fires at renewAt, or at leaseEnd while a renewal is
	// under way; due and slot are its place in c.leases, which guards them.
	due      time.Time
	slot     int // in c.leases's heap; -1 when not in it
	lostErr  *LostError
	relErr   error         // a release that failed: said again by a later Release
	renewErr error         // the last renewal's provider error, nil after a success
	onLost   func(error)   // told of a loss (run's context)
	done     chan struct{} // made by the first call of Done
	ended    bool          // Done's channel is closed, or made closed
}

// lockState is where a Lock is in its life:
//
//	held  --Release-->  releasing  --the provider's answer-->  released
//	      --lease timer, renewal-->  lost  --Release-->  released
//
// Done is closed, and Err final, on entering lost, and on entering released
// from releasing: only once the provider has said how the release ended.
type lockState int

const (
	held      lockState = iota
	releasing           // Release has asked the provider and waits for its answer
	released            // Release has ended: lostErr or relErr say how, when not cleanly
	lost                // lost while held; Release not called yet
)

// newLock returns the Lock of a grant with ttl requested at sent; keep
// starts its timers.
func newLock(c *Client, key, owner string, token uint64, o Options, sent time.Time, ttl time.Duration) *Lock {
	l := &Lock{
		c:           c,
		key:         key,
		owner:       owner,
		token:       token,
		opts:        o,
		start:       sent,
		maxDeadline: sent.Add(o.MaxDuration),
		leaseEnd:    leaseEnd(sent, ttl),
		slot:        -1,
	}
	return l
}

// keep starts the lease's timer, for a grant with ttl requested at sent.
func (l *Lock) keep(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewAt = sent.Add(l.nextRenewal(sent, ttl))
	l.c.leases.set(l, l.renewAt)
}

// Key returns the lock's key (see Client.Key): with the Redis provider, the
// Redis key of its record.
func (l *Lock) Key() string { return l.key }

// Owner returns the id of this acquisition.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token of this grant: strictly greater than the
// token of every earlier grant of the same key by the same provider. Pass it to
// the resource the lock protects, which should reject a write carrying a token
// lower than one it has already seen.
func (l *Lock) Token() uint64 { return l.token }

// Done returns a channel that is closed when the lock is lost, or when a
// Release has ended. As with a context, once it is closed Err says how, and
// says it for good: a Release closes it only after the provider answered, so
// a lock that the release finds lost closes it with Err already the
// *LostError.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.ended {
			close(l.done)
		}
	}
	return l.done
}

// held reports whether l is still held: neither released nor lost.
func (l *Lock) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == held
}

// endLocked closes the channel of Done, if it was asked for, and makes the
// channels of later calls closed. The caller holds l.mu, once, when l is no
// longer held.
func (l *Lock) endLocked() {
	l.ended = true
	if l.done != nil {
		close(l.done)
	}
}

// Err returns nil while the lock is held (and while a Release waits for the
// provider), and after a release that did not find it lost; the *LostError
// once the lock has been lost, whether a renewal, the lease timer or the
// release found it. A Release that failed with the provider's error is not a
// loss: Err stays nil (Release returned that error, and the record expires
// within its lease). Once Done is closed, Err no longer changes.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return l.lostErr
	}
	return nil
}

// onLoss makes fn the function called with the loss error when the lock is
// lost, at once if it already is.
func (l *Lock) onLoss(fn func(error)) {
	l.mu.Lock()
	if l.state == lost {
		err := l.lostErr
		l.mu.Unlock()
		fn(err)
		return
	}
	l.onLost = fn
	l.mu.Unlock()
}

// Extend sets the lease to d from now (cut to what is left of MaxDuration) and
// goes on renewing with the configured lease. It returns a *LostError when the
// lock was lost, an error matching ErrReleased when it was released, and the
// provider's error otherwise (matching ErrUnavailable; the lock is then still
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
	d = min(d, l.maxDeadline.Sub(now))
	err = l.c.provider.Renew(rctx, l.key, l.owner, d)
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
	l.c.emit(Event{Kind: EventRenewed, Key: l.key, Owner: l.owner, Token: l.token, Lease: d, Held: time.Since(l.start)})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != held {
		return l.heldErrLocked()
	}
	l.renewErr = nil
	l.leaseEnd = leaseEnd(now, d)
	// Timed from when the renewal was sent, as the lease is: a slow reply
	// must not push the next renewal past the lease end.
	l.renewAt = now.Add(l.nextRenewal(now, d))
	l.c.leases.set(l, l.renewAt)
	return nil
}

// lose marks the lock lost with e, unless it was released meanwhile, and
// then tells everyone who asked (outside l.mu, so that they may call the
// Lock's methods).
func (l *Lock) lose(e *LostError) error {
	l.mu.Lock()
	if l.state != held {
		defer l.mu.Unlock()
		return l.heldErrLocked()
	}
	l.state = lost
	l.stopTimersLocked()
	l.lostErr = e
	onLost := l.onLost
	l.onLost = nil
	l.mu.Unlock()
	// The log and the event first, then Done and the contexts: whoever they
	// wake finds the event delivered. Only this call moved the state to lost,
	// so only it closes done.
	l.reportLoss(e)
	l.mu.Lock()
	l.endLocked()
	l.mu.Unlock()
	if onLost != nil {
		onLost(e)
	}
	return e
}

// lostError returns the LostError of a loss of l for reason.
func (l *Lock) lostError(reason LostReason, cause error) *LostError {
	return &LostError{Key: l.key, Token: l.token, Reason: reason, Cause: cause}
}

// found returns the LostError of a loss that a renewal or the release found:
// the provider answered err, a *LostError (the record gone or another's).
// When the answer came before end, the lease's end, the record cannot have
// expired: it was removed early (LostTaken, LostRemoved); otherwise the lease
// ran out. Who holds the key now is read once more (Inspect, bounded by a
// second), unless the provider said it; a failed read leaves Holder empty.
func (l *Lock) found(ctx context.Context, err error, end time.Time) *LostError {
	e := l.lostError(LostRemoved, nil)
	if !time.Now().Before(end) {
		e.Reason = LostLeaseRanOut
	}
	var pe *LostError
	if errors.As(err, &pe) && pe.Holder != "" && pe.Holder != l.owner {
		e.Holder = pe.Holder
	} else {
		ctx, cancel := context.WithTimeout(withoutCancel(ctx), min(l.c.releaseTimeout, time.Second))
		rec, err := l.c.provider.Inspect(ctx, l.key)
		cancel()
		if err == nil && rec.Owner != l.owner {
			e.Holder = rec.Owner
		}
	}
	if e.Holder != "" && e.Reason == LostRemoved {
		e.Reason = LostTaken
	}
	return e
}

// reportLoss logs the loss at warning level, the one event an operator must
// see, and emits EventLost.
func (l *Lock) reportLoss(e *LostError) {
	heldFor := time.Since(l.start)
	args := []any{"key", l.key, "token", l.token, "held", heldFor, "reason", e.Reason.String()}
	if e.Holder != "" {
		args = append(args, "holder", e.Holder)
	}
	l.c.log.Warn("lock: lost", append(args, "err", e)...)
	l.c.emit(Event{Kind: EventLost, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, Err: e})
}

func (l *Lock) stopTimersLocked() {
	l.c.leases.stop(l)
}

// heldErr returns nil while the lock is held, and why it is not otherwise.
func (l *Lock) heldErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldErrLocked()
}

// heldErrLocked is heldErr; the caller holds l.mu. A released lock's error
// names Extend, the one call that returns it.
func (l *Lock) heldErrLocked() error {
	switch {
	case l.lostErr != nil:
		return l.lostErr
	case l.state == releasing || l.state == released:
		return &releasedError{op: "extend", key: l.key}
	}
	return nil
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
	if now.Add(ttl).Before(l.maxDeadline) {
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

// closedFor returns how long the lock stays closed after a release now: the
// GracePeriod, or what is left of OncePer since the hold began, whichever is
// longer; zero (free it) when that is under a millisecond.
func (l *Lock) closedFor() time.Duration {
	if l.opts.GracePeriod == 0 && l.opts.OncePer == 0 {
		return 0
	}
	d := max(l.opts.GracePeriod, time.Until(l.start.Add(l.opts.OncePer)))
	if d < time.Millisecond {
		return 0
	}
	return d.Round(time.Millisecond)
}

// Release ends the hold: it deletes the record, hands it to the next waiter,
// or, with a GracePeriod or OncePer, keeps it closed for as long as they say.
// It runs on a context of its own (bounded by the release timeout) so that a
// cancelled ctx cannot leave the lock held. It returns nil after a clean
// release, the *LostError if the lock was lost before (or found gone or
// taken now), and the provider's error otherwise (matching ErrUnavailable;
// the record then expires within its lease). Done is closed when it returns,
// with Err saying the same. Release after Release returns what the first
// returned when it failed, and after a clean one an error matching
// ErrReleased; it does not call the provider, and while the first is under
// way it waits for its outcome.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	state, end := l.state, l.leaseEnd
	switch state {
	case held:
		l.state = releasing
		l.stopTimersLocked()
	case lost:
		l.state = released
	}
	l.onLost = nil
	l.mu.Unlock()
	c := l.c
	switch state {
	case releasing, released:
		return l.releasedAgain()
	case lost:
		// The lease ran out without a renewal; the record may still be ours.
		_ = c.provider.Release(c.detached(ctx), l.key, l.owner)
		return l.Err() // the loss
	}

	// Only this call moved the state from held: l.rel is its own.
	l.rel = c.detach(ctx)
	rctx := &l.rel
	var err error
	closed := l.closedFor()
	if closed > 0 {
		err = c.provider.Finish(rctx, l.key, l.owner, closed)
	} else {
		err = c.provider.Release(rctx, l.key, l.owner)
	}
	switch {
	case err == nil:
		c.answered()
		if c.debug {
			c.log.Debug("lock: released", "key", l.key, "token", l.token)
		}
		var heldFor time.Duration
		if len(c.hooks) > 0 { // else spare the clock read
			heldFor = time.Since(l.start)
		}
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: heldFor, GracePeriod: closed})
		l.end(nil, nil)
		return nil
	case errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord):
		e := l.lostError(LostCorrupt, err)
		if !errors.Is(err, ErrCorruptRecord) {
			e = l.found(rctx, err, end)
		}
		l.reportLoss(e)
		l.end(e, nil)
		return e
	default:
		err = c.failed(nil, "release", l.key, err)
		c.emit(Event{Kind: EventReleased, Key: l.key, Owner: l.owner, Token: l.token, Held: time.Since(l.start), Err: err})
		l.end(nil, err)
		return err
	}
}

// end ends a release: the lock is released, lost with lostErr when that is
// set, or with the release's failure relErr. Err says so before Done is
// closed.
func (l *Lock) end(lostErr *LostError, relErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = released
	if lostErr != nil {
		l.lostErr = lostErr
	}
	l.relErr = relErr
	l.endLocked()
}

// releasedAgain is Release after Release: it waits for the first one's
// outcome (Done) and returns it, the loss or the failure, or ErrReleased
// after a clean release.
func (l *Lock) releasedAgain() error {
	<-l.Done()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.lostErr != nil:
		return l.lostErr
	case l.relErr != nil:
		return l.relErr
	}
	return &releasedError{op: "release", key: l.key}
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
