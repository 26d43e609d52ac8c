package lock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A waiter is one acquisition with [Options.Wait], from its first request to
// the provider until it holds the lock or gives up. Its states, and the one
// loop that moves it from one to the next (waiter.run):
//
//	asking  --Queue call-->  granted (the reply grants the lock)
//	                         queued  (in the provider's wait queue)
//	                         gaveUp  (grace period, error)
//	queued  --grant from the inbox-->  granted (after a renewal, when the grant is old)
//	        --wake-up, timer-->        asking  (look again: see lookAgain)
//	        --context, MaxWait, Close-->  gaveUp
//
// Only the waiter's own goroutine moves it; the inbox (topic.go) hands it
// grants and wake-ups through buffered channels that never block the sender.
// A waiter that gives up leaves the provider's queue at once ([Provider.Leave],
// which also passes on a lock handed to it meanwhile), so that the lock is
// never held for a waiter that is gone.
type waiter struct {
	acquisition
	req   Wait
	state waiterState

	grants chan Notice   // a lock handed over from the queue
	wake   chan struct{} // look again: the lock entered a grace period

	asked      time.Time     // when the last request that left it queued was sent
	holder     string        // the holder when last seen
	retryAfter time.Duration // the holder's longest TTL seen
	seenTTL    time.Duration // the holder's TTL in the last reply; 0 if unknown
	headTTL    time.Duration // the queue head's entry's TTL in the last reply; 0 if unknown
	place      int           // its place in the queue in the last reply
	promised   time.Duration // a counted waiter looks again within this (see queueTTL)
	contended  bool          // EventContended was emitted
	// seenToken is the greatest token of another holder that a reply
	// leaving w queued showed: a grant with a token not above it was made
	// before that reply (had its record been w's then, the reply would have
	// granted it), so its record is gone. blindAgain: a later look left w
	// queued without showing the holder's token.
	seenToken  uint64
	blindAgain bool
}

type waiterState int

const (
	asking  waiterState = iota // a request to the provider is under way
	queued                     // in the provider's queue, waiting for a grant
	granted                    // holds the lock
	gaveUp                     // left the queue without the lock
)

func (s waiterState) String() string {
	return [...]string{"asking", "queued", "granted", "gave up"}[s]
}

// run asks for the lock until w holds it or gives up. ctx ends the wait
// with its cause ([ErrTimeout] at MaxWait, [ErrClosed] at Close).
func (w *waiter) run(ctx context.Context) (*Lock, error) {
	poll := time.NewTimer(w.c.poll)
	defer poll.Stop()
	for {
		w.state = asking
		if l, err := w.ask(ctx); l != nil || err != nil {
			return l, err
		}
		w.state = queued
		poll.Reset(w.lookAgain())
		select {
		case g := <-w.grants:
			if l, err := w.accept(ctx, g); l != nil || err != nil {
				return l, err
			}
		case <-w.wake:
		case <-poll.C:
		case <-ctx.Done():
			return nil, w.giveUp(ctx, nil)
		}
	}
}

// lookAgain returns when a queued waiter looks again if nothing wakes it.
// The first few waiters (lookers) look every poll interval, and as soon as
// the record they saw expires (its holder may have died, and nobody would
// hand the lock on: the first look that finds it free serves the queue). A
// waiter further back looks less often, up to once a minute (see every),
// so that many waiters cost the provider little.
//
// A waiter for a counted name (a Semaphore's, an [RWMutex]'s) looks soon
// after the claim it saw expire first does, wherever it is in the queue,
// and one of the first few also when the head's queue entry runs out
// (HeadTTL), so that a head whose process died or stalled is passed over;
// each a millisecond later for each waiter ahead of it, so that those
// further back are granted before their turn to look comes. It looks no
// later than it promised (see queueTTL). Why, with the figures measured:
// docs/holds.md, "When a counted waiter looks again".
func (w *waiter) lookAgain() time.Duration {
	back := w.every()
	if !w.claim.counted() {
		if w.seenTTL > 0 && w.place < lookers {
			return min(back, w.seenTTL) + time.Millisecond
		}
		return back
	}
	if w.promised > 0 {
		back = min(back, w.promised) // its entry lasts a handoff window longer
	}
	ahead := time.Duration(w.place) * time.Millisecond
	soon, known := back, false
	if w.seenTTL > 0 {
		soon, known = min(soon, w.seenTTL+ahead), true
	}
	if w.headTTL > 0 && w.place < lookers {
		soon, known = min(soon, w.headTTL+ahead), true
	}
	if !known {
		return back
	}
	return soon + time.Millisecond
}

// every returns the longest a queued waiter goes without looking, from
// its place in the last reply: the poll interval for the first few
// waiters, and the further back the longer, up to a minute.
func (w *waiter) every() time.Duration {
	return min(w.c.poll*time.Duration(1+w.place/lookers), time.Minute)
}

// queueTTL returns how long the provider keeps the queue entry of w's next
// request, of a counted name: w promises to look again within every()
// (from its place in the last reply), and the entry lasts a handoff window
// (w.req.TTL) longer, for a look that reaches the provider late. A waiter
// that stops looking holds up those behind it that long at most.
func (w *waiter) queueTTL() time.Duration {
	w.promised = w.every()
	return w.promised + w.req.TTL
}

// lookers is how many waiters at the head of a queue look every poll
// interval.
const lookers = 16

// ask sends one request. It returns the lock when the reply grants it, an
// error when w gives up, and neither when w is queued.
func (w *waiter) ask(ctx context.Context) (*Lock, error) {
	if ended(ctx) {
		return nil, w.giveUp(ctx, nil) // nothing asked (see notAcquired)
	}
	sent := time.Now()
	call, done := answerable(ctx)
	rec, err := w.c.queue(call, w.key, w.claim, w.req, w.queueTTL())
	done()
	if err != nil {
		return nil, w.giveUpFailed(ctx, w.callFailed(ctx, "wait", err, sent))
	}
	w.c.answered()
	if err := w.kindMix(rec); err != nil {
		return nil, w.giveUp(ctx, err)
	}
	switch {
	case rec.Owner == w.req.Owner && !rec.GracePeriod && ended(ctx):
		// Granted after the wait ended: giveUp's Leave hands it on.
		return nil, w.giveUp(ctx, nil)
	case rec.Owner == w.req.Owner && !rec.GracePeriod:
		return w.confirm(ctx, rec, sent, false)
	case rec.GracePeriod:
		w.holder, w.retryAfter = rec.Owner, rec.TTL
		return nil, w.giveUp(ctx, ErrGracePeriod)
	}
	if err := roleMix(w.key, w.req.Owner, rec.Owner); err != nil {
		return nil, w.giveUp(ctx, err)
	}
	if rec.Owner != "" {
		w.holder = rec.Owner
		w.seenToken = max(w.seenToken, rec.Token)
	} else if w.req.Look == LookAgain {
		w.blindAgain = true
	}
	if !w.contended {
		w.contended = true
		w.c.emit(Event{Kind: EventContended, Key: w.key, Owner: w.req.Owner})
	}
	w.c.busy.mark(w.key)
	w.asked, w.seenTTL, w.headTTL, w.place = sent, rec.TTL, rec.HeadTTL, rec.Position
	w.retryAfter = max(w.retryAfter, rec.TTL)
	w.req.Look = LookAgain
	return nil, nil
}

// accept turns a grant from the queue into the lock. A grant made before a
// later look of w's that left it queued (a message that came late: a stalled
// process, a slow connection) is stale: its record expired, and another
// owner may hold the lock; w looks again. Otherwise the provider stored the
// record after w's last request was sent, so the lease counts from then
// (see confirm); when w cannot tell the grant's age (a later look did not
// show the holder's token), it renews it before it relies on it.
func (w *waiter) accept(ctx context.Context, g Notice) (*Lock, error) {
	if ended(ctx) {
		// The wait ended as the grant came (select chose it over
		// ctx.Done): giveUp's Leave hands it on.
		return nil, w.giveUp(ctx, nil)
	}
	if g.Token <= w.seenToken {
		return nil, nil
	}
	return w.confirm(ctx, Record{Owner: g.Owner, Token: g.Token, TTL: g.TTL}, w.asked, w.blindAgain)
}

// confirm turns a grant of rec, whose lease counts from sent, into the
// lock. When little of that lease is left (a reply or a message that came
// late: a stalled process, a request held up in the client's retries during
// an outage) or unsure says its age is unknown, w renews it before it
// relies on it, and looks again if the record is gone meanwhile: a grant
// that came too late to use is neither held nor lost.
func (w *waiter) confirm(ctx context.Context, rec Record, sent time.Time, unsure bool) (*Lock, error) {
	if ttl := w.leaseOf(rec); !unsure && time.Until(leaseEnd(sent, ttl)) > ttl/2 {
		return w.grant(rec, sent), nil
	}
	if ended(ctx) {
		return nil, w.giveUp(ctx, nil) // nothing asked (see notAcquired)
	}
	sent = time.Now()
	err := w.c.renew(ctx, w.key, w.req.Owner, w.claim, w.o.Lease)
	switch {
	case err == nil && ended(ctx):
		return nil, w.giveUp(ctx, nil) // renewed after the wait ended: handed on
	case err == nil:
		w.c.answered()
		rec.TTL = w.o.Lease
		return w.grant(rec, sent), nil
	case errors.Is(err, ErrLost):
		if w.c.debug {
			w.c.log.Debug("lock: grant came too late to use; looking again", "key", w.key, "owner", w.req.Owner, "token", rec.Token)
		}
		select {
		case w.wake <- struct{}{}: // at once, not at the next poll
		default:
		}
		return nil, nil
	}
	return nil, w.giveUpFailed(ctx, w.callFailed(ctx, "renew", err, sent))
}

// slowAnswer is how long a call of a queued waiter may go unanswered before
// the end of its wait reads as an outage (see callFailed), and how long a
// waiter's request goes on after its wait was cancelled (see answerable).
const slowAnswer = time.Second

// answerable returns the context of a waiter's request (Queue,
// QueueClaim), and the function that ends it once the request returned:
// ctx's values, ended a moment after ctx ends, so that a request under way
// when the wait ends is answered. A backend may apply a request that its
// caller cut short after the caller's next call: PostgreSQL runs a
// statement whose connection the client closed, and the waiter's Leave,
// sent next on another connection, may run before it, leaving the lock
// granted to nobody, or a waiter queued that has gone (issue 38: on
// PostgreSQL, under waits cancelled, short MaxWaits and Clients closed
// under their waiters, the lock sat free for the handoff window while live
// waiters waited). A request answered is cleaned up after its answer. The
// moment is slowAnswer after a cancellation, and no later than settleSlack
// past ctx's deadline, which bounds the caller (see settle); a request cut
// short then reads as unanswered (see callFailed), and what it may have
// stored expires with its TTL. (A first attempt's Acquire, on the path of
// every uncontended acquisition, is not held so: its round trip is short,
// and a context that ends in it rare.)
func answerable(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	call, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	ended := func() {}
	if d, ok := ctx.Deadline(); ok {
		// The request's own deadline, which a client may set on its
		// socket (go-redis with ContextTimeoutEnabled).
		call, ended = context.WithDeadline(call, d.Add(settleSlack))
	}
	var mu sync.Mutex
	var late *time.Timer
	returned := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			late = time.AfterFunc(slowAnswer, func() { cancel(context.Cause(ctx)) })
		}
	})
	return call, func() {
		stop()
		mu.Lock()
		returned = true
		if late != nil {
			late.Stop()
		}
		mu.Unlock()
		ended()
		cancel(nil)
	}
}

// callFailed is failed for the call op of w's, sent at sent, that returned
// err, except when the end of the wait cut it short while w was in the
// provider's queue and the provider had had it for less than slowAnswer:
// then it returns nil, and w gave up as a wait that timed out in the queue.
// The provider had answered w (it queued it) and had little time to answer
// again; a call cut short later, or before w was ever queued, still reads
// as unanswered ([ErrUnavailable]).
func (w *waiter) callFailed(ctx context.Context, op string, err error, sent time.Time) error {
	if isContextErr(err) {
		ended(ctx) // a client that ends the call at ctx's deadline may beat ctx's own timer
	}
	if !w.asked.IsZero() && ctx.Err() != nil && isContextErr(err) && time.Since(sent) < slowAnswer {
		return nil
	}
	return w.failed(ctx, op, err)
}

func (w *waiter) grant(rec Record, sent time.Time) *Lock {
	w.state = granted
	return w.lockFor(rec, sent)
}

// giveUp leaves the queue, passing on a lock handed to w meanwhile, and
// returns why: a *NotAcquiredError when ctx ended or reason is
// [ErrGracePeriod] or a refusal, reason itself otherwise. It leaves before
// it returns, on a context of its own bounded by the release timeout, so
// that a caller whose wait ended finds nothing of its own stored: the
// provider answered w's last call, or no call was under way. But it waits
// for the Leave only as long as ctx's deadline allows (see settle): past
// it, the Leave goes on in the background.
func (w *waiter) giveUp(ctx context.Context, reason error) error {
	w.quit()
	c, key, cl, req := w.c, w.key, w.claim, w.req
	_ = c.settle(ctx, func(ctx context.Context) error { return c.leave(ctx, key, cl, req) })
	return w.notAcquired(ctx, reason, w.holder, w.retryAfter)
}

// giveUpFailed is giveUp after a call that failed or went unanswered: the
// provider may not answer the Leave either, so w leaves in the background
// (Close waits for it) and the caller is not kept waiting; if the Leave
// fails, the queue entry expires with its TTL.
func (w *waiter) giveUpFailed(ctx context.Context, reason error) error {
	w.quit()
	c, key, cl, req := w.c, w.key, w.claim, w.req
	c.background(ctx, func(ctx context.Context) { _ = c.leave(ctx, key, cl, req) })
	return w.notAcquired(ctx, reason, w.holder, w.retryAfter)
}

// quit marks w as gone: from now on, a grant for w is handed back.
func (w *waiter) quit() {
	w.state = gaveUp
	w.c.inbox.leave(w)
}
