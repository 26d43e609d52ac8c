package etcd

import (
	"cmp"
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// The counted names of lock.Provider (see claimstate.go for their keys).
// Each method reads the name with one range, builds its change, and
// commits it with one transaction whose compares guard what it read; a
// transaction that finds the name changed reads it again in the same round
// trip (its Else), and the change is built again. A claim of the caller's
// own needs a lease first (one more request), and each TTL of the waiters
// granted by a call one more. A claim whose lease ran out is gone: the
// next call that finds room serves the queue (every call that writes does).

// checkClaim is lock.Claim.Check, then checkLease of the claim's TTL.
func checkClaim(key string, c lock.Claim) error {
	if err := c.Check(key); err != nil {
		return err
	}
	return checkLease(c.TTL)
}

// AcquireClaim implements lock.Provider: one read, and one transaction
// after a lease is granted for the claim when it is taken or renewed (a
// refused claim costs the read alone).
func (p *Provider) AcquireClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if err := checkClaim(key, c); err != nil {
		return lock.Record{}, err
	}
	var ch *claimChange
	var refused *lock.Record
	rev, err := p.updateClaims(ctx, key, claimReads{}, nil, true, func(st *counted, ls *leases) (*claimChange, error) {
		if st.bad != nil {
			return nil, st.bad
		}
		ch = p.newClaimChange(key, st)
		var ok bool
		var err error
		if refused, ok, err = ch.accept(c); !ok {
			return nil, err
		}
		held := ch.holds(c.Owner) >= 0
		if _, err := ch.serve(ctx, ls, nil); err != nil {
			return nil, err
		}
		i := ch.holds(c.Owner)
		if i >= 0 && !held {
			// The caller was queued, and granted from the queue just
			// now (and told, as a waiter is).
			return ch.commit(ctx)
		}
		if i < 0 && (len(ch.queue) > 0 || !ch.fits(c.Weight)) {
			return ch.commit(ctx)
		}
		lease, err := ls.own(ctx, c.TTL)
		if err != nil {
			return nil, err
		}
		if i >= 0 {
			ch.renew(i, c.TTL, lease)
		} else {
			ch.take(c.Owner, c.Weight, c.TTL, lease)
		}
		return ch.commit(ctx)
	})
	if err != nil {
		return lock.Record{}, err
	}
	if refused != nil {
		return *refused, nil
	}
	return ch.record(c.Owner, rev), nil
}

// QueueClaim implements lock.Provider: one read and one transaction, after
// a lease is granted when the caller's claim is stored. LookJoin is served
// as LookFair, and LookFirst as well: the whole queue is read either way,
// and a claim is never granted past a waiter. A caller granted a claim
// from the queue, by this call or an earlier one, is answered once this
// provider's Listens of its inbox have delivered the grant's message (as
// Queue is).
func (p *Provider) QueueClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if err := checkClaim(key, c); err != nil {
		return lock.Record{}, err
	}
	if err := check.Inbox(c.Inbox); err != nil {
		return lock.Record{}, err
	}
	var ch *claimChange
	var refused *lock.Record
	var told int64 // the revision of the grant message the caller was sent; -1 for this call's
	rev, err := p.updateClaims(ctx, key, claimReads{owner: c.Owner, inbox: c.Inbox}, nil, true, func(st *counted, ls *leases) (*claimChange, error) {
		if st.bad != nil {
			return nil, st.bad
		}
		ch, told = p.newClaimChange(key, st), 0
		var ok bool
		var err error
		if refused, ok, err = ch.accept(c); !ok {
			return nil, err
		}
		self, err := ch.serve(ctx, ls, &c)
		if err != nil {
			return nil, err
		}
		switch i := ch.holds(c.Owner); {
		case self:
			told = -1
		case i >= 0: // granted earlier, and told
			lease, err := ls.own(ctx, c.TTL)
			if err != nil {
				return nil, err
			}
			ch.renew(i, c.TTL, lease)
			told = st.mail
		case len(ch.queue) == 0 && ch.fits(c.Weight):
			lease, err := ls.own(ctx, c.TTL)
			if err != nil {
				return nil, err
			}
			ch.take(c.Owner, c.Weight, c.TTL, lease)
		default:
			q, err := p.queue.lease(ctx, cmp.Or(c.QueueTTL, lock.DefaultQueueTTL))
			if err != nil {
				return nil, err
			}
			ch.enqueue(c, q)
		}
		return ch.commit(ctx)
	})
	if err != nil {
		return lock.Record{}, err
	}
	if refused != nil {
		return *refused, nil
	}
	rec := ch.record(c.Owner, rev)
	if i := ch.waits(c.Owner); i >= 0 && ch.holds(c.Owner) < 0 {
		rec.Queued, rec.Position = true, i
		if i > 0 {
			rec.HeadTTL = ch.queue[0].left(time.Now())
		}
	}
	if told < 0 {
		told = rev
	}
	if told > 0 {
		p.delivered(ctx, c.Inbox, told)
	}
	return rec, nil
}

// LeaveClaim implements lock.Provider: one read, and one transaction when
// there is something to change.
func (p *Provider) LeaveClaim(ctx context.Context, key string, c lock.Claim) error {
	if err := checkClaim(key, c); err != nil {
		return err
	}
	if err := check.Inbox(c.Inbox); err != nil {
		return err
	}
	_, err := p.updateClaims(ctx, key, claimReads{}, nil, true, func(st *counted, ls *leases) (*claimChange, error) {
		if st.bad != nil {
			return nil, st.bad
		}
		ch := p.newClaimChange(key, st)
		if i := ch.waits(c.Owner); i >= 0 {
			ch.leave(i)
		}
		if i := ch.holds(c.Owner); i >= 0 {
			ch.release(i)
		}
		if _, err := ch.serve(ctx, ls, nil); err != nil {
			return nil, err
		}
		return ch.commit(ctx)
	})
	return err
}

// RenewClaim implements lock.Provider: the claim is written again on a new
// lease of ttl (an etcd lease cannot change its TTL), and the old lease is
// revoked when no other claim is on it.
func (p *Provider) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, true, func(ch *claimChange, ls *leases, i int) error {
		lease, err := ls.own(ctx, ttl)
		if err == nil {
			ch.renew(i, ttl, lease)
		}
		return err
	})
}

// ReleaseClaim implements lock.Provider. A request that times out is not
// tried again (its outcome is unknown; a repeat that found its own work
// done would call it a loss), as Release's is not.
func (p *Provider) ReleaseClaim(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, false, func(ch *claimChange, _ *leases, i int) error {
		ch.release(i)
		return nil
	})
}

// LowerClaim implements lock.Provider: the claim is written again, on its
// lease.
func (p *Provider) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	if err := check.Weight(weight); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, true, func(ch *claimChange, _ *leases, i int) error {
		if weight < ch.holders[i].weight {
			ch.lower(i, weight)
		}
		return nil
	})
}

// changeClaim runs change on owner's live claim under key, at index i of
// the change, and serves the queue: one read and one transaction. It
// returns a *lock.LostError, and changes nothing, when owner holds no
// live claim there.
func (p *Provider) changeClaim(ctx context.Context, key, owner string, retry bool, change func(ch *claimChange, ls *leases, i int) error) error {
	lost := false
	_, err := p.updateClaims(ctx, key, claimReads{}, nil, retry, func(st *counted, ls *leases) (*claimChange, error) {
		if st.bad != nil {
			return nil, st.bad
		}
		ch := p.newClaimChange(key, st)
		i := ch.holds(owner)
		lost = i < 0
		if lost {
			return nil, nil
		}
		if err := change(ch, ls, i); err != nil {
			return nil, err
		}
		if _, err := ch.serve(ctx, ls, nil); err != nil {
			return nil, err
		}
		return ch.commit(ctx)
	})
	if err == nil && lost {
		return &lock.LostError{Key: key}
	}
	return err
}

// InspectClaims implements lock.Provider: one read.
func (p *Provider) InspectClaims(ctx context.Context, key string) (lock.Claims, error) {
	if err := check.Key(key); err != nil {
		return lock.Claims{}, err
	}
	var resp *clientv3.TxnResponse
	err := p.read(ctx, func(ctx context.Context) (err error) {
		resp, err = p.cli.Txn(ctx).Then(p.claimOps(key, claimReads{}, nil)...).Commit()
		return err
	})
	if err != nil {
		return lock.Claims{}, fail(err)
	}
	st := p.parseCounted(key, resp.Header.Revision, claimReads{}, nil, resp.Responses)
	if st.bad != nil {
		return lock.Claims{}, st.bad
	}
	cs := lock.Claims{Limit: st.limit, Kind: st.kind}
	now := time.Now()
	for _, c := range st.holders {
		cs.Holders = append(cs.Holders, c.record(now, p.minTTL))
		cs.Weights = append(cs.Weights, c.weight)
	}
	for _, w := range st.queue {
		cs.Queue = append(cs.Queue, lock.Claim{Owner: w.owner, Weight: w.weight, Limit: w.limit, Kind: cmp.Or(w.kind, st.kind), TTL: w.ttl, Inbox: w.inbox})
	}
	return cs, nil
}

// listCounted calls fn, as List does, with each counted name that starts
// with prefix and holds a claim or a waiter: its names a page at a time,
// by their version keys, then each page's claims and waiters in a second
// request at the page's revision. It reports whether fn asked for more.
func (p *Provider) listCounted(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) (bool, error) {
	return p.listPages(ctx, p.versionKey(""), prefix, true,
		func(key string, rev int64) clientv3.Op {
			return clientv3.OpGet(p.namePrefix(key), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithRev(rev))
		},
		func(key string, _ *mvccKV, name *pb.ResponseOp, now time.Time) bool {
			st := p.parseName(key, name.GetResponseRange().Kvs)
			var rec lock.Record
			var err error
			switch {
			case st.bad != nil:
				err = st.bad
			case st.limit == 0:
				return true // its last claim expired a moment ago
			default:
				rec = lock.Record{Limit: st.limit, Used: weightOf(st.holders), Waiters: len(st.queue), Kind: st.kind}
				for _, c := range st.holders {
					rec.TTL = max(rec.TTL, c.record(now, p.minTTL).TTL)
				}
			}
			return fn(key, rec, err)
		})
}

// updateClaims runs attempt until the change it returns commits, or it
// returns none, as update does for a lock (see retryTxn: the state attempt
// builds the change from is the counted state of key, read with r). It
// returns the revision of the commit (0 when nothing was written).
func (p *Provider) updateClaims(ctx context.Context, key string, r claimReads, guess *counted, retry bool, attempt func(*counted, *leases) (*claimChange, error)) (int64, error) {
	_, rev, err := retryTxn(ctx, p, stateReads[counted]{
		ops: func(heard []string) []clientv3.Op { return p.claimOps(key, r, heard) },
		parse: func(rev int64, heard []string, res []*pb.ResponseOp) *counted {
			return p.parseCounted(key, rev, r, heard, res)
		},
	}, guess, retry, attempt)
	return rev, err
}
