package lock

// Semaphores and read-write locks are counted names (see
// Provider.AcquireClaim): a name with a limit, holding claims whose weights
// add up to at most the limit, and a queue served in arrival order. A
// hold is one claim: one call to take it, one to renew it, one to release
// it, whatever the limit; it is a Lock of its own (its lease, renewal,
// loss and fencing token are the lock's), with the claim's weight.

import "context"

// Semaphore lets holds whose weights add up to at most its limit hold a
// name at once: a limit across processes (N workers on a rate-limited API,
// N migrations at a time). A hold takes its weight, all together, as one
// claim in the backend, with its own lease and fencing token: a holder
// that dies frees its weight within its lease, and a holder that stalls
// holds up its own weight only. Waiters are served in arrival order (FIFO): a
// heavy request at the head of the queue is not overtaken by lighter ones
// behind it, and a release grants, in the same call to the backend, as
// many of the waiters at the head as now fit.
//
// The limit is a property of the name: every caller must give the same
// one. A caller that gives another while the name is held or waited for fails
// with [ErrInvalidArgument]. So is its kind (see [Kind]): while a
// Semaphore holds or waits for a name, a lock, an election's role or an
// [RWMutex] of that name fails at once with ErrInvalidArgument, naming
// both kinds, and so does the Semaphore while one of those holds it (a
// lock in its grace period too).
type Semaphore struct {
	c     *Client
	name  string
	key   string
	limit int
	tag   string // the end of every holder's owner: ~n<limit>
}

// Semaphore returns the semaphore called name, with its limit (1 to
// [MaxLimit]). It stores nothing: holds are taken by Acquire and Do.
func (c *Client) Semaphore(name string, limit int) (*Semaphore, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, invalidf("semaphore %q: limit %d, not between 1 and %d", name, limit, MaxLimit)
	}
	key, err := c.checkName(name)
	if err != nil {
		return nil, err
	}
	return &Semaphore{c: c, name: name, key: key, limit: limit, tag: ownerTag(tagPermit, limit)}, nil
}

// Acquire takes a hold of weight (1 to the limit), all together: the
// caller holds it all or none. Without o.Wait it fails at once, with a
// *NotAcquiredError ([ErrHeld]), when they do not fit now or others wait
// for the semaphore; with o.Wait it waits in arrival order, up to
// o.MaxWait. o.Lease and o.MaxDuration apply to the hold; o.GracePeriod
// and o.OncePer are refused. The Hold's Token is its fencing token,
// strictly greater than every earlier hold's of the name.
func (s *Semaphore) Acquire(ctx context.Context, weight int, o Options) (*Hold, error) {
	if weight < 1 || weight > s.limit {
		return nil, invalidf("semaphore %q: weight %d, not between 1 and its limit %d", s.name, weight, s.limit)
	}
	return s.c.acquireHold(ctx, s.key, s.tag, claim{weight: weight, limit: s.limit, kind: KindSemaphore}, o)
}

// Do takes a hold of weight as Acquire does, runs fn while holding it, and
// releases it. fn's context is cancelled, with the *LostError as cause,
// if the hold is lost.
func (s *Semaphore) Do(ctx context.Context, weight int, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	h, err := s.Acquire(ctx, weight, o)
	if err != nil {
		return err
	}
	return h.run(ctx, fn)
}

// Inspect returns the semaphore as the backend holds it: its holders,
// each with its weight, and its queue (see Status).
func (s *Semaphore) Inspect(ctx context.Context) (Status, error) {
	return s.c.inspectCounted(ctx, s.name, s.key)
}

// acquireHold takes cl of the counted name under key, for an owner that
// ends with tag, as o says (no grace period or minimum hold), and returns
// it as a Hold of one member.
func (c *Client) acquireHold(ctx context.Context, key, tag string, cl claim, o Options) (*Hold, error) {
	if o.GracePeriod != 0 || o.OncePer != 0 {
		return nil, invalidf("GracePeriod and OncePer apply to a lock, not to a semaphore's or a read-write lock's holds")
	}
	l, err := c.acquire(ctx, key, c.newOwner(tag), cl, o)
	if err != nil {
		return nil, err
	}
	return newHold(c, l.Token(), []*Lock{l}), nil
}
