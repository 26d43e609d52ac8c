package lock

// Observing a role: who leads it now, and each term, heard from the
// provider's Watch of the role's key (Campaign, Resign and ForceRelease
// tell it with Notify) and read with Inspect.

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Leader is who leads a role, as Observe reads it.
type Leader struct {
	// Role is the role observed.
	Role string
	// Owner is the leader's term's owner ([Term.Owner]); empty when nobody
	// leads (see Vacant).
	Owner string
	// Identity is the identity of the leader's Client ([WithIdentity]): name
	// each process with it (a host and port, a pod name) so that observers
	// know where the leader runs. Empty when nobody leads or the Client set
	// none.
	Identity string
	// Term is the term's number ([Term.Token]); zero when nobody leads.
	Term uint64
	// Since is when the term began, by the clock of the process that
	// granted it (see [Status.Since]); for a term that had ended before
	// Observe could read it, when Observe heard of it. Zero when nobody
	// leads.
	Since time.Time
	// Err is set when the state could not be read (the provider's error):
	// the other fields are then the last state sent, which may be stale.
	// Observe reads again at its next notice or poll, and sends the state
	// it reads next, changed or not.
	Err error
}

// Vacant reports whether nobody leads the role: no leader, or the state
// could not be read before anything else was sent (Err set).
func (l Leader) Vacant() bool { return l.Owner == "" }

// Observe returns a channel of who leads role: first the state now (a
// Leader, or a Vacant one when nobody leads), then each term, in the order
// of their numbers and each once, and nobody (a Vacant Leader) when a read
// finds the role free. A vacancy between two terms is sent only if a read
// falls within it (a Resign followed at once by a Campaign mostly leaves
// none). Once the role stops changing, the last value sent is its state. A
// read that fails is sent once, as a Leader with Err set, and the next
// read that succeeds is sent whatever it says. The channel is closed when
// ctx ends or the Client closes: cancel ctx when done. Observe returns
// [ErrInvalidArgument] for a bad role.
//
// Observe hears the role's changes on its watch ([Provider.Watch]) and
// reads the role's record at each notice, when the leader's record would
// expire, and every poll interval ([WithPollInterval]): a term won,
// resigned or forced off reaches the channel within a round trip or two,
// anything else within a poll interval. docs/elections.md says what may be
// missed, and how a leader publishes where it runs (its Client's
// identity: Leader.Identity).
func (c *Client) Observe(ctx context.Context, role string) (<-chan Leader, error) {
	if _, err := c.checkName(role); err != nil {
		return nil, err
	}
	ch := make(chan Leader)
	go c.observe(ctx, role, ch)
	return ch, nil
}

// observe watches role and sends its state on ch: first, then when it
// changed, after a failure, and each term heard of; it closes ch when ctx
// ends or the Client closes.
func (c *Client) observe(ctx context.Context, role string, ch chan<- Leader) {
	defer close(ch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closing, cancel)
	defer stop()
	key := c.Key(role)
	h := &heard{ready: make(chan struct{}, 1)}
	var unwatch func()
	defer func() {
		if unwatch != nil {
			unwatch()
		}
	}()
	o := observer{role: role, ch: ch, first: true}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-h.ready:
		case <-ctx.Done():
			return
		}
		if unwatch == nil {
			unwatch = c.watch(ctx, key, h.add) // before the read: no change between them is missed
		}
		terms := h.drain(0)
		now, until, err := c.leader(ctx, role)
		if err == nil && now.Term != 0 {
			// Terms heard of during the read, older than the one it
			// found, came before it: they are sent before it, not
			// dropped later as older than a term sent.
			terms = append(terms, h.drain(now.Term)...)
		}
		slices.SortFunc(terms, func(a, b Notice) int { return cmp.Compare(a.Token, b.Token) })
		if err != nil {
			h.keep(terms) // for the read that succeeds
		}
		if ctx.Err() != nil || !o.tell(ctx, terms, now, err) {
			return
		}
		next := c.poll
		if !until.IsZero() {
			// just after the expiry, unless renewed; 5ms at least, should
			// the record outlive the time it said it had
			next = min(next, max(time.Until(until)+time.Millisecond, 5*time.Millisecond))
		}
		timer.Reset(next)
	}
}

// watch opens a Watch of key, within observeBound, and returns its stop;
// or nil when it failed, to be tried again at the next read (until then,
// Observe reads every poll interval).
func (c *Client) watch(ctx context.Context, key string, deliver func(Notice)) func() {
	wctx, cancel := context.WithTimeout(ctx, c.observeBound())
	defer cancel()
	stop, err := c.provider.Watch(wctx, key, deliver)
	if err != nil {
		c.log.Debug("lock: watch failed; Observe tries again at its next read", "key", key, "err", err)
		return nil
	}
	return stop
}

// observer is what observe has sent.
type observer struct {
	role  string
	ch    chan<- Leader
	first bool   // nothing sent yet
	last  Leader // the last value sent
	term  uint64 // the highest term sent
}

// tell sends the terms heard of that are newer than every term sent, in
// order (but the one read, sent next with what the read says of it), then
// the state read, when it changed or follows a failure; or, when the read
// failed (err), the failure, once. It reports false if ctx ended first.
func (o *observer) tell(ctx context.Context, terms []Notice, now Leader, err error) bool {
	if err != nil {
		if o.last.Err != nil {
			return true // told already: read again
		}
		o.last.Role, o.last.Err = o.role, err
		return o.send(ctx, o.last)
	}
	for _, n := range terms {
		if n.Token > o.term && n.Token != now.Term {
			heardAt := time.Now()
			if !o.send(ctx, leaderOf(status(o.role, n.Key, Record{Owner: n.Owner, Token: n.Token, Since: heardAt}, heardAt))) {
				return false
			}
		}
	}
	switch {
	case now.Term != 0 && now.Term < o.term:
		return true // read before a term sent: stale
	case o.first || o.last.Err != nil || now.Owner != o.last.Owner || now.Term != o.last.Term:
		return o.send(ctx, now)
	}
	return true
}

// send sends l, and reports false if ctx ends first.
func (o *observer) send(ctx context.Context, l Leader) bool {
	select {
	case o.ch <- l:
	case <-ctx.Done():
		return false
	}
	o.first, o.last = false, l
	o.term = max(o.term, l.Term)
	return true
}

// heard keeps the terms a Watch told of until observe takes them.
type heard struct {
	mu    sync.Mutex
	terms []Notice
	ready chan struct{} // a notice came
}

// maxHeard bounds the terms kept between two reads; more are dropped (the
// read still sees the state they led to).
const maxHeard = 1024

// add is the Watch's deliver: it keeps n if it tells of a term, and wakes
// observe.
func (h *heard) add(n Notice) {
	if n.Owner != "" {
		h.mu.Lock()
		if len(h.terms) < maxHeard {
			h.terms = append(h.terms, n)
		}
		h.mu.Unlock()
	}
	select {
	case h.ready <- struct{}{}:
	default:
	}
}

// keep gives back terms that take returned, to be taken again.
func (h *heard) keep(terms []Notice) {
	h.mu.Lock()
	h.terms = append(terms, h.terms...)
	if len(h.terms) > maxHeard {
		h.terms = h.terms[len(h.terms)-maxHeard:] // the newest
	}
	h.mu.Unlock()
}

// drain returns the terms heard of since the last drain: all of them, or
// when upTo is not zero, those numbered up to upTo (the others stay).
func (h *heard) drain(upTo uint64) []Notice {
	h.mu.Lock()
	defer h.mu.Unlock()
	if upTo == 0 {
		terms := h.terms
		h.terms = nil
		return terms
	}
	var taken, kept []Notice
	for _, n := range h.terms {
		if n.Token <= upTo {
			taken = append(taken, n)
		} else {
			kept = append(kept, n)
		}
	}
	h.terms = kept
	return taken
}

// observeBound bounds each call of Observe's to the provider (a Watch, a
// read): a poll interval, from one to five seconds. A provider that does
// not answer then yields a Leader with Err, not a silent channel.
func (c *Client) observeBound() time.Duration {
	return min(max(c.poll, time.Second), 5*time.Second)
}

// leader reads who leads role now, within observeBound, and when the
// leader's record expires unless renewed (zero when nobody leads).
func (c *Client) leader(ctx context.Context, role string) (Leader, time.Time, error) {
	key := c.Key(role)
	rctx, cancel := context.WithTimeout(ctx, c.observeBound())
	defer cancel()
	rec, err := c.provider.Inspect(rctx, key)
	if err != nil {
		return Leader{}, time.Time{}, c.failed(ctx, "inspect", key, err)
	}
	s := status(role, key, rec, time.Now())
	return leaderOf(s), s.Until, nil
}

// leaderOf returns who leads, as s says: nobody when the record is free or
// in a grace period.
func leaderOf(s Status) Leader {
	l := Leader{Role: s.Name}
	if !s.Free() && !s.GracePeriod {
		l.Owner, l.Identity, l.Term, l.Since = s.Owner, s.Identity, s.Token, s.Since
	}
	return l
}

// announce tells the Watches of key (Observe) of a term won (n with Owner)
// or ended (n without), as long as ctx's deadline allows (see settle): a
// failure is logged, and observers then find the change at their next
// read.
func (c *Client) announce(ctx context.Context, key string, n Notice) {
	n.Key = key
	if err := c.settle(ctx, func(ctx context.Context) error { return c.provider.Notify(ctx, key, n) }); err != nil {
		c.log.Debug("lock: notify failed", "key", key, "err", err)
	}
}
