package lock

import (
	"context"
	"sync"
	"time"
)

// confirmer passes on the grants of one Listen with [WaitForReplicas] once
// they are replicated: for each, the grantee's renewal of its new record
// and a WAIT, in one pipeline on the key's primary (the WAIT covers the
// release's write that made the grant, which the primary replicated
// before the renewal). A grant that fewer replicas acknowledged is not
// delivered, and not handed on here: the waiter's own request may have
// found the lock its own meanwhile (and confirmed it with its own WAIT), and
// handing it on would take it from its holder. The waiter looks again at
// its next poll: its request confirms the grant, or fails with
// [ErrNotReplicated] and the waiter leaves, handing the lock on.
type confirmer struct {
	renew   func(ctx context.Context, g Notice) error // the grantee's renewal and WAIT (renewGrant)
	timeout time.Duration                             // bounds each
	deliver func(Notice)
	ctx     context.Context // cancelled by stop
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the confirmations under way; Add only under mu, before stopped
	mu      sync.Mutex     // held while deliver runs, so that stop waits for it
	stopped bool
}

// grant confirms g on a goroutine of its own, so that the subscription is
// not held up by a WAIT; a Notice without Owner is passed on at once. After
// stop, it does nothing: a confirmation starts only under mu, before stop
// has marked c stopped, so stop's Wait counts every one.
func (c *confirmer) grant(g Notice) {
	if g.Owner == "" {
		c.pass(g)
		return
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		defer cancel()
		if c.renew(ctx, g) == nil {
			c.pass(g)
		}
		// Otherwise not replicated (see confirmer), lost (the waiter gave
		// up), or the server failed: the waiter's next look finds what
		// holds the key.
	}()
}

func (c *confirmer) pass(g Notice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		c.deliver(g)
	}
}

// stop waits for the confirmations under way; none delivers afterwards.
func (c *confirmer) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// renewGrant renews the record or claim that g grants, for its grantee (a
// confirmer's renewal).
func (p *RedisProvider) renewGrant(ctx context.Context, g Notice) error {
	if g.Weight > 0 {
		return p.RenewClaim(ctx, g.Key, g.Owner, g.TTL)
	}
	return p.Renew(ctx, g.Key, g.Owner, g.TTL)
}

// newConfirmer returns the confirmer of a Listen on ctx that delivers to
// deliver.
func (p *RedisProvider) newConfirmer(ctx context.Context, deliver func(Notice)) *confirmer {
	c := &confirmer{renew: p.renewGrant, timeout: p.replicaTimeout + 5*time.Second, deliver: deliver}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return c
}
