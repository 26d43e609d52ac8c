package lock

// Semaphores and read-write locks are built from ordinary locks: a gate, a
// lock taken in its fair queue by every caller that enters (so callers are
// served in arrival order, and nobody overtakes a caller that waits at the
// gate for permits to come back), and N slots, one lock each (a permit, or a
// reader's share). A holder holds slots, each with its own lease; a caller
// at the gate takes free slots, waits for held ones to be released or to
// expire, and leaves the gate. Nothing is added to the Provider: every
// backend runs them as it is.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxPermits is the largest number of permits of a Semaphore, and of
// readers of an RWMutex.
const MaxPermits = 1024

// Semaphore lets at most N holders hold a name at once: a limit across
// processes (N workers on a rate-limited API, N migrations at a time). Each
// permit is a lock of its own, named name#0 … name#(N-1), with its own lease
// and fencing token: a holder that dies frees its permits within a lease,
// and Inspect, List, ForceRelease, lockctl and events show each permit as
// a lock. Callers pass through a gate, the lock name#gate, in its fair
// queue: acquisitions are served in arrival order (FIFO), and a large
// request at the head is not overtaken by smaller ones behind it. A caller
// that dies at the head stalls the queue for up to GateLease.
//
// N is a property of the name: every caller must give the same N. A caller
// that finds a permit held by a caller with another N fails with
// ErrInvalidArgument (it sees the permits it looks at, so a mismatch is
// found as soon as both hold permits at once, not before).
type Semaphore struct {
	c     *Client
	name  string
	gate  string // key
	slots *slots
}

// Semaphore returns the semaphore called name, with n permits (1 to
// MaxPermits). It stores nothing: permits are taken by Acquire and Do.
func (c *Client) Semaphore(name string, n int) (*Semaphore, error) {
	if n < 1 || n > MaxPermits {
		return nil, invalidf("semaphore %q: %d permits, not between 1 and %d", name, n, MaxPermits)
	}
	gate, sl, err := c.gated(name, "", tagPermit, n)
	if err != nil {
		return nil, err
	}
	return &Semaphore{c: c, name: name, gate: gate, slots: sl}, nil
}

// Acquire takes weight permits (1 to N), all together: the caller holds
// them all or none. Without o.Wait it fails at once, with a
// *NotAcquiredError (ErrHeld), when the permits are not free or another
// caller is at the gate before it; with o.Wait it waits in arrival order,
// up to o.MaxWait, holding the gate once it reached the head of the queue
// and taking permits as they come back (its permits are its own from then
// on, counted against N). o.Lease and o.MaxDuration apply to each permit;
// o.GracePeriod and o.OncePer are refused. The Hold's Token orders grants;
// each permit (Hold.Locks) has its own token for a fence per permit.
func (s *Semaphore) Acquire(ctx context.Context, weight int, o Options) (*Hold, error) {
	if weight < 1 || weight > s.slots.n {
		return nil, invalidf("semaphore %q: weight %d, not between 1 and its %d permits", s.name, weight, s.slots.n)
	}
	o, err := o.holdOptions()
	if err != nil {
		return nil, err
	}
	return s.c.throughGate(ctx, s.gate, s.slots.tag, min(o.Lease, GateLease), o, func(ctx context.Context, g *Lock) (*Hold, error) {
		locks, err := s.slots.take(ctx, s.c, weight, o)
		if err != nil {
			return nil, err
		}
		return newHold(ctx, s.c, g.Token(), locks)
	})
}

// Do takes weight permits as Acquire does, runs fn while holding them, and
// releases them. fn's context is cancelled, with the *LostError as cause,
// if a permit is lost.
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

// Inspect returns the permits held and who is at the gate (see GateStatus).
func (s *Semaphore) Inspect(ctx context.Context) (GateStatus, error) {
	return s.c.inspectGated(ctx, s.name, s.gate, s.slots)
}

// GateStatus is a Semaphore or an RWMutex as Inspect found it.
type GateStatus struct {
	// Name is the semaphore's or the read-write lock's name.
	Name string
	// Gate is the caller at the gate: one taking permits (or waiting for
	// them), a reader entering, or an RWMutex's writer, which holds the gate
	// for as long as it writes. Its Waiters are the callers queued behind it.
	// Owner is empty when nobody is at the gate.
	Gate Status
	// Writing is true when the gate's holder is an RWMutex's writer: holding
	// the lock, or waiting for the readers in Held to leave.
	Writing bool
	// Held are the permits (or readers' shares) held, one Status each, in
	// the order of their slots.
	Held []Status
}

// holdOptions returns o resolved for a semaphore's or a read-write lock's
// hold: no grace period or minimum hold.
func (o Options) holdOptions() (Options, error) {
	if o.GracePeriod != 0 || o.OncePer != 0 {
		return o, invalidf("GracePeriod and OncePer apply to a lock, not to a semaphore's or a read-write lock's holds")
	}
	return o.resolved()
}

// gated returns the gate's key and the slots of a semaphore or read-write
// lock called name: the slots name#<prefix>0 … owned with tag ~<kind><n>.
func (c *Client) gated(name, prefix string, kind byte, n int) (string, *slots, error) {
	if name == "" {
		return "", nil, invalidf("empty lock name")
	}
	gate, err := c.checkName(name + "#gate")
	if err != nil {
		return "", nil, err
	}
	sl := &slots{name: name, n: n, kind: kind, tag: ownerTag(kind, n), names: make([]string, n), keys: make([]string, n)}
	for i := range sl.keys {
		sl.names[i] = name + "#" + prefix + strconv.Itoa(i)
		if sl.keys[i], err = c.checkName(sl.names[i]); err != nil {
			return "", nil, err
		}
	}
	return gate, sl, nil
}

// GateLease is the lease of a gate held by a caller that enters a
// Semaphore or an RWMutex as a reader (taking permits or a reader's share,
// or waiting for them), when Options.Lease is longer: a caller that dies at
// the gate stalls the callers behind it for at most this long. A writer
// holds the gate with its Lease: the gate is its hold.
const GateLease = 3 * time.Second

// throughGate takes the gate under key in its fair queue, waiting as o
// says (up to o.MaxWait in all), holding it with lease, calls enter while
// holding it, and releases it, which lets the next caller in: enter's hold
// is returned. enter may keep the gate in its hold (a writer): it is
// released then only if enter fails.
func (c *Client) throughGate(ctx context.Context, key, tag string, lease time.Duration, o Options, enter func(ctx context.Context, g *Lock) (*Hold, error)) (*Hold, error) {
	if o.Wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.MaxWait, ErrTimeout)
		defer cancel()
	}
	g, err := c.acquireAs(ctx, key, c.newOwner()+tag, Options{Wait: o.Wait, Fair: true, MaxWait: o.MaxWait, Lease: lease, MaxDuration: o.MaxDuration})
	if err != nil {
		return nil, err
	}
	h, err := enter(ctx, g)
	if err == nil {
		// The gate must still be held now that enter has its locks: then
		// nobody else was past it meanwhile (a caller paused past the
		// gate's lease would otherwise hold beside a writer, or beside the
		// next head of the queue).
		err = g.lostAlready()
		if err != nil {
			_ = h.Release(ctx)
		}
	}
	if err != nil {
		_ = g.Release(ctx)
		return nil, err
	}
	if h.kept(g) {
		return h, nil
	}
	if err := g.Release(ctx); errors.Is(err, ErrLost) {
		// The gate was removed (ForceRelease) while enter ran: another
		// caller may have passed it.
		_ = h.Release(ctx)
		return nil, err
	}
	// Any other failure of the gate's release leaves h sound: the gate
	// expires within its lease and lets the next caller in then.
	return h, nil
}

// kept reports whether l is a member of h.
func (h *Hold) kept(l *Lock) bool {
	for _, m := range h.Locks() {
		if m == l {
			return true
		}
	}
	return false
}

// slots are the locks of a semaphore's permits or of an RWMutex's readers.
type slots struct {
	name  string
	n     int
	kind  byte   // tagPermit or tagReader
	tag   string // the end of every owner of a slot or of the gate: ~<kind><n>
	names []string
	keys  []string
	next  atomic.Uint32 // where the next scan starts
}

// take takes weight free slots. It tries one (a different one each
// call); when that is not enough, it reads the others at once and takes
// free ones. Without o.Wait it fails when fewer are free; with it, it
// waits for held ones, all at once, until it has weight of them, for as
// long as ctx lives. Nothing is held when it fails.
func (sl *slots) take(ctx context.Context, c *Client, weight int, o Options) ([]*Lock, error) {
	po := Options{Lease: o.Lease, MaxDuration: o.MaxDuration}
	var (
		got  []*Lock
		busy []int
		held *NotAcquiredError // of the first busy slot
	)
	fail := func(err error) ([]*Lock, error) {
		_ = releaseLocks(ctx, got, nil)
		return nil, err
	}
	// seen notes slot i held by owner, or fails for a holder of another N.
	seen := func(i int, owner string, ttl time.Duration) error {
		if err := sl.check(owner); err != nil {
			return err
		}
		busy = append(busy, i)
		if held == nil {
			held = &NotAcquiredError{Key: sl.keys[i], Reason: ErrHeld, RetryAfter: ttl, Holder: owner}
		}
		return nil
	}
	// try takes slot i if it is free.
	try := func(i int) error {
		l, err := c.acquireAs(ctx, sl.keys[i], c.newOwner()+sl.tag, po)
		var na *NotAcquiredError
		switch {
		case err == nil:
			got = append(got, l)
			return nil
		case errors.As(err, &na) && (na.Reason == ErrHeld || na.Reason == ErrGracePeriod):
			return seen(i, na.Holder, na.RetryAfter)
		}
		return err
	}
	start := int(sl.next.Add(1)) % sl.n
	if err := try(start); err != nil {
		return fail(err)
	}
	if len(got) < weight && sl.n > 1 {
		others := make([]int, 0, sl.n-1)
		for j := 1; j < sl.n; j++ {
			others = append(others, (start+j)%sl.n)
		}
		recs, err := sl.inspect(ctx, c, others)
		if err != nil {
			return fail(err)
		}
		for k, i := range others {
			if recs[k].Owner != "" {
				if err := seen(i, recs[k].Owner, recs[k].TTL); err != nil {
					return fail(err)
				}
			} else if len(got) < weight {
				if err := try(i); err != nil {
					return fail(err)
				}
			}
		}
	}
	if len(got) == weight {
		return got, nil
	}
	if !o.Wait {
		return fail(held)
	}
	more, err := sl.await(ctx, c, busy, weight-len(got), po)
	if err != nil {
		return fail(err)
	}
	return append(got, more...), nil
}

// await waits for the slots idx, all at once (a fair wait on each), until
// need of them are granted: it returns those, and releases any granted
// beyond need. It fails, holding nothing, with the first error of a wait.
func (sl *slots) await(ctx context.Context, c *Client, idx []int, need int, o Options) ([]*Lock, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		l   *Lock
		err error
	}
	results := make(chan result, len(idx))
	o.Wait, o.Fair, o.MaxWait = true, true, NoHoldLimit
	for _, i := range idx {
		go func() {
			l, err := c.acquireAs(wctx, sl.keys[i], c.newOwner()+sl.tag, o)
			results <- result{l, err}
		}()
	}
	var (
		got []*Lock
		err error
	)
	for range idx {
		r := <-results
		switch {
		case r.l != nil && err == nil && len(got) < need:
			got = append(got, r.l)
			if len(got) == need {
				stop()
			}
		case r.l != nil:
			_ = r.l.Release(ctx) // not needed: hand it on
		case err == nil && len(got) < need:
			err = r.err
			stop()
		}
	}
	if err != nil {
		_ = releaseLocks(ctx, got, nil)
		return nil, err
	}
	return got, nil
}

// check returns an error when owner, a slot's holder, holds it under
// another kind or number of slots than sl's.
func (sl *slots) check(owner string) error {
	if owner == "" || strings.HasSuffix(owner, sl.tag) {
		return nil
	}
	what := func(kind byte, n int) string {
		if kind == tagReader {
			return fmt.Sprintf("a read-write lock of %d readers", n)
		}
		return fmt.Sprintf("a semaphore of %d permits", n)
	}
	if kind, n, ok := parseTag(owner); ok && (kind == tagPermit || kind == tagReader) {
		return invalidf("%q is in use as %s, not as %s", sl.name, what(kind, n), what(sl.kind, sl.n))
	}
	return invalidf("%q: a slot is held by %q, which is not one of its holders (a plain lock of the same name?)", sl.name, owner)
}

// The tags that end the owners of a Semaphore's and an RWMutex's locks,
// and of an election's role, ~<kind><n> (see Status.Kind): a semaphore's
// permits and the callers at its gate; an RWMutex's readers and the readers
// at its gate; its writer; a role's candidates and leader (n is 1).
const (
	tagPermit byte = 'n'
	tagReader byte = 'r'
	tagWriter byte = 'w'
	tagRole   byte = 'e'
)

// ownerTag returns the tag of kind for n slots: "~n4".
func ownerTag(kind byte, n int) string {
	return "~" + string(rune(kind)) + strconv.Itoa(n)
}

// parseTag returns the kind and number of slots of the tag that ends
// owner, and whether it ends with one. It does not allocate.
func parseTag(owner string) (kind byte, n int, ok bool) {
	i := strings.LastIndexByte(owner, '~')
	if i < 0 || len(owner) < i+3 {
		return 0, 0, false
	}
	n, ok = number(owner[i+2:])
	if !ok || n < 1 {
		return 0, 0, false
	}
	return owner[i+1], n, true
}

// inspect reads the slots idx, a few at a time, and returns their records
// in the order of idx.
func (sl *slots) inspect(ctx context.Context, c *Client, idx []int) ([]Record, error) {
	recs := make([]Record, len(idx))
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(len(idx), 16) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := int(next.Add(1) - 1); k < len(idx); k = int(next.Add(1) - 1) {
				key := sl.keys[idx[k]]
				rec, err := c.provider.Inspect(ctx, key)
				if err != nil {
					errs[k] = c.failed(ctx, "inspect", key, err)
				}
				recs[k] = rec
			}
		}()
	}
	wg.Wait()
	return recs, errors.Join(errs...)
}

// all returns the numbers of every slot.
func (sl *slots) all() []int {
	idx := make([]int, sl.n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// inspectGated returns the GateStatus of the semaphore or read-write lock
// called name.
func (c *Client) inspectGated(ctx context.Context, name, gate string, sl *slots) (GateStatus, error) {
	st := GateStatus{Name: name}
	rec, err := c.provider.Inspect(ctx, gate)
	if err != nil {
		return st, c.failed(ctx, "inspect", gate, err)
	}
	st.Gate = status(name+"#gate", gate, rec, time.Now())
	st.Writing = st.Gate.Kind == "writer"
	recs, err := sl.inspect(ctx, c, sl.all())
	if err != nil {
		return st, err
	}
	now := time.Now()
	for i, r := range recs {
		if r.Owner != "" {
			st.Held = append(st.Held, status(sl.names[i], sl.keys[i], r, now))
		}
	}
	return st, nil
}
