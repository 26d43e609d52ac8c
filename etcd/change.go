package etcd

import (
	"context"
	"errors"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed05627090/lock"
)

// change is the writes of one attempt of a method, and the compares that
// make them: each write is made only if what it was built from is as the
// attempt's state says, so that every method is atomic with respect to the
// others on the same key, whichever process runs them.
// Its detach are the leases of the records it replaces or deletes.
type change struct {
	guarded
	p      *Provider
	key    string
	st     *state
	mine   *stored // the caller's record it stores, remembered for its next call
	wrote  bool    // it writes or deletes the record
	forget bool    // the caller's record is gone once it commits
}

// newChange starts a change of key's state st: its first compare is that the
// record is as st read it (absent, or at the same revision).
func (p *Provider) newChange(key string, st *state) *change {
	ch := &change{p: p, key: key, st: st}
	rk := p.recordKey(key)
	if st.recMod == 0 {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(rk), "=", 0))
	} else {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(rk), "=", st.recMod))
	}
	return ch
}

// putRecord stores s as the key's record, on lease.
func (ch *change) putRecord(s stored, lease clientv3.LeaseID) {
	ch.ops = append(ch.ops, clientv3.OpPut(ch.p.recordKey(ch.key), s.value(), clientv3.WithLease(lease)))
	s.lease = lease
	ch.replaced()
}

// putMine stores s, the caller's own record, on lease.
func (ch *change) putMine(s stored, lease clientv3.LeaseID) {
	ch.putRecord(s, lease)
	s.lease = lease
	ch.mine = &s
}

// deleteRecord deletes the key's record.
func (ch *change) deleteRecord() {
	ch.ops = append(ch.ops, clientv3.OpDelete(ch.p.recordKey(ch.key)))
	ch.replaced()
}

// replaced revokes the lease of the record st read once the change commits:
// nothing is left on it then but messages already sent.
func (ch *change) replaced() {
	ch.wrote = true
	if r := ch.st.rec; r != nil && r.lease != clientv3.NoLease {
		ch.detach = append(ch.detach, r.lease)
	}
}

// dropEntry deletes e from the queue, if it is as read.
func (ch *change) dropEntry(e entry) {
	k := ch.p.entryKey(ch.key, e.owner)
	ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", e.mod))
	ch.ops = append(ch.ops, clientv3.OpDelete(k))
}

// enqueue puts w in the key's queue on the session lease, or keeps its
// place there (a Put keeps a key's create revision), and rewrites its entry
// either way: a release that read the entry before this call cannot commit
// after it (see handTo).
func (ch *change) enqueue(w lock.Wait, session clientv3.LeaseID) {
	k := ch.p.entryKey(ch.key, w.Owner)
	if own := ch.st.own; own != nil {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", own.mod))
	} else {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
	}
	ch.ops = append(ch.ops, clientv3.OpPut(k, entryValue(w), clientv3.WithLease(session)))
}

// listened makes the change depend on someone listening to inbox (deaf
// false) or on nobody (deaf true). When that is not so, the transaction
// fails and its reads say so (state.deaf).
func (ch *change) listened(inbox string, deaf bool) {
	c := clientv3.Compare(clientv3.CreateRevision(ch.p.listenPrefix(inbox)), ">", 0)
	if deaf {
		c = clientv3.Compare(clientv3.CreateRevision(ch.p.listenPrefix(inbox)), "=", 0)
	}
	ch.cmps = append(ch.cmps, c.WithPrefix())
	for _, h := range ch.heard {
		if h == inbox {
			return
		}
	}
	ch.heard = append(ch.heard, inbox)
}

// noCounted makes the change, a grant of the free key, depend on the key's
// counted name holding no claim and no waiter (no key under its prefix):
// a key is one kind at a time. When it does, the transaction fails and
// its reads (reads.counted) say so.
func (ch *change) noCounted() {
	ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(ch.p.namePrefix(ch.key)), "=", 0).WithPrefix())
}

// noNewEntries makes the change depend on the queue having no entry that
// st did not see: none created after st was read (none at all, for a guessed
// state).
func (ch *change) noNewEntries() {
	ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(ch.p.queuePrefix(ch.key)), "<", ch.st.rev+1).WithPrefix())
}

// queueUnchanged makes the change depend on the queue being as st read it,
// but for entries that left it.
func (ch *change) queueUnchanged() {
	ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(ch.p.queuePrefix(ch.key)), "<", ch.st.rev+1).WithPrefix())
}

// serve finds who the key goes to when it is freed: the first waiter read
// whose inbox is listened to, or the caller (self) when selfWaits (it learns
// of its grant from the reply). It drops the entries before that one whose
// inboxes nobody listens to, and returns how many entries it dropped, the
// one it found included (not the caller's). It returns nil when none of the
// entries read will do.
func (ch *change) serve(self string, selfWaits bool) (e *entry, dropped int) {
	for i := range ch.st.queue {
		e := &ch.st.queue[i]
		switch {
		case e.owner == self:
			if selfWaits {
				return e, dropped
			}
		case ch.st.deaf[e.inbox]:
			ch.dropEntry(*e)
			ch.listened(e.inbox, true)
			dropped++
		default:
			ch.dropEntry(*e)
			ch.listened(e.inbox, false)
			return e, dropped + 1
		}
	}
	return nil, dropped
}

// handTo stores a record for waiter e on lease, as granted at now, and
// sends e's inbox its Notice: a message on the same lease, whose revision
// (the change's) is the grant's token. The lease was granted after the
// state was read, and so after e's last request was sent: the record lives
// at least e.ttl past it, as e's Client counts.
func (ch *change) handTo(e entry, lease clientv3.LeaseID, now time.Time) {
	ms := now.UnixMilli()
	ch.putRecord(stored{owner: e.owner, since: ms, ttl: e.ttl.Milliseconds(), written: ms}, lease)
	ch.ops = append(ch.ops, clientv3.OpPut(ch.p.grantMail(e.inbox, e.owner, ch.key),
		strconv.FormatInt(e.ttl.Milliseconds(), 10), clientv3.WithLease(lease)))
}

// free deletes the key's record, or hands it to the first waiter who will
// do (see serve; self's entry is passed over). It returns that waiter.
func (ch *change) free(ctx context.Context, ls *leases, self string, now time.Time) (*entry, error) {
	e, _ := ch.serve(self, false)
	if e == nil {
		ch.deleteRecord()
		if len(ch.st.queue) == int(ch.st.total) {
			ch.noNewEntries()
		}
		return nil, nil
	}
	lease, err := ls.fresh(ctx, e.ttl)
	if err != nil {
		return nil, err
	}
	ch.handTo(*e, lease, now)
	return e, nil
}

// update runs attempt until the change it returns commits, or it returns
// none (see retryTxn: the state attempt builds the change from is key's,
// read with r), and keeps what the committed change did to the caller's
// record for its next call (remember). It returns the revision of the
// commit (0 when nothing was written).
//
// Each request is bounded by the request timeout (WithRequestTimeout).
// With retry, a request that times out, or that the cluster refused for
// want of a leader, is tried again on a state read again (after 50ms, then
// twice as long each time up to a second), until ctx ends. That is safe
// for the methods whose repeat answers as the first call would have
// (Acquire, Queue, Leave, Renew: a record found the caller's own is
// renewed, an entry found is kept), not for Release and Finish, whose
// repeat, finding their own work done, would call it a loss.
func (p *Provider) update(ctx context.Context, key string, r reads, guess *state, retry bool, attempt func(*state, *leases) (*change, error)) (int64, error) {
	ch, rev, err := retryTxn(ctx, p, stateReads[state]{
		ops:   func(heard []string) []clientv3.Op { return p.ops(key, r, heard) },
		parse: func(rev int64, heard []string, res []*pb.ResponseOp) *state { return p.parse(key, rev, r, heard, res) },
	}, guess, retry, attempt)
	if ch != nil {
		p.remember(key, ch, rev)
	}
	return rev, err
}

// guarded is what one attempt of a method sends: the writes of its
// transaction and the compares that make them, the inboxes whose
// listeners it counts on (or on there being none), which the transaction
// counts again when the compares fail, and the leases it leaves without a
// key once it commits, revoked then. change and claimChange are guarded.
type guarded struct {
	cmps   []clientv3.Cmp
	ops    []clientv3.Op
	heard  []string
	detach []clientv3.LeaseID
}

func (g *guarded) guards() *guarded { return g }

// stateReads is how retryTxn reads the state of one key: ops are the reads
// of the state, then a count of the listeners of each inbox in heard;
// parse builds the state from their replies, read at rev.
type stateReads[S any] struct {
	ops   func(heard []string) []clientv3.Op
	parse func(rev int64, heard []string, res []*pb.ResponseOp) *S
}

// retryTxn runs attempt until the change it returns commits, or it returns
// none, and returns the change that committed with the revision of the
// commit (nil and 0 when nothing was written). attempt builds the change
// from a state read with rd: guess, when not nil (a state the caller
// expects, which the first transaction's compares check), otherwise one
// read first. A transaction whose compares fail reads the state again in
// the same round trip (its Else), and attempt runs on that. The leases
// attempt takes from ls are revoked at the end but for those the committed
// change's keys are on (see leases.done). With retry, a request that timed
// out or found no leader is tried again on a state read again, as update
// says, until ctx ends.
func retryTxn[S any, C interface {
	*change | *claimChange
	guards() *guarded
}](ctx context.Context, p *Provider, rd stateReads[S], guess *S, retry bool, attempt func(*S, *leases) (C, error)) (C, int64, error) {
	ls := &leases{p: p}
	defer ls.done()
	st, wait := guess, minBackoff
	for {
		if st == nil {
			resp, err := p.txn(ctx, nil, rd.ops(nil), nil)
			if err != nil {
				if retry && p.again(ctx, err, &wait) {
					continue
				}
				return nil, 0, fail(err)
			}
			st = rd.parse(resp.Header.Revision, nil, resp.Responses)
			ls.retry()
		}
		ch, err := attempt(st, ls)
		if err != nil && retry && p.again(ctx, err, &wait) {
			st = nil // a lease grant that timed out
			continue
		}
		if err != nil || ch == nil {
			return nil, 0, err
		}
		g := ch.guards()
		resp, err := p.txn(ctx, g.cmps, g.ops, rd.ops(g.heard))
		switch {
		case err == nil && resp.Succeeded:
			ls.commit(g.detach)
			return ch, resp.Header.Revision, nil
		case err == nil:
			st = rd.parse(resp.Header.Revision, g.heard, resp.Responses)
			ls.retry()
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			// A lease ran out before the write: the session's (lost while
			// partitioned), a claim's that holds a counted name's version
			// key, or one of ours that an attempt took too long to use.
			// Nothing was written.
			p.sess.check(ctx)
			ls.drop()
			st = nil
		default:
			// The outcome is unknown: the leases the change used may hold
			// records now (see leases.done).
			ls.unsure()
			if retry && p.again(ctx, err, &wait) {
				st = nil
				continue
			}
			return nil, 0, fail(err)
		}
	}
}

// txn runs one transaction, bounded by the request timeout.
func (p *Provider) txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	rctx, cancel := p.request(ctx)
	defer cancel()
	return p.cli.Txn(rctx).If(cmps...).Then(then...).Else(els...).Commit()
}

// request returns the context of one request: ctx, ended by the request
// timeout.
func (p *Provider) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.reqTimeout)
}

// again reports whether a request that failed with err is worth trying
// again, after a wait (*wait, doubled up to a second): ctx has not ended,
// and err says the request timed out or the cluster had no leader for it.
func (p *Provider) again(ctx context.Context, err error, wait *time.Duration) bool {
	if ctx.Err() != nil || !transient(err) {
		return false
	}
	ok := sleep(ctx, *wait)
	*wait = min(2**wait, time.Second)
	return ok
}

// transient reports whether err is a request's timeout (the caller's
// context being alive), or the cluster's refusal for want of a leader.
func transient(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		errors.Is(err, rpctypes.ErrTimeoutWaitAppliedIndex):
		return true
	}
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unavailable || s.Code() == codes.DeadlineExceeded)
}

// leases are the leases one method call granted for the records it
// writes, kept across its attempts and revoked at its end unless a record
// is on them.
type leases struct {
	p         *Provider
	gen       int // the state's generation: one more at each read
	pool      []*pooled
	committed bool               // a change committed
	detach    []clientv3.LeaseID // the leases of the records it replaced or deleted
}

type pooled struct {
	id    clientv3.LeaseID
	secs  int64
	gen   int
	inUse bool // by the current attempt
}

// own returns a lease of ttl for a record of the caller: any lease this
// call granted will do, since the caller counts its TTL from before the
// call.
func (ls *leases) own(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	return ls.get(ctx, ttl, false)
}

// fresh returns a lease of ttl for a waiter's record, granted after the
// current state was read (see handTo).
func (ls *leases) fresh(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	return ls.get(ctx, ttl, true)
}

func (ls *leases) get(ctx context.Context, ttl time.Duration, fresh bool) (clientv3.LeaseID, error) {
	secs := leaseSeconds(ttl)
	for _, l := range ls.pool {
		if !l.inUse && l.secs == secs && (!fresh || l.gen == ls.gen) {
			l.inUse = true
			return l.id, nil
		}
	}
	rctx, cancel := ls.p.request(ctx)
	defer cancel()
	resp, err := ls.p.cli.Grant(rctx, secs)
	if err != nil {
		return 0, fail(err)
	}
	ls.pool = append(ls.pool, &pooled{id: resp.ID, secs: secs, gen: ls.gen, inUse: true})
	return resp.ID, nil
}

// retry starts the next attempt, on a state read again.
func (ls *leases) retry() {
	ls.gen++
	for _, l := range ls.pool {
		l.inUse = false
	}
}

// unsure forgets the leases of the current attempt: its transaction's
// outcome is unknown, and they may hold records (see done).
func (ls *leases) unsure() {
	pool := ls.pool[:0]
	for _, l := range ls.pool {
		if !l.inUse {
			pool = append(pool, l)
		}
	}
	ls.pool = pool
	ls.retry()
}

// drop revokes the leases granted so far, some of which ran out, and
// forgets them.
func (ls *leases) drop() {
	ids := make([]clientv3.LeaseID, len(ls.pool))
	for i, l := range ls.pool {
		ids[i] = l.id
	}
	ls.p.revoke(ids)
	ls.pool = nil
	ls.retry()
}

// commit notes that a change committed: its leases hold its records, and
// detach are the leases of the records it replaced or deleted.
func (ls *leases) commit(detach []clientv3.LeaseID) {
	ls.committed, ls.detach = true, detach
}

// done ends the call: it revokes, in the background, the leases that no
// record is on (all but those of the change that committed, if one did),
// and the leases of the records that change replaced. The leases of
// transactions whose outcome is unknown are left to run out: such a
// transaction may still commit (a slow leader), and a lease revoked under
// it would delete a record whose grant was told, before its time.
func (ls *leases) done() {
	var ids []clientv3.LeaseID
	for _, l := range ls.pool {
		if !l.inUse || !ls.committed {
			ids = append(ids, l.id)
		}
	}
	ids = append(ids, ls.detach...)
	ls.p.revoke(ids)
}

// leaseSeconds is the TTL of a lease for ttl: whole seconds, rounded up
// (the server raises it to its minimum, if it is less).
func leaseSeconds(ttl time.Duration) int64 {
	return max(int64((ttl+time.Second-1)/time.Second), 1)
}
