package lock

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"time"

	"github.com/seed05627090/lock/check"
)

// The memoryProvider's counted names (see Provider.AcquireClaim): each is a
// memName, apart from the records of locks. A name is in the provider's
// heap of names by the soonest time one of its claims or waiters expires,
// so that expire drops what expired of names nobody calls any more; the
// calls on a name serve its queue.

// memName is a counted name: its kind and limit, its live claims in the
// order they were granted, and its queue in arrival order.
type memName struct {
	key    string
	kind   Kind
	limit  int
	used   int // the weight of the claims
	claims []memClaim
	queue  []memWaiter
	due    time.Time // the soonest deadline of a claim or a waiter
	index  int       // in the provider's heap of names
}

type memClaim struct {
	owner    string
	weight   int
	token    uint64
	since    time.Time
	deadline time.Time
}

// memWaiter is a queued Claim, dropped when it has not looked for its
// QueueTTL (its caller died, or stalled).
type memWaiter struct {
	c        Claim
	deadline time.Time
}

func (n *memName) when() time.Time { return n.due }
func (n *memName) place() *int     { return &n.index }

// AcquireClaim implements Provider.
func (m *memoryProvider) AcquireClaim(ctx context.Context, key string, c Claim) (Record, error) {
	if err := c.Check(key); err != nil {
		return Record{}, err
	}
	return m.claim(ctx, key, c, false)
}

// QueueClaim implements Provider.
func (m *memoryProvider) QueueClaim(ctx context.Context, key string, c Claim) (Record, error) {
	if err := checkQueued(key, c); err != nil {
		return Record{}, err
	}
	return m.claim(ctx, key, c, true)
}

// checkQueued checks the claim of a waiter: [Claim.Check] and [check.Inbox].
func checkQueued(key string, c Claim) error {
	if err := c.Check(key); err != nil {
		return err
	}
	return check.Inbox(c.Inbox)
}

// claim is AcquireClaim, or QueueClaim when queue is set.
func (m *memoryProvider) claim(ctx context.Context, key string, c Claim, queue bool) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	now := m.expire()
	n := m.names[key]
	if n != nil && (n.limit != c.Limit || n.kind != c.Kind) {
		rec := n.record(now)
		m.mu.Unlock()
		return rec, nil
	}
	if r := m.records[key]; n == nil && r != nil {
		// A lock's record: not a counted name's to make.
		rec := r.record(now)
		rec.Kind = KindLock
		m.mu.Unlock()
		return rec, nil
	}
	if n == nil {
		n = &memName{key: key, kind: c.Kind, limit: c.Limit}
		m.names[key] = n
		heap.Push(&m.counted, n)
	}
	msgs := m.serveClaims(n, now)
	if i := n.holder(c.Owner); i >= 0 {
		n.claims[i].deadline = now.Add(c.TTL)
		n.dequeue(c.Owner)
	} else if len(n.queue) == 0 && n.used+c.Weight <= n.limit {
		n.grant(m.nextToken(), c.Owner, c.Weight, c.TTL, now)
	} else if queue {
		n.enqueue(c, now)
	}
	rec := n.record(now)
	if i := n.holder(c.Owner); i >= 0 {
		rec.Owner, rec.Token, rec.TTL, rec.Since = c.Owner, n.claims[i].token, c.TTL, n.claims[i].since
	} else if i := n.waiter(c.Owner); i >= 0 {
		rec.Queued, rec.Position = true, i
		if i > 0 {
			rec.HeadTTL = max(n.queue[0].deadline.Sub(now), time.Millisecond)
		}
	}
	m.settle(n)
	m.mu.Unlock()
	send(msgs)
	return rec, nil
}

// LeaveClaim implements Provider.
func (m *memoryProvider) LeaveClaim(ctx context.Context, key string, c Claim) error {
	if err := checkQueued(key, c); err != nil {
		return err
	}
	return m.change(ctx, key, c.Owner, true, func(n *memName, i int, _ time.Time) {
		n.dequeue(c.Owner)
		if i >= 0 {
			n.drop(i)
		}
	})
}

// RenewClaim implements Provider.
func (m *memoryProvider) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	if err := check.Args(key, owner, ttl); err != nil {
		return err
	}
	return m.change(ctx, key, owner, false, func(n *memName, i int, now time.Time) {
		n.claims[i].deadline = now.Add(ttl)
	})
}

// ReleaseClaim implements Provider.
func (m *memoryProvider) ReleaseClaim(ctx context.Context, key, owner string) error {
	if err := check.KeyOwner(key, owner); err != nil {
		return err
	}
	return m.change(ctx, key, owner, false, func(n *memName, i int, _ time.Time) { n.drop(i) })
}

// LowerClaim implements Provider.
func (m *memoryProvider) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	if err := check.KeyOwner(key, owner); err != nil {
		return err
	}
	if err := check.Weight(weight); err != nil {
		return err
	}
	return m.change(ctx, key, owner, false, func(n *memName, i int, _ time.Time) {
		if cl := &n.claims[i]; weight < cl.weight {
			n.used -= cl.weight - weight
			cl.weight = weight
		}
	})
}

// change applies do to owner's live claim under key, at index i (or -1
// when owner holds none and absentOK), serves the queue and sends the
// grants. Without absentOK, a claim that is not there is a *LostError.
func (m *memoryProvider) change(ctx context.Context, key, owner string, absentOK bool, do func(n *memName, i int, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	now := m.expire()
	n := m.names[key]
	i := -1
	if n != nil {
		i = n.holder(owner)
	}
	if n == nil || i < 0 && !absentOK {
		var msgs []memMessage
		if n != nil {
			msgs = m.serveClaims(n, now)
			m.settle(n)
		}
		m.mu.Unlock()
		send(msgs)
		if absentOK {
			return nil
		}
		return &LostError{Key: key}
	}
	do(n, i, now)
	msgs := m.serveClaims(n, now)
	m.settle(n)
	m.mu.Unlock()
	send(msgs)
	return nil
}

// InspectClaims implements Provider.
func (m *memoryProvider) InspectClaims(ctx context.Context, key string) (Claims, error) {
	if err := ready(ctx, check.Key(key)); err != nil {
		return Claims{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.expire()
	n := m.names[key]
	if n == nil {
		return Claims{}, nil
	}
	n.reap(now)
	cs := Claims{Limit: n.limit, Kind: n.kind}
	for _, cl := range n.claims {
		cs.Holders = append(cs.Holders, Record{Owner: cl.owner, Token: cl.token, TTL: cl.deadline.Sub(now), Since: cl.since})
		cs.Weights = append(cs.Weights, cl.weight)
	}
	for _, w := range n.queue {
		cs.Queue = append(cs.Queue, w.c)
	}
	if len(cs.Holders) == 0 && len(cs.Queue) == 0 {
		cs.Limit, cs.Kind = 0, ""
	}
	return cs, nil
}

// serveClaims reaps n's expired claims and waiters and grants the head of
// its queue while it fits, in order, at most 64 at a time; it returns the
// messages that tell the waiters granted. The caller holds m.mu.
func (m *memoryProvider) serveClaims(n *memName, now time.Time) []memMessage {
	n.reap(now)
	var msgs []memMessage
	for len(n.queue) > 0 && len(msgs) < maxServed {
		w := n.queue[0].c
		if n.used+w.Weight > n.limit {
			break
		}
		n.queue = n.queue[1:]
		in := m.inboxes[w.Inbox]
		if in == nil {
			continue // nobody listens: skip it
		}
		token := m.nextToken()
		n.grant(token, w.Owner, w.Weight, w.TTL, now)
		msgs = append(msgs, memMessage{in, Notice{Key: n.key, Owner: w.Owner, Token: token, TTL: w.TTL, Weight: w.Weight}})
	}
	return msgs
}

// maxServed is the most waiters one call grants.
const maxServed = 64

// settle deletes n when it holds nothing, or moves it in the heap of names
// to its soonest deadline. The caller holds m.mu.
func (m *memoryProvider) settle(n *memName) {
	if len(n.claims) == 0 && len(n.queue) == 0 {
		heap.Remove(&m.counted, n.index)
		delete(m.names, n.key)
		return
	}
	n.due = time.Time{}
	for _, cl := range n.claims {
		if n.due.IsZero() || cl.deadline.Before(n.due) {
			n.due = cl.deadline
		}
	}
	for _, w := range n.queue {
		if n.due.IsZero() || w.deadline.Before(n.due) {
			n.due = w.deadline
		}
	}
	heap.Fix(&m.counted, n.index)
}

// expireNames drops what expired of the names whose soonest deadline has
// passed; their queues are served by the next call on them. The caller
// holds m.mu.
func (m *memoryProvider) expireNames(now time.Time) {
	for len(m.counted) > 0 && !now.Before(m.counted[0].due) {
		n := m.counted[0]
		n.reap(now)
		m.settle(n)
	}
}

func (m *memoryProvider) nextToken() uint64 {
	m.token++
	return m.token
}

// reap drops n's expired claims and waiters.
func (n *memName) reap(now time.Time) {
	n.claims = slices.DeleteFunc(n.claims, func(cl memClaim) bool {
		if now.Before(cl.deadline) {
			return false
		}
		n.used -= cl.weight
		return true
	})
	n.queue = slices.DeleteFunc(n.queue, func(w memWaiter) bool { return !now.Before(w.deadline) })
}

func (n *memName) grant(token uint64, owner string, weight int, ttl time.Duration, now time.Time) {
	n.claims = append(n.claims, memClaim{owner: owner, weight: weight, token: token, since: now.Truncate(time.Millisecond), deadline: now.Add(ttl)})
	n.used += weight
}

// drop deletes the claim at i.
func (n *memName) drop(i int) {
	n.used -= n.claims[i].weight
	n.claims = slices.Delete(n.claims, i, i+1)
}

// holder returns the index of owner's claim, or -1.
func (n *memName) holder(owner string) int {
	return slices.IndexFunc(n.claims, func(cl memClaim) bool { return cl.owner == owner })
}

// waiter returns owner's place in the queue, or -1.
func (n *memName) waiter(owner string) int {
	return slices.IndexFunc(n.queue, func(w memWaiter) bool { return w.c.Owner == owner })
}

// enqueue puts c at the back of the queue, or keeps its place; either way
// it stays queued for its QueueTTL from now. (A waiter whose entry ran out
// was reaped before: it joins at the back.)
func (n *memName) enqueue(c Claim, now time.Time) {
	deadline := now.Add(cmp.Or(c.QueueTTL, DefaultQueueTTL))
	c.Look, c.QueueTTL = 0, 0
	if i := n.waiter(c.Owner); i >= 0 {
		n.queue[i].deadline = deadline
		return
	}
	n.queue = append(n.queue, memWaiter{c: c, deadline: deadline})
}

func (n *memName) dequeue(owner string) {
	if i := n.waiter(owner); i >= 0 {
		n.queue = slices.Delete(n.queue, i, i+1)
	}
}

// record returns n as the claim methods show it to a caller that holds no
// claim: the claim that expires first, the kind, the limit and the weight
// held; TTL is that claim's time left.
func (n *memName) record(now time.Time) Record {
	rec := Record{Limit: n.limit, Used: n.used, Kind: n.kind}
	for _, cl := range n.claims {
		if rec.Owner == "" || cl.deadline.Sub(now) < rec.TTL {
			rec.Owner, rec.Token, rec.TTL = cl.owner, cl.token, cl.deadline.Sub(now)
		}
	}
	return rec
}

// listed returns n as List shows it: its kind and limit, the weight held,
// the length of its queue, and the longest a claim has left.
func (n *memName) listed(now time.Time) Record {
	rec := Record{Limit: n.limit, Used: n.used, Waiters: len(n.queue), Kind: n.kind}
	for _, cl := range n.claims {
		rec.TTL = max(rec.TTL, cl.deadline.Sub(now))
	}
	return rec
}
