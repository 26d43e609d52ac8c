package lock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

var (
	_ Provider   = (*MemoryProvider)(nil)
	_ Topic      = (*MemoryProvider)(nil)
	_ Transferer = (*MemoryProvider)(nil)
	_ Queuer     = (*MemoryProvider)(nil)
)

// MemoryProvider is a Provider and Topic that keeps records in this process. It
// is the default for a single process and the test double for users' own tests:
// it behaves as the Redis provider does, without a server.
//
// Expiry uses one heap of deadlines, checked on every call: no goroutine or timer
// per key, and no TTL limit. Fencing tokens come from one counter, so they
// strictly increase across all keys. The zero value is not usable; call
// NewMemoryProvider. It is safe for concurrent use.
type MemoryProvider struct {
	clock Clock

	mu      sync.Mutex
	records map[string]*memRecord
	expiry  expiryHeap
	token   uint64
	queues  map[string][]memWaiter // wait queues of Queuer, in arrival order
	subs    map[int]*memSub
	nextSub int
}

// memWaiter is an owner in a wait queue, dropped after its deadline.
type memWaiter struct {
	owner    string
	deadline time.Time
}

// memSub is one subscription. Its lock is held for reading while notify runs,
// so that stop, which takes it for writing, returns only when notify is done.
type memSub struct {
	mu      sync.RWMutex
	stopped bool
	notify  func(key, next string)
}

// publish calls every subscription in subs, outside the provider's lock.
func publish(subs []*memSub, key, next string) {
	for _, s := range subs {
		s.mu.RLock()
		if !s.stopped {
			s.notify(key, next)
		}
		s.mu.RUnlock()
	}
}

type memRecord struct {
	key      string
	owner    string
	token    uint64
	ended    bool
	deadline time.Time
	index    int // in the expiry heap
}

// MemoryOption configures a MemoryProvider.
type MemoryOption func(*MemoryProvider)

// MemoryClock makes the provider read time from c, so that tests can expire
// records by moving a fake clock. The default is the system clock.
func MemoryClock(c Clock) MemoryOption {
	return func(m *MemoryProvider) {
		if c != nil {
			m.clock = c
		}
	}
}

// NewMemoryProvider returns an empty MemoryProvider.
func NewMemoryProvider(opts ...MemoryOption) *MemoryProvider {
	m := &MemoryProvider{
		clock:   systemClock{},
		records: make(map[string]*memRecord),
		queues:  make(map[string][]memWaiter),
		subs:    make(map[int]*memSub),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Acquire implements Provider.
func (m *MemoryProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error) {
	return m.acquire(ctx, key, owner, ttl, false, 0)
}

// AcquireQueued implements Queuer.
func (m *MemoryProvider) AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (Record, error) {
	if wait < 0 {
		return Record{}, invalidf("negative queue wait %v", wait)
	}
	return m.acquire(ctx, key, owner, ttl, true, wait)
}

func (m *MemoryProvider) acquire(ctx context.Context, key, owner string, ttl time.Duration, inOrder bool, wait time.Duration) (Record, error) {
	if err := checkArgs(key, owner, ttl); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.expire()
	if r, ok := m.records[key]; ok {
		switch {
		case r.owner == owner && !r.ended:
			m.setDeadline(r, now.Add(ttl))
		case inOrder && !r.ended && wait > 0:
			m.enqueue(key, owner, now.Add(wait))
		}
		return Record{Owner: r.owner, Token: r.token, Ended: r.ended, TTL: r.deadline.Sub(now)}, nil
	}
	if inOrder {
		if next := m.queueHead(key, now); next != "" && next != owner {
			if wait > 0 {
				m.enqueue(key, owner, now.Add(wait))
			}
			return Record{}, nil
		}
		m.dequeue(key, owner)
	}
	m.token++
	r := &memRecord{key: key, owner: owner, token: m.token, deadline: now.Add(ttl)}
	m.records[key] = r
	heap.Push(&m.expiry, r)
	return Record{Owner: owner, Token: r.token, TTL: ttl}, nil
}

// Dequeue implements Queuer.
func (m *MemoryProvider) Dequeue(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	m.dequeue(key, owner)
	now := m.expire()
	_, held := m.records[key]
	subs, next := m.announcement(!held, key, now)
	m.mu.Unlock()
	publish(subs, key, next)
	return nil
}

// Release implements Provider.
func (m *MemoryProvider) Release(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	r, err := m.owned(key, owner, true)
	if err == nil {
		m.remove(r)
	}
	subs, next := m.announcement(err == nil, key, m.clock.Now())
	m.mu.Unlock()
	publish(subs, key, next)
	return err
}

// Update implements Provider.
func (m *MemoryProvider) Update(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	r, err := m.owned(key, owner, false)
	if err == nil {
		r.ended = ended
		m.setDeadline(r, m.clock.Now().Add(ttl))
	}
	subs := m.subscribers(err == nil && ended)
	m.mu.Unlock()
	publish(subs, key, "") // a grace period: news for every waiter
	return err
}

// Transfer implements Transferer.
func (m *MemoryProvider) Transfer(ctx context.Context, key, from, to string, ttl time.Duration) (Record, error) {
	if err := checkOwner(from); err != nil {
		return Record{}, err
	}
	if err := checkArgs(key, to, ttl); err != nil {
		return Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	r, err := m.owned(key, from, false)
	if err != nil {
		m.mu.Unlock()
		return Record{}, err
	}
	now := m.clock.Now()
	if next := m.queueHead(key, now); next != "" && next != to {
		m.remove(r)
		subs := m.subscribers(true)
		m.mu.Unlock()
		publish(subs, key, next)
		return Record{}, nil
	}
	m.dequeue(key, to)
	m.token++
	r.owner, r.token = to, m.token
	m.setDeadline(r, now.Add(ttl))
	m.mu.Unlock()
	return Record{Owner: to, Token: r.token, TTL: ttl}, nil
}

// Subscribe implements Topic: notify is called, outside the provider's lock,
// with the key of every release and every update that ends a record. stop
// waits for a running notify, so notify must not call it.
func (m *MemoryProvider) Subscribe(ctx context.Context, notify func(key, next string)) (func(), error) {
	if notify == nil {
		return nil, invalidf("nil notify function")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub := &memSub{notify: notify}
	m.mu.Lock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = sub
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.subs, id)
		m.mu.Unlock()
		sub.mu.Lock()
		sub.stopped = true
		sub.mu.Unlock()
	}, nil
}

// Len returns the number of live records, so that tests can check that nothing
// was left behind.
func (m *MemoryProvider) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	return len(m.records)
}

// owned returns key's record if owner holds it; an ended record counts as held
// only when endedOK. The caller holds m.mu.
func (m *MemoryProvider) owned(key, owner string, endedOK bool) (*memRecord, error) {
	m.expire()
	r, ok := m.records[key]
	if !ok || r.owner != owner || (r.ended && !endedOK) {
		token := uint64(0)
		if ok && r.owner == owner {
			token = r.token
		}
		return nil, &LostError{Key: key, Token: token}
	}
	return r, nil
}

func (m *MemoryProvider) subscribers(announce bool) []*memSub {
	if !announce || len(m.subs) == 0 {
		return nil
	}
	subs := make([]*memSub, 0, len(m.subs))
	for _, sub := range m.subs {
		subs = append(subs, sub)
	}
	return subs
}

// announcement returns, when announce is true, the subscriptions to tell that
// key has ended and the owner whose turn it is. The caller holds m.mu.
func (m *MemoryProvider) announcement(announce bool, key string, now time.Time) ([]*memSub, string) {
	subs := m.subscribers(announce)
	if len(subs) == 0 {
		return nil, ""
	}
	return subs, m.queueHead(key, now)
}

// queueHead drops the owners of key's queue whose deadline has passed and
// returns the first one left, or "". The caller holds m.mu.
func (m *MemoryProvider) queueHead(key string, now time.Time) string {
	q := m.queues[key]
	live := q[:0]
	for _, w := range q {
		if now.Before(w.deadline) {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		delete(m.queues, key)
		return ""
	}
	m.queues[key] = live
	return live[0].owner
}

// enqueue puts owner at the back of key's queue, or keeps its place, until
// deadline. The caller holds m.mu.
func (m *MemoryProvider) enqueue(key, owner string, deadline time.Time) {
	q := m.queues[key]
	for i := range q {
		if q[i].owner == owner {
			q[i].deadline = deadline
			return
		}
	}
	m.queues[key] = append(q, memWaiter{owner: owner, deadline: deadline})
}

// dequeue takes owner out of key's queue. The caller holds m.mu.
func (m *MemoryProvider) dequeue(key, owner string) {
	q := m.queues[key]
	for i := range q {
		if q[i].owner == owner {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(m.queues, key)
	} else {
		m.queues[key] = q
	}
}

// expire deletes every record whose deadline has passed and returns the time it
// used. The caller holds m.mu.
func (m *MemoryProvider) expire() time.Time {
	now := m.clock.Now()
	for len(m.expiry) > 0 && !now.Before(m.expiry[0].deadline) {
		r := heap.Pop(&m.expiry).(*memRecord)
		delete(m.records, r.key)
	}
	return now
}

// remove deletes record r. The caller holds m.mu.
func (m *MemoryProvider) remove(r *memRecord) {
	delete(m.records, r.key)
	heap.Remove(&m.expiry, r.index)
}

func (m *MemoryProvider) setDeadline(r *memRecord, d time.Time) {
	r.deadline = d
	heap.Fix(&m.expiry, r.index)
}

// expiryHeap orders records by deadline, soonest first.
type expiryHeap []*memRecord

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	r := x.(*memRecord)
	r.index = len(*h)
	*h = append(*h, r)
}
func (h *expiryHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}
