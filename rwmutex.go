package lock

import (
	"context"
	"errors"
	"slices"
)

// RWMutex is a read-write lock across processes: many readers at once, or
// one writer and no reader. It is built as a Semaphore is (see there): a
// gate, the lock name#gate, taken in its fair queue by every reader and
// writer that enters, and a slot per reader, the locks name#r0 …
// name#r(R-1), each with its own lease, so that a dead reader's share frees
// within its lease while the others renew theirs. A reader passes the gate,
// takes a free slot and leaves the gate; a writer passes the gate, waits
// for every slot to be free, and holds the gate while it writes.
//
// Queueing is in arrival order, readers and writers alike: a writer waits
// for the readers that entered before it, no more (no writer starves under
// a stream of readers); the readers queued behind a writer enter when it
// releases, one after the other, each as soon as the one before it has
// taken its slot (a round trip or two each), and the next writer in the
// queue waits for them. Every hold has a fencing token (Hold.Token): the
// gate's, strictly increasing over readers and writers in the order they
// entered.
//
// There is no upgrade from a read hold to a write hold, and no hold within
// a hold: RLock or Lock asked for from the context of an RDo or Do of the
// same lock fails at once with ErrInvalidArgument (it would wait for
// itself, as a second read hold would once a writer queues between them).
// Downgrade turns a write hold into a read hold.
type RWMutex struct {
	c       *Client
	name    string
	gate    string // key
	readers *slots
	writer  string // the tag of a writer's gate owner
}

// RWMutex returns the read-write lock called name, for at most maxReaders
// readers at once (1 to MaxPermits; a reader beyond them waits). Like a
// Semaphore's N, maxReaders is a property of the name: a writer waits only
// for the slots its own maxReaders counts, so every caller must give the
// same one. A write lock reads
// every reader's slot: keep maxReaders to the readers you expect. It
// stores nothing until a hold is taken.
func (c *Client) RWMutex(name string, maxReaders int) (*RWMutex, error) {
	if maxReaders < 1 || maxReaders > MaxPermits {
		return nil, invalidf("read-write lock %q: %d readers, not between 1 and %d", name, maxReaders, MaxPermits)
	}
	gate, sl, err := c.gated(name, "r", tagReader, maxReaders)
	if err != nil {
		return nil, err
	}
	return &RWMutex{c: c, name: name, gate: gate, readers: sl, writer: ownerTag(tagWriter, maxReaders)}, nil
}

// RLock takes a read hold. Without o.Wait it fails at once, with a
// *NotAcquiredError (ErrHeld), when a writer holds the lock, every
// reader's slot is taken, or another caller is at the gate; with o.Wait
// it waits its turn, up to o.MaxWait. o.Lease and o.MaxDuration apply to
// the reader's slot; o.GracePeriod and o.OncePer are refused.
func (m *RWMutex) RLock(ctx context.Context, o Options) (*Hold, error) {
	o, err := o.holdOptions()
	if err != nil {
		return nil, err
	}
	if err := m.notInChain(ctx, "read"); err != nil {
		return nil, err
	}
	return m.c.throughGate(ctx, m.gate, m.readers.tag, min(o.Lease, GateLease), o, func(ctx context.Context, g *Lock) (*Hold, error) {
		locks, err := m.readers.take(ctx, m.c, 1, o)
		if err != nil {
			return nil, err
		}
		return newHold(ctx, m.c, g.Token(), locks)
	})
}

// Lock takes the write hold: no reader and no other writer until it is
// released. Without o.Wait it fails at once, with a *NotAcquiredError
// (ErrHeld), when anyone holds the lock or is at the gate; with o.Wait it
// waits its turn and then for the readers before it to leave, up to
// o.MaxWait in all. o.Lease and o.MaxDuration apply to the hold;
// o.GracePeriod and o.OncePer are refused.
func (m *RWMutex) Lock(ctx context.Context, o Options) (*Hold, error) {
	o, err := o.holdOptions()
	if err != nil {
		return nil, err
	}
	if err := m.notInChain(ctx, "write"); err != nil {
		return nil, err
	}
	return m.c.throughGate(ctx, m.gate, m.writer, o.Lease, o, func(ctx context.Context, g *Lock) (*Hold, error) {
		if err := m.drain(ctx, o); err != nil {
			return nil, err
		}
		h, err := newHold(ctx, m.c, g.Token(), []*Lock{g})
		if err != nil {
			return nil, err
		}
		h.rw, h.write = m, true
		return h, nil
	})
}

// notInChain fails when ctx's call chain (RDo, Do) holds m already: a
// write hold asked for from a read hold would wait for itself (there is no
// upgrade), and so would any hold asked for from a write hold, or a read
// hold asked for from a read hold once a writer queues between them.
func (m *RWMutex) notInChain(ctx context.Context, want string) error {
	for l, _ := FromContext(ctx); l != nil; l = l.outer {
		if l.c != m.c || (l.key != m.gate && !slices.Contains(m.readers.keys, l.key)) {
			continue
		}
		if want == "write" && l.key != m.gate {
			return invalidf("read-write lock %q: a read hold cannot be upgraded to a write hold (this call chain reads)", m.name)
		}
		return invalidf("read-write lock %q: this call chain holds it already: a %s hold would wait for itself", m.name, want)
	}
	return nil
}

// drain returns once no reader holds a slot: at once without o.Wait
// (failing when one does), otherwise when each held slot was released or
// expired. The writer holds the gate: no reader can enter meanwhile.
func (m *RWMutex) drain(ctx context.Context, o Options) error {
	recs, err := m.readers.inspect(ctx, m.c, m.readers.all())
	if err != nil {
		return err
	}
	var busy []int
	for i, r := range recs {
		if r.Owner == "" {
			continue
		}
		if err := m.readers.check(r.Owner); err != nil {
			return err
		}
		if !o.Wait {
			return &NotAcquiredError{Key: m.readers.keys[i], Reason: ErrHeld, RetryAfter: r.TTL, Holder: r.Owner}
		}
		busy = append(busy, i)
	}
	if len(busy) == 0 {
		return nil
	}
	got, err := m.readers.await(ctx, m.c, busy, len(busy), Options{Lease: o.Lease, MaxDuration: o.MaxDuration})
	if err != nil {
		return err
	}
	return releaseLocks(ctx, got, nil)
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

// Inspect returns the readers holding the lock and who is at the gate: the
// writer, holding or waiting for the readers to leave, when Writing is set.
func (m *RWMutex) Inspect(ctx context.Context) (GateStatus, error) {
	return m.c.inspectGated(ctx, m.name, m.gate, m.readers)
}

// Downgrade turns a write hold into a read hold, atomically: it takes a
// reader's slot while it still holds the gate, then leaves the gate, so
// that no writer can come between, and the readers queued behind it enter
// next. The hold keeps its token. It fails with ErrInvalidArgument for a
// hold that is not a write hold, and with the *LostError of a write hold
// that was lost; a write hold that fails to downgrade otherwise is still
// held.
func (h *Hold) Downgrade(ctx context.Context) error {
	h.mu.Lock()
	if !h.write || h.moving || h.released {
		h.mu.Unlock()
		return invalidf("Downgrade of a hold that is not a write hold (or one released, or being downgraded)")
	}
	if h.lostErr != nil {
		defer h.mu.Unlock()
		return h.lostErr
	}
	h.moving = true
	g := h.locks[0]
	h.mu.Unlock()
	locks, err := h.downgrade(ctx, g)
	h.mu.Lock()
	h.moving = false
	switch {
	case err != nil:
	case h.lostErr != nil:
		err = h.lostErr
	case h.released:
		err = &releasedError{op: "downgrade", key: g.key}
	}
	if err != nil {
		h.mu.Unlock()
		_ = releaseLocks(ctx, locks, nil)
		return err
	}
	h.locks, h.write = locks, false
	h.mu.Unlock()
	h.watch(locks[0])
	_ = g.Release(ctx) // lets the next caller in
	return nil
}

// downgrade takes a reader's slot for h, whose gate g is still held (it
// checks that before and after).
func (h *Hold) downgrade(ctx context.Context, g *Lock) ([]*Lock, error) {
	if err := g.lostAlready(); err != nil {
		if errors.Is(err, ErrReleased) {
			err = &releasedError{op: "downgrade", key: g.key}
		}
		return nil, err
	}
	locks, err := h.rw.readers.take(ctx, h.c, 1, Options{Lease: g.opts.Lease, MaxDuration: g.opts.MaxDuration})
	if err != nil {
		return nil, err
	}
	if err := g.lostAlready(); err != nil {
		_ = releaseLocks(ctx, locks, nil)
		return nil, err
	}
	return locks, nil
}
