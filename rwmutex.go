package lock

import (
	"context"
)

// RWMutex is a read-write lock across processes: many readers at once, or
// one writer and no reader. It is a counted name (see Semaphore) whose
// limit is the most readers at once: a reader claims 1 of it, a writer all of it, each
// hold one claim with its own lease and fencing token, so that a dead
// reader's share frees within its lease while the others renew theirs.
//
// Queueing is in arrival order, readers and writers alike: a writer waits
// for the readers that entered before it, no more (no writer starves under
// a stream of readers); the readers queued behind a writer enter together
// when it releases (the release grants every one of them that fits, in
// one call to the backend), and the next writer in the queue waits for
// them. Every hold has a fencing token ([Hold.Token]), strictly increasing
// over readers and writers in the order they were granted.
//
// There is no upgrade from a read hold to a write hold, and no hold within
// a hold: RLock or Lock asked for from the context of an RDo or Do of the
// same lock fails at once with [ErrInvalidArgument] (it would wait for
// itself, as a second read hold would once a writer queues between them).
// Downgrade turns a write hold into a read hold.
type RWMutex struct {
	c     *Client
	name  string
	key   string
	limit int    // readers at once
	read  string // the end of every reader's owner: ~r<limit>
	write string // of every writer's: ~w<limit>
}

// RWMutex returns the read-write lock called name, for at most limit
// readers at once (1 to [MaxLimit]; a reader beyond them waits). Like a
// Semaphore's, the limit is a property of the name: every caller must
// give the same one. So is its kind: a name held or waited for as an
// RWMutex is not a lock's, an election role's or a Semaphore's, and the
// other way round (see [Kind]): the other fails at once with
// [ErrInvalidArgument]. It stores nothing until a hold is taken.
func (c *Client) RWMutex(name string, limit int) (*RWMutex, error) {
	if limit < 1 || limit > MaxLimit {
		return nil, invalidf("read-write lock %q: limit %d, not between 1 and %d", name, limit, MaxLimit)
	}
	key, err := c.checkName(name)
	if err != nil {
		return nil, err
	}
	return &RWMutex{c: c, name: name, key: key, limit: limit, read: ownerTag(tagReader, limit), write: ownerTag(tagWriter, limit)}, nil
}

// RLock takes a read hold. Without o.Wait it fails at once, with a
// *NotAcquiredError ([ErrHeld]), when a writer holds the lock, its limit of
// readers do, or others wait for it; with o.Wait it waits its turn, up to
// o.MaxWait. o.Lease and o.MaxDuration apply to the hold; o.GracePeriod
// and o.OncePer are refused.
func (m *RWMutex) RLock(ctx context.Context, o Options) (*Hold, error) {
	if err := m.notInChain(ctx, "read"); err != nil {
		return nil, err
	}
	return m.c.acquireHold(ctx, m.key, m.read, claim{weight: 1, limit: m.limit, kind: KindRWMutex}, o)
}

// Lock takes the write hold: no reader and no other writer until it is
// released. Without o.Wait it fails at once, with a *NotAcquiredError
// ([ErrHeld]), when anyone holds the lock or waits for it; with o.Wait it
// waits its turn, up to o.MaxWait. o.Lease and o.MaxDuration apply to the
// hold; o.GracePeriod and o.OncePer are refused.
func (m *RWMutex) Lock(ctx context.Context, o Options) (*Hold, error) {
	if err := m.notInChain(ctx, "write"); err != nil {
		return nil, err
	}
	h, err := m.c.acquireHold(ctx, m.key, m.write, claim{weight: m.limit, limit: m.limit, kind: KindRWMutex}, o)
	if err != nil {
		return nil, err
	}
	h.write = true
	return h, nil
}

// notInChain fails when ctx's call chain (RDo, Do) holds m already: a
// write hold asked for from a read hold would wait for itself (there is no
// upgrade), and so would any hold asked for from a write hold, or a read
// hold asked for from a read hold once a writer queues between them.
func (m *RWMutex) notInChain(ctx context.Context, want string) error {
	for l, _ := FromContext(ctx); l != nil; l = l.outer {
		if l.c != m.c || l.key != m.key || !l.claim.counted() {
			continue
		}
		if want == "write" && l.claim.weight < m.limit {
			return invalidf("read-write lock %q: a read hold cannot be upgraded to a write hold (this call chain reads)", m.name)
		}
		return invalidf("read-write lock %q: this call chain holds it already: a %s hold would wait for itself", m.name, want)
	}
	return nil
}

// RDo takes a read hold as RLock does, runs fn while holding it, and
// releases it. fn's context is cancelled, with the *LostError as cause, if
// the hold is lost.
func (m *RWMutex) RDo(ctx context.Context, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	h, err := m.RLock(ctx, o)
	if err != nil {
		return err
	}
	return h.run(ctx, fn)
}

// Do takes the write hold as Lock does, runs fn while holding it, and
// releases it. fn's context is cancelled, with the *LostError as cause, if
// the hold is lost.
func (m *RWMutex) Do(ctx context.Context, o Options, fn func(ctx context.Context) error) error {
	if fn == nil {
		return invalidf("nil function")
	}
	h, err := m.Lock(ctx, o)
	if err != nil {
		return err
	}
	return h.run(ctx, fn)
}

// Inspect returns the lock as the backend holds it: its readers or its
// writer, and its queue (see Status).
func (m *RWMutex) Inspect(ctx context.Context) (Status, error) {
	return m.c.inspectCounted(ctx, m.name, m.key)
}

// Downgrade turns a write hold into a read hold, atomically: the writer's
// claim is lowered to a reader's in one call to the backend, which lets
// the readers queued behind it in at once; no writer can come between.
// The hold keeps its token and its lease. It fails with [ErrInvalidArgument]
// for a hold that is not a write hold, and with the *LostError of a write
// hold that was lost; a write hold that fails to downgrade otherwise is
// still held.
func (h *Hold) Downgrade(ctx context.Context) error {
	h.mu.Lock()
	if !h.write || h.released {
		h.mu.Unlock()
		return invalidf("Downgrade of a hold that is not a write hold (or one released)")
	}
	if e := h.lostLocked(); e != nil {
		defer h.mu.Unlock()
		return e
	}
	l := h.locks[0]
	h.mu.Unlock()
	if err := l.heldErr(); err != nil {
		return err
	}
	err := h.c.provider.LowerClaim(ctx, l.key, l.owner, 1)
	if err != nil {
		if err := h.Err(); err != nil {
			return err
		}
		return h.c.failed(ctx, "downgrade", l.key, err)
	}
	h.mu.Lock()
	h.write = false
	h.mu.Unlock()
	return nil
}
