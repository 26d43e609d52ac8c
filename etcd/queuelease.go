package etcd

import (
	"context"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueLeases are the leases of the entries of this provider's waiters for
// counted names: an entry lasts its Claim's QueueTTL after its waiter's
// last look (lock.Provider.QueueClaim), and etcd deletes it when its lease
// runs out, so that a waiter that stopped looking is gone from the queue
// then, whether its process died (its session would take
// WithSessionTTL to go) or only stalled (its session lives on). A lease is
// granted for the TTL and reuse, rounded up to whole seconds (and to the
// server's minimum), and every entry written within reuse of its grant
// goes on it: at most one grant every reuse for each number of seconds,
// not one a look, and an entry lasts at least its TTL, and at most reuse
// and etcd's granularity longer.
type queueLeases struct {
	p *Provider

	mu     sync.Mutex
	fresh  map[int64]queueLease // the lease of each number of seconds, while it takes entries
	live   []queueLease         // every lease granted that has not run out, for Close
	closed bool
}

// queueLease is a lease of the queue entries, and when it runs out, by
// this process's clock (from before it was granted, and at least the
// server's minimum lease).
type queueLease struct {
	id      clientv3.LeaseID
	granted time.Time
	ends    time.Time
}

// reuse is how long after its grant a queue lease takes new entries.
const reuse = 500 * time.Millisecond

// lease returns a lease on which an entry lasts at least ttl, granting one
// when none of its seconds was granted within reuse.
func (q *queueLeases) lease(ctx context.Context, ttl time.Duration) (queueLease, error) {
	secs := leaseSeconds(ttl + reuse)
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	if q.closed {
		return queueLease{}, errClosed
	}
	if l, ok := q.fresh[secs]; ok && now.Sub(l.granted) < reuse {
		return l, nil
	}
	rctx, cancel := q.p.request(ctx)
	resp, err := q.p.cli.Grant(rctx, secs)
	cancel()
	if err != nil {
		return queueLease{}, fail(err)
	}
	l := queueLease{id: resp.ID, granted: now, ends: now.Add(max(time.Duration(resp.TTL)*time.Second, q.p.minTTL))}
	if q.fresh == nil {
		q.fresh = map[int64]queueLease{}
	}
	q.fresh[secs] = l
	q.live = append(slices.DeleteFunc(q.live, func(l queueLease) bool { return now.After(l.ends) }), l)
	return l, nil
}

// close revokes the leases that have not run out, which deletes the
// entries on them at once rather than a TTL later; lease fails from then on.
func (q *queueLeases) close() {
	q.mu.Lock()
	q.closed = true
	ids := make([]clientv3.LeaseID, 0, len(q.live))
	for _, l := range q.live {
		if time.Now().Before(l.ends) {
			ids = append(ids, l.id)
		}
	}
	q.live, q.fresh = nil, nil
	q.mu.Unlock()
	q.p.revoke(ids)
}
