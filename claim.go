package lock

import (
	"context"
	"time"
)

// claim is what a hold takes of a counted name (a Semaphore's permits, an
// [RWMutex]'s readers): weight out of limit. The zero claim is a lock's. A
// Lock and its acquisition carry one, and ask the provider through the
// methods below, which call the lock's methods of the Provider or the
// claim's: the waiting, renewal, loss and release of a lock and of a claim
// are one code.
type claim struct {
	weight, limit int
	kind          Kind // KindSemaphore or KindRWMutex
}

// counted reports whether cl is a claim on a counted name, not a lock.
func (cl claim) counted() bool { return cl.weight > 0 }

func (cl claim) of(owner string, ttl time.Duration) Claim {
	return Claim{Owner: owner, Weight: cl.weight, Limit: cl.limit, Kind: cl.kind, TTL: ttl}
}

// tryAcquire asks for the lock or claim under key once ([Provider.Acquire],
// AcquireClaim).
func (c *Client) tryAcquire(ctx context.Context, key, owner string, cl claim, ttl time.Duration) (Record, error) {
	if cl.counted() {
		return c.provider.AcquireClaim(ctx, key, cl.of(owner, ttl))
	}
	return c.provider.Acquire(ctx, key, owner, ttl)
}

// queue asks for it as waiter w ([Provider.Queue], QueueClaim); a
// counted waiter's entry lasts queueTTL (see [Claim.QueueTTL]).
func (c *Client) queue(ctx context.Context, key string, cl claim, w Wait, queueTTL time.Duration) (Record, error) {
	if cl.counted() {
		q := cl.waiter(w)
		q.QueueTTL = queueTTL
		return c.provider.QueueClaim(ctx, key, q)
	}
	return c.provider.Queue(ctx, key, w)
}

// leave takes waiter w out of key's queue ([Provider.Leave], LeaveClaim).
func (c *Client) leave(ctx context.Context, key string, cl claim, w Wait) error {
	if cl.counted() {
		return c.provider.LeaveClaim(ctx, key, cl.waiter(w))
	}
	return c.provider.Leave(ctx, key, w)
}

func (cl claim) waiter(w Wait) Claim {
	q := cl.of(w.Owner, w.TTL)
	q.Inbox, q.Look = w.Inbox, w.Look
	return q
}

// renew renews owner's hold under key ([Provider.Renew], RenewClaim).
func (c *Client) renew(ctx context.Context, key, owner string, cl claim, ttl time.Duration) error {
	if cl.counted() {
		return c.provider.RenewClaim(ctx, key, owner, ttl)
	}
	return c.provider.Renew(ctx, key, owner, ttl)
}

// release releases owner's hold under key ([Provider.Release],
// ReleaseClaim).
func (c *Client) release(ctx context.Context, key, owner string, cl claim) error {
	if cl.counted() {
		return c.provider.ReleaseClaim(ctx, key, owner)
	}
	return c.provider.Release(ctx, key, owner)
}

// claimOf returns the claim of a grant: a lock's for a Notice without
// Weight.
func claimOf(g Notice) claim { return claim{weight: g.Weight} }
