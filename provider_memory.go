package lock

import (
	"container/heap"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed05627090/lock/check"
)

// memoryProvider is the Provider of NewMemoryProvider.
type memoryProvider struct {
	clock Clock

	mu      sync.Mutex
	records map[string]*memRecord
	expiry  timeHeap[*memRecord] // by deadline, soonest first
	token   uint64
	queues  map[string][]Wait // wait queues, in arrival order
	inboxes map[string]*memInbox
	watches map[string][]*memInbox // by key
	spare   []*memRecord           // deleted records, for grant to use again
	names   map[string]*memName    // counted names (provider_memory_claims.go)
	counted timeHeap[*memName]     // by their soonest deadline

	// The most entries records and queues have held since they were made.
	recordsPeak, queuesPeak int
}

// memInbox is one Listen, or one Watch. Its lock is held for reading while deliver runs, so
// that stop, which takes it for writing, returns only when deliver is done.
type memInbox struct {
	mu      sync.RWMutex
	stopped bool
	deliver func(Notice)
}

// newMemInbox returns the inbox of a Listen or Watch of deliver, or the
// error of its name's check (nameErr), of a nil deliver, or of ctx.
func newMemInbox(ctx context.Context, nameErr error, deliver func(Notice)) (*memInbox, error) {
	if deliver == nil && nameErr == nil {
		nameErr = invalidf("nil deliver function")
	}
	if err := ready(ctx, nameErr); err != nil {
		return nil, err
	}
	return &memInbox{deliver: deliver}, nil
}

// ready returns args, the error of a method's argument checks, or else
// ctx's error: a call that returns one changes nothing.
func ready(ctx context.Context, args error) error {
	if args != nil {
		return args
	}
	return ctx.Err()
}

// stop ends the inbox's deliveries, once the one running, if any, returns.
func (in *memInbox) stop() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
}

// memMessage is a Notice for an inbox, sent once the provider's lock is let go.
type memMessage struct {
	to *memInbox
	g  Notice
}

// send delivers msgs, outside the provider's lock.
func send(msgs []memMessage) {
	for _, m := range msgs {
		m.to.mu.RLock()
		if !m.to.stopped {
			m.to.deliver(m.g)
		}
		m.to.mu.RUnlock()
	}
}

type memRecord struct {
	key      string
	owner    string
	token    uint64
	ended    bool
	since    time.Time // granted, truncated to the millisecond
	deadline time.Time
	index    int // in the expiry heap
}

// MemoryOption configures the provider of [NewMemoryProvider].
type MemoryOption func(*memoryProvider)

// MemoryClock makes the provider read time from c, so that tests can expire
// records by moving a fake clock. The default is the system clock.
func MemoryClock(c Clock) MemoryOption {
	return func(m *memoryProvider) {
		if c != nil {
			m.clock = c
		}
	}
}

// NewMemoryProvider returns an empty Provider that keeps records in this
// process. It is the default for a single process and the test double for
// users' own tests: it behaves as the Redis provider does, without a
// server.
//
// Expiry uses one heap of deadlines, checked on every call: no goroutine or
// timer per key, and no TTL limit; each call costs O(log n) amortized in
// the n live records. Memory is given back as records expire or are
// released. Fencing tokens come from one counter, so they strictly
// increase across all keys. It is safe for concurrent use.
func NewMemoryProvider(opts ...MemoryOption) Provider {
	m := &memoryProvider{
		clock:   systemClock{},
		records: make(map[string]*memRecord),
		queues:  make(map[string][]Wait),
		inboxes: make(map[string]*memInbox),
		watches: make(map[string][]*memInbox),
		names:   make(map[string]*memName),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Acquire implements Provider.
func (m *memoryProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error) {
	if err := ready(ctx, check.Args(key, owner, ttl)); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.expire()
	if r, ok := m.records[key]; ok {
		return m.held(r, owner, ttl, now), nil
	}
	if n := m.names[key]; n != nil {
		return Record{Kind: n.kind}, nil // in use as a counted name
	}
	return m.grant(key, owner, ttl, now), nil
}

// Queue implements Provider.
func (m *memoryProvider) Queue(ctx context.Context, key string, w Wait) (Record, error) {
	if err := ready(ctx, w.Check(key)); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	now := m.expire()
	if n := m.names[key]; n != nil {
		m.mu.Unlock()
		return Record{Kind: n.kind}, nil // in use as a counted name
	}
	var msgs []memMessage
	r, ok := m.records[key]
	if !ok && w.Look != LookFirst {
		// The first waiter goes first; it may be the caller.
		msgs = m.serve(key, now)
		r, ok = m.records[key]
	}
	if !ok {
		m.dequeue(key, w.Owner)
		rec := m.grant(key, w.Owner, w.TTL, now)
		m.mu.Unlock()
		send(msgs)
		return rec, nil
	}
	rec := m.held(r, w.Owner, w.TTL, now)
	if rec.GracePeriod || rec.Owner == w.Owner {
		m.dequeue(key, w.Owner) // granted, or closed for a window: not waiting
	} else {
		rec.Queued, rec.Position = true, m.enqueue(key, w)
	}
	m.mu.Unlock()
	send(msgs)
	return rec, nil
}

// Leave implements Provider.
func (m *memoryProvider) Leave(ctx context.Context, key string, w Wait) error {
	if err := ready(ctx, w.Check(key)); err != nil {
		return err
	}
	m.mu.Lock()
	m.dequeue(key, w.Owner)
	var msgs []memMessage
	if r, now, err := m.owned(key, w.Owner, false); err == nil {
		msgs = m.free(r, now)
	}
	m.mu.Unlock()
	send(msgs)
	return nil
}

// Listen implements Provider: deliver is called outside the provider's lock.
// stop waits for a running deliver, so deliver must not call it.
func (m *memoryProvider) Listen(ctx context.Context, inbox string, deliver func(Notice)) (func(), error) {
	in, err := newMemInbox(ctx, check.Inbox(inbox), deliver)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.inboxes[inbox]; dup {
		return nil, invalidf("inbox %q is listened to already", inbox)
	}
	m.inboxes[inbox] = in
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			delete(m.inboxes, inbox)
			m.mu.Unlock()
			in.stop()
		})
	}, nil
}

// Watch implements Provider: deliver is called by Notify, outside the
// provider's lock. stop waits for a running deliver, so deliver must not
// call it.
func (m *memoryProvider) Watch(ctx context.Context, key string, deliver func(Notice)) (func(), error) {
	w, err := newMemInbox(ctx, check.Key(key), deliver)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.watches[key] = append(m.watches[key], w)
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			ws := slices.DeleteFunc(m.watches[key], func(x *memInbox) bool { return x == w })
			if len(ws) == 0 {
				delete(m.watches, key)
			} else {
				m.watches[key] = ws
			}
			m.mu.Unlock()
			w.stop()
		})
	}, nil
}

// Notify implements Provider.
func (m *memoryProvider) Notify(ctx context.Context, key string, n Notice) error {
	if err := ready(ctx, check.Key(key)); err != nil {
		return err
	}
	n.Key = key
	m.mu.Lock()
	msgs := make([]memMessage, 0, len(m.watches[key]))
	for _, w := range m.watches[key] {
		msgs = append(msgs, memMessage{w, n})
	}
	m.mu.Unlock()
	send(msgs)
	return nil
}

// Release implements Provider.
func (m *memoryProvider) Release(ctx context.Context, key, owner string) error {
	if err := ready(ctx, check.KeyOwner(key, owner)); err != nil {
		return err
	}
	m.mu.Lock()
	r, now, err := m.owned(key, owner, true)
	var msgs []memMessage
	if err == nil {
		msgs = m.free(r, now)
	}
	m.mu.Unlock()
	send(msgs)
	return err
}

// Renew implements Provider.
func (m *memoryProvider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	return m.update(ctx, key, owner, ttl, func(*memRecord) []memMessage { return nil })
}

// Finish implements Provider.
func (m *memoryProvider) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	return m.update(ctx, key, owner, ttl, func(r *memRecord) []memMessage {
		r.ended = true
		// A grace period: no waiter will get the lock; tell each inbox once.
		var msgs []memMessage
		seen := map[string]bool{}
		for _, w := range m.queues[r.key] {
			if in := m.inboxes[w.Inbox]; in != nil && !seen[w.Inbox] {
				seen[w.Inbox] = true
				msgs = append(msgs, memMessage{in, Notice{Key: r.key}})
			}
		}
		delete(m.queues, r.key)
		return msgs
	})
}

// update sets the deadline of owner's live record under key to ttl from now
// and applies change to it, under m.mu; it sends the messages change returns.
func (m *memoryProvider) update(ctx context.Context, key, owner string, ttl time.Duration, change func(*memRecord) []memMessage) error {
	if err := ready(ctx, check.Args(key, owner, ttl)); err != nil {
		return err
	}
	m.mu.Lock()
	r, now, err := m.owned(key, owner, false)
	var msgs []memMessage
	if err == nil {
		m.setDeadline(r, now.Add(ttl))
		msgs = change(r)
	}
	m.mu.Unlock()
	send(msgs)
	return err
}

// Inspect implements Provider.
func (m *memoryProvider) Inspect(ctx context.Context, key string) (Record, error) {
	if err := ready(ctx, check.Key(key)); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.expire()
	r, ok := m.records[key]
	if !ok {
		return Record{}, nil
	}
	return m.inspect(r, now), nil
}

// List implements Provider, in the order of the keys. fn runs outside the
// provider's lock, on the records as they were when List began.
func (m *memoryProvider) List(ctx context.Context, prefix string, fn func(key string, r Record, err error) bool) error {
	if fn == nil {
		return invalidf("nil list function")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	type entry struct {
		key string
		rec Record
	}
	var found []entry
	m.mu.Lock()
	now := m.expire()
	for key, r := range m.records {
		if strings.HasPrefix(key, prefix) {
			found = append(found, entry{key, m.inspect(r, now)})
		}
	}
	for key, n := range m.names {
		if strings.HasPrefix(key, prefix) {
			found = append(found, entry{key, n.listed(now)})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(found, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	for _, e := range found {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fn(e.key, e.rec, nil) {
			return nil
		}
	}
	return nil
}

// ForceRelease implements Provider.
func (m *memoryProvider) ForceRelease(ctx context.Context, key string) (Record, error) {
	if err := ready(ctx, check.Key(key)); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	now := m.expire()
	r, ok := m.records[key]
	if !ok {
		m.mu.Unlock()
		return Record{}, nil
	}
	rec := r.record(now)
	msgs := m.free(r, now)
	m.mu.Unlock()
	send(msgs)
	return rec, nil
}

// held returns r as seen by an acquirer, owner: renewed to ttl when it is
// owner's own live record. The caller holds m.mu.
func (m *memoryProvider) held(r *memRecord, owner string, ttl time.Duration, now time.Time) Record {
	if r.owner == owner && !r.ended {
		m.setDeadline(r, now.Add(ttl))
	}
	return r.record(now)
}

// inspect returns r as Inspect and List show it: with the number of its
// key's waiters. The caller holds m.mu.
func (m *memoryProvider) inspect(r *memRecord, now time.Time) Record {
	rec := r.record(now)
	rec.Waiters = len(m.queues[r.key])
	return rec
}

// record returns r as a Record, its TTL counted from now.
func (r *memRecord) record(now time.Time) Record {
	return Record{Owner: r.owner, Token: r.token, GracePeriod: r.ended, TTL: r.deadline.Sub(now), Since: r.since}
}

// grant stores a new record for owner under the free key. The caller holds m.mu.
func (m *memoryProvider) grant(key, owner string, ttl time.Duration, now time.Time) Record {
	m.token++
	var r *memRecord
	if n := len(m.spare); n > 0 {
		r, m.spare = m.spare[n-1], m.spare[:n-1]
	} else {
		r = new(memRecord)
	}
	*r = memRecord{key: key, owner: owner, token: m.token, since: now.Truncate(time.Millisecond), deadline: now.Add(ttl)}
	m.records[key] = r
	heap.Push(&m.expiry, r)
	return Record{Owner: owner, Token: r.token, TTL: ttl, Since: r.since}
}

// free deletes r, and hands the key to its first waiter, at now. The caller
// holds m.mu.
func (m *memoryProvider) free(r *memRecord, now time.Time) []memMessage {
	key := r.key
	m.remove(r)
	return m.serve(key, now)
}

// serve grants the free key to the first waiter of its queue whose inbox is
// listened to, and returns the message that tells it. The caller holds m.mu.
func (m *memoryProvider) serve(key string, now time.Time) []memMessage {
	for len(m.queues[key]) > 0 {
		w := m.queues[key][0]
		m.dequeue(key, w.Owner)
		in := m.inboxes[w.Inbox]
		if in == nil {
			continue // nobody listens: skip it
		}
		rec := m.grant(key, w.Owner, w.TTL, now)
		return []memMessage{{in, Notice{Key: key, Owner: rec.Owner, Token: rec.Token, TTL: rec.TTL}}}
	}
	return nil
}

// stored returns the number of live records and counted names, so that
// tests can check that nothing was left behind (MemoryLen, in
// export_test.go).
func (m *memoryProvider) stored() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	return len(m.records) + len(m.names)
}

// owned returns key's record if owner holds it (an ended record counts as
// held only when endedOK), and the time at which it expired records. The
// caller holds m.mu.
func (m *memoryProvider) owned(key, owner string, endedOK bool) (*memRecord, time.Time, error) {
	now := m.expire()
	r, ok := m.records[key]
	if !ok || r.owner != owner || (r.ended && !endedOK) {
		token := uint64(0)
		if ok && r.owner == owner {
			token = r.token
		}
		return nil, now, &LostError{Key: key, Token: token}
	}
	return r, now, nil
}

// enqueue puts w at the back of key's queue, or keeps its place, and
// returns its place. The caller holds m.mu.
func (m *memoryProvider) enqueue(key string, w Wait) int {
	q := m.queues[key]
	for i := range q {
		if q[i].Owner == w.Owner {
			return i
		}
	}
	m.queues[key] = append(q, w)
	return len(q)
}

// dequeue takes owner out of key's queue. The caller holds m.mu.
func (m *memoryProvider) dequeue(key, owner string) {
	q := m.queues[key]
	for i := range q {
		if q[i].Owner == owner {
			q = slices.Delete(q, i, i+1)
			break
		}
	}
	if len(q) == 0 {
		delete(m.queues, key)
	} else {
		m.queues[key] = q
	}
}

// expire deletes every record whose deadline has passed, gives memory back
// (see compact), and returns the time it used. Every call but Listen starts
// with it. The caller holds m.mu.
func (m *memoryProvider) expire() time.Time {
	now := m.clock.Now()
	for len(m.expiry) > 0 && !now.Before(m.expiry[0].deadline) {
		r := heap.Pop(&m.expiry).(*memRecord)
		delete(m.records, r.key)
		m.keepSpare(r)
	}
	m.expireNames(now)
	m.compact()
	return now
}

// compactFloor is the size under which the maps and the expiry heap are kept
// as they are.
const compactFloor = 1024

// compact gives memory back: Go maps never shrink, so a map that holds fewer
// than a quarter of the most entries it held is copied into a new one, and the
// expiry heap moves to a smaller array once it fills less than a quarter of
// its own. A copy of k entries follows at least 3k deletions since the last
// copy, so it costs O(1) amortized per deletion. The caller holds m.mu.
func (m *memoryProvider) compact() {
	m.recordsPeak = max(m.recordsPeak, len(m.records))
	if m.recordsPeak >= compactFloor && len(m.records) < m.recordsPeak/4 {
		m.records, m.recordsPeak = copyMap(m.records), len(m.records)
	}
	m.queuesPeak = max(m.queuesPeak, len(m.queues))
	if m.queuesPeak >= compactFloor && len(m.queues) < m.queuesPeak/4 {
		m.queues, m.queuesPeak = copyMap(m.queues), len(m.queues)
	}
	if cap(m.expiry) >= compactFloor && len(m.expiry) < cap(m.expiry)/4 {
		m.expiry = append(make(timeHeap[*memRecord], 0, len(m.expiry)), m.expiry...)
	}
}

func copyMap[V any](src map[string]V) map[string]V {
	dst := make(map[string]V, len(src))
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// remove deletes record r. The caller holds m.mu.
func (m *memoryProvider) remove(r *memRecord) {
	delete(m.records, r.key)
	heap.Remove(&m.expiry, r.index)
	m.keepSpare(r)
}

// maxSpare is how many deleted records the provider keeps for new grants.
const maxSpare = 64

// keepSpare keeps r, deleted, for a later grant, unless enough are kept. The
// caller holds m.mu and uses r no more.
func (m *memoryProvider) keepSpare(r *memRecord) {
	if len(m.spare) < maxSpare {
		*r = memRecord{}
		m.spare = append(m.spare, r)
	}
}

func (m *memoryProvider) setDeadline(r *memRecord, d time.Time) {
	r.deadline = d
	heap.Fix(&m.expiry, r.index)
}

func (r *memRecord) when() time.Time { return r.deadline }
func (r *memRecord) place() *int     { return &r.index }
