// Package etcd is a lock.Provider that keeps the locks of
// github.com/seed05627090/lock in etcd (tested on v3.7.3), for services that
// must not break exclusion when a server fails: etcd replicates every write
// through Raft before it answers, so a lock granted is a lock every member
// will agree on.
//
//	cli, _ := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}})
//	p, err := etcd.NewProvider(ctx, cli)
//	defer p.Close()
//	c, err := lock.NewClient(p)
//	err = c.Do(ctx, "nightly-report", lock.Options{}, sendReport)
//
// # Keys
//
// Under a namespace (WithNamespace, "lock/" by default), a lock's record is
// one key, ns+"r/"+key, whose value holds its owner, token, whether it
// ended, when it was granted and the TTL asked for, and whose TTL is an
// etcd lease of its own. Waiters are keys ns+"q/"+len(key)+"/"+key+"/"+owner,
// served in the order of their create revisions. Every method is a
// transaction (or a few, each checked): its writes are made only if the
// record, and the queue entries it acts on, have the revisions it read, so
// that every method is atomic with respect to the others on the same key.
// It does not use etcd's concurrency.Mutex.
//
// # Guarantees and limits
//
// TTLs are etcd leases: whole seconds, so a TTL is rounded up to the next
// second (TTLGranularity), and the server raises a lease shorter than its
// minimum to it (MinTTL; 2s with etcd's default 100ms heartbeat and 1s
// election timeout). A record therefore lives at least as long as asked,
// never less, by the leader's clock; a leader change extends every lease
// (etcd renews them all on election). Record.TTL is what the record's
// lease has left since it was written, by the reader's clock; 100ms once
// that has run out while the record is still there.
//
// Fencing tokens are etcd revisions: the revision of the transaction that
// granted the record, the same for every member, durable through Raft, and
// strictly greater than every earlier revision of the cluster, across
// member crashes and leader changes. A cluster restored from a snapshot
// starts again at the snapshot's revision: restore it with etcdutl's
// --bump-revision (by more than the revisions written since the snapshot;
// 1,000,000,000 is the usual choice) and --mark-compacted, or tokens
// handed out after the snapshot are handed out again.
//
// # Counted names
//
// A counted name (a Semaphore's, an RWMutex's) is kept beside the lock of
// the same key: its claims are keys ns+"c/"+len(key)+"/"+key+"/h/"+owner,
// each on a lease of its own, its waiters keys beside them, each on a lease
// that lasts its QueueTTL from its last look (shared by the looks of a
// second: see queueLeases), and its version key ns+"n/"+key; each claim
// and waiter stores the name's limit and kind. A key is one kind at a time
// (lock.Kind): a lock's grant of a free key is made only if no key is
// under the name's prefix, and the transaction that makes a name (its
// first claim or waiter) only if the key holds no record, so that two
// callers racing never make both (a compare each, in the transaction that
// writes: no round trip more). Each claim method is one range
// read and one transaction, whose compares guard all it read, plus a lease
// grant for a claim it stores; a claim's token is the revision of the
// transaction that granted it, as a lock's is, so claims granted together
// from the queue share their token, greater than every earlier grant's of
// the key. A claim expires with its lease, and its weight serves the queue
// at the next call on the name.
//
// A Release (or Leave, ForceRelease, or a fair look at a free key) hands
// the lock to the first waiter in the same transaction that frees it,
// passing over waiters whose inbox nobody listens to, and tells the waiter
// with a message its Listen watches (see Listen).
package etcd

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

var _ lock.Provider = (*Provider)(nil)

// TTLGranularity is the step of the TTLs the provider stores: etcd leases
// are whole seconds, and every TTL is rounded up to the next one.
const TTLGranularity = time.Second

// DefaultNamespace starts every key of the provider when no WithNamespace
// is given.
const DefaultNamespace = "lock/"

// Defaults of the options.
const (
	DefaultSessionTTL       = 10 * time.Second
	DefaultProgressInterval = 5 * time.Second
	DefaultRequestTimeout   = 2 * time.Second
)

// Provider is a lock.Provider backed by etcd through a clientv3.Client.
// Make one with NewProvider, and Close it when done; it is safe for
// concurrent use. The client stays the caller's to close, after the
// provider.
type Provider struct {
	cli        *clientv3.Client
	ns         string
	progress   time.Duration
	reqTimeout time.Duration
	minTTL     time.Duration
	sess       *session
	queue      *queueLeases // of the counted names' waiters

	mu    sync.Mutex
	mine  map[string]stored // records this provider stored for its callers (see guess)
	bg    sync.WaitGroup    // revocations in the background
	close sync.Once
}

// maxMine bounds the records a provider remembers.
const maxMine = 1 << 16

// Option configures a Provider.
type Option func(*config)

type config struct {
	ns         string
	sessionTTL time.Duration
	progress   time.Duration
	reqTimeout time.Duration
}

// WithNamespace sets the text that starts every key the provider writes
// (DefaultNamespace when not given). Providers with different namespaces
// keep separate locks; one namespace must not start another's.
func WithNamespace(ns string) Option {
	return func(c *config) { c.ns = ns }
}

// WithSessionTTL sets the TTL of the provider's session lease
// (DefaultSessionTTL when not given or under a second), which holds this
// process's queue entries and Listen keys: they are gone this long after
// the process dies, and a waiter of a dead process is passed over from
// then on. The lease is renewed every third of it.
func WithSessionTTL(d time.Duration) Option {
	return func(c *config) {
		if d >= time.Second {
			c.sessionTTL = d
		}
	}
}

// WithProgressInterval sets how often a Listen's watch is asked for its
// progress (DefaultProgressInterval when not given or not positive): a
// watch that has not answered by the next time is opened again, and the
// waiters look again. It bounds how long a watch stuck on a member cut off
// from the cluster goes unnoticed (the watch also ends when its member
// loses the leader).
func WithProgressInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.progress = d
		}
	}
}

// WithRequestTimeout bounds each request the provider makes to etcd
// (DefaultRequestTimeout when not given or not positive), within the
// call's context. A request that takes longer, or that the cluster refuses
// for want of a leader, is tried again, on the state read again, by the
// methods whose repeat is safe: Acquire, Queue, Leave, Renew, Inspect and
// List; Release, Finish and ForceRelease return the error (their outcome
// is unknown; the Client reports it as lock.ErrUnavailable). A request sent
// to a member that lost its leader, or forwarded to a leader that died,
// otherwise waits for etcd's own request timeout (5s plus two election
// timeouts): set this above the cluster's usual worst latency.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.reqTimeout = d
		}
	}
}

// NewProvider returns a provider on cli. It asks the server for its
// minimum lease TTL (granting and revoking a lease of one second), and
// fails with the server's error when it cannot, or with
// lock.ErrInvalidArgument for a nil client.
func NewProvider(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Provider, error) {
	if cli == nil {
		return nil, check.Invalidf("nil etcd client")
	}
	cfg := config{ns: DefaultNamespace, sessionTTL: DefaultSessionTTL, progress: DefaultProgressInterval, reqTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	resp, err := cli.Grant(ctx, 1)
	if err != nil {
		return nil, fmt.Errorf("lock: etcd set-up: %w", err)
	}
	_, _ = cli.Revoke(ctx, resp.ID)
	p := &Provider{
		cli:        cli,
		ns:         cfg.ns,
		progress:   cfg.progress,
		reqTimeout: cfg.reqTimeout,
		minTTL:     time.Duration(resp.TTL) * time.Second,
		mine:       map[string]stored{},
	}
	p.sess = &session{p: p, ttl: leaseSeconds(cfg.sessionTTL)}
	p.queue = &queueLeases{p: p}
	return p, nil
}

// MinTTL returns the shortest lease the server grants, as it said when
// the provider was made: a TTL shorter than this lives this long.
func (p *Provider) MinTTL() time.Duration { return p.minTTL }

// Close revokes the provider's session lease and the leases of its
// counted waiters' entries (its waiters leave their queues, its Listens
// stop being listed) and waits for its background revocations. Stop the
// Client's Listens first (lock.Client.Close). Calls that need the session
// fail afterwards. It returns nil.
func (p *Provider) Close() error {
	p.close.Do(func() {
		p.sess.close()
		p.queue.close()
		p.bg.Wait()
	})
	return nil
}

// Acquire implements lock.Provider: one transaction, after a lease is
// granted for the record (revoked again when the key is held).
func (p *Provider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if err := checkArgs(key, owner, ttl); err != nil {
		return lock.Record{}, err
	}
	var rec lock.Record
	rev, err := p.update(ctx, key, reads{counted: true}, &state{}, true, func(st *state, ls *leases) (*change, error) {
		if st.bad != "" {
			return nil, &lock.RecordError{Key: key, Value: st.bad}
		}
		now := time.Now()
		if r := st.rec; r != nil && (r.owner != owner || r.ended) {
			rec = r.record(now, p.minTTL)
			return nil, nil
		}
		if st.rec == nil && st.counted {
			rec = lock.Record{Kind: st.kind} // in use as a counted name
			return nil, nil
		}
		lease, err := ls.own(ctx, ttl)
		if err != nil {
			return nil, err
		}
		ch := p.newChange(key, st)
		if st.rec == nil {
			ch.noCounted()
		}
		rec = ch.take(owner, ttl, lease, now)
		return ch, nil
	})
	return granted(rec, rev), err
}

// take stores the caller's record, owner's for ttl on lease: a new grant
// when the key is free, its own record renewed otherwise. It returns the
// record, with Token 0 for a new grant (see granted).
func (ch *change) take(owner string, ttl time.Duration, lease clientv3.LeaseID, now time.Time) lock.Record {
	ms := now.UnixMilli()
	s := stored{owner: owner, since: ms}
	if r := ch.st.rec; r != nil {
		s = *r // the caller's own record: same token, same since
	}
	s.ended, s.ttl, s.written = false, ttl.Milliseconds(), ms
	ch.putMine(s, lease)
	return lock.Record{Owner: owner, Token: s.token, TTL: time.Duration(s.ttl) * time.Millisecond, Since: time.UnixMilli(s.since)}
}

// granted fills in the token of a record granted by the commit at rev.
func granted(rec lock.Record, rev int64) lock.Record {
	if rec.Owner != "" && rec.Token == 0 {
		rec.Token = uint64(rev)
	}
	return rec
}

// Queue implements lock.Provider. LookJoin is served as LookFair: the
// record and the queue are read in one round trip either way. A caller
// that finds the lock handed to it (a look again after a Release told its
// inbox) is answered once this provider's Listens of its inbox have
// delivered that grant's message (or after half a second, when a stalled
// one has not): the message does not reach the inbox after the reply, when
// the caller may have released the lock already.
func (p *Provider) Queue(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
	if err := checkWait(key, w); err != nil {
		return lock.Record{}, err
	}
	var rec lock.Record
	var own int64  // the create revision of the caller's entry, when its place must be counted
	var told int64 // the revision of the message of a grant the caller finds in the reply
	rev, err := p.update(ctx, key, reads{owner: w.Owner, inbox: w.Inbox, counted: true}, nil, true, func(st *state, ls *leases) (*change, error) {
		if st.bad != "" {
			return nil, &lock.RecordError{Key: key, Value: st.bad}
		}
		ch, now, r := p.newChange(key, st), time.Now(), st.rec
		rec, own, told = lock.Record{}, 0, 0
		if r == nil && st.counted {
			rec = lock.Record{Kind: st.kind} // in use as a counted name: neither taken nor queued for
			return nil, nil
		}
		if r == nil {
			ch.noCounted() // whatever the change grants, or queues for
		}
		if r == nil && w.Look != lock.LookFirst {
			// Free: the first waiter goes first; it may be the caller.
			e, dropped := ch.serve(w.Owner, true)
			if e != nil && e.owner != w.Owner {
				lease, err := ls.fresh(ctx, e.ttl)
				if err != nil {
					return nil, err
				}
				ch.handTo(*e, lease, now)
				rec = lock.Record{Owner: e.owner, TTL: e.ttl, Since: time.UnixMilli(now.UnixMilli())}
				own, err = ch.join(ctx, w, &rec, dropped)
				return ch, err
			}
		}
		switch {
		case r == nil || (r.owner == w.Owner && !r.ended):
			lease, err := ls.own(ctx, w.TTL)
			if err != nil {
				return nil, err
			}
			if st.own != nil {
				ch.dropEntry(*st.own)
			}
			if r != nil {
				told = st.mail // handed to the caller, and told: see delivered
			}
			rec = ch.take(w.Owner, w.TTL, lease, now)
			return ch, nil
		case r.ended:
			rec = r.record(now, p.minTTL) // a grace period: not waiting
			if st.own == nil {
				return nil, nil
			}
			ch.dropEntry(*st.own)
			return ch, nil
		}
		rec = r.record(now, p.minTTL)
		var err error
		own, err = ch.join(ctx, w, &rec, 0)
		return ch, err
	})
	if err != nil {
		return lock.Record{}, err
	}
	if told != 0 {
		p.delivered(ctx, w.Inbox, told)
	}
	rec = granted(rec, rev)
	if own != 0 {
		rec.Position, err = p.place(ctx, key, own, rev)
	}
	return rec, err
}

// join puts the caller in the queue, or keeps its place, and marks rec
// Queued with its place, counting out the dropped entries before it. When
// its place is past the entries read, join returns the create revision of
// its entry, for place to count.
func (ch *change) join(ctx context.Context, w lock.Wait, rec *lock.Record, dropped int) (int64, error) {
	session, err := ch.p.sess.lease(ctx)
	if err != nil {
		return 0, err
	}
	ch.enqueue(w, session)
	rec.Queued = true
	st := ch.st
	switch i := st.place(w.Owner); {
	case i >= 0:
		rec.Position = i - dropped
	case st.own == nil:
		rec.Position = int(st.total) - dropped
	default:
		return st.own.create, nil
	}
	return 0, nil
}

// place counts the entries of key's queue before the one created at
// create, at revision rev.
func (p *Provider) place(ctx context.Context, key string, create, rev int64) (int, error) {
	var resp *clientv3.GetResponse
	err := p.read(ctx, func(ctx context.Context) (err error) {
		resp, err = p.cli.Get(ctx, p.queuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly(),
			clientv3.WithMaxCreateRev(create-1), clientv3.WithRev(rev))
		return err
	})
	if err != nil {
		return 0, fail(err)
	}
	return int(resp.Count), nil
}

// Leave implements lock.Provider.
func (p *Provider) Leave(ctx context.Context, key string, w lock.Wait) error {
	if err := checkWait(key, w); err != nil {
		return err
	}
	_, err := p.update(ctx, key, reads{owner: w.Owner}, nil, true, func(st *state, ls *leases) (*change, error) {
		ch := p.newChange(key, st)
		if st.own != nil {
			ch.dropEntry(*st.own)
		}
		if r := st.rec; r != nil && r.owner == w.Owner && !r.ended {
			ch.forget = true
			if _, err := ch.free(ctx, ls, w.Owner, time.Now()); err != nil {
				return nil, err
			}
		}
		if len(ch.ops) == 0 {
			return nil, nil
		}
		return ch, nil
	})
	return err
}

// Release implements lock.Provider. When this provider stored the record,
// and nobody waits, it is one transaction.
func (p *Provider) Release(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	lost := false
	_, err := p.update(ctx, key, reads{}, p.guess(key, owner), false, func(st *state, ls *leases) (*change, error) {
		if st.bad != "" {
			return nil, &lock.RecordError{Key: key, Value: st.bad}
		}
		if r := st.rec; r == nil || r.owner != owner {
			lost = true
			return nil, nil
		}
		ch := p.newChange(key, st)
		ch.forget = true
		_, err := ch.free(ctx, ls, "", time.Now())
		return ch, err
	})
	if err == nil && lost {
		p.forget(key)
		return &lock.LostError{Key: key}
	}
	return err
}

// Renew implements lock.Provider: the record is written again on a new
// lease of ttl (an etcd lease cannot change its TTL), and the old lease is
// revoked.
func (p *Provider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	return p.set(ctx, key, owner, ttl, false)
}

// Finish implements lock.Provider: the record is written again, ended, on
// a new lease of ttl, the queue is emptied, and each inbox of its waiters
// is sent a grace-period message, on the same lease.
func (p *Provider) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	return p.set(ctx, key, owner, ttl, true)
}

// set renews owner's live record under key, or, with ended, finishes it.
func (p *Provider) set(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	var lost *lock.LostError
	_, err := p.update(ctx, key, reads{full: ended}, p.guess(key, owner), !ended, func(st *state, ls *leases) (*change, error) {
		if st.bad != "" {
			return nil, &lock.RecordError{Key: key, Value: st.bad}
		}
		r := st.rec
		if r == nil || r.owner != owner || r.ended {
			lost = &lock.LostError{Key: key}
			if r != nil && r.owner == owner {
				lost.Token = r.token
			}
			return nil, nil
		}
		lost = nil
		lease, err := ls.own(ctx, ttl)
		if err != nil {
			return nil, err
		}
		ch := p.newChange(key, st)
		s := *r
		s.ended, s.ttl, s.written = ended, ttl.Milliseconds(), time.Now().UnixMilli()
		ch.putMine(s, lease)
		if ended {
			ch.endQueue(s.token, lease)
		}
		return ch, nil
	})
	if err == nil && lost != nil {
		p.forget(key)
		return lost
	}
	return err
}

// endQueue empties the queue, read whole, and sends each inbox of its
// waiters, once, a grace-period message on lease.
func (ch *change) endQueue(token uint64, lease clientv3.LeaseID) {
	ch.queueUnchanged()
	if len(ch.st.queue) == 0 {
		return
	}
	ch.ops = append(ch.ops, clientv3.OpDelete(ch.p.queuePrefix(ch.key), clientv3.WithPrefix()))
	told := map[string]bool{}
	for _, e := range ch.st.queue {
		if !told[e.inbox] {
			told[e.inbox] = true
			ch.ops = append(ch.ops, clientv3.OpPut(ch.p.graceMail(e.inbox, token, ch.key), "", clientv3.WithLease(lease)))
		}
	}
}

// Inspect implements lock.Provider: one read of the record and of the
// number of waiters.
func (p *Provider) Inspect(ctx context.Context, key string) (lock.Record, error) {
	if err := check.Key(key); err != nil {
		return lock.Record{}, err
	}
	var resp *clientv3.TxnResponse
	err := p.read(ctx, func(ctx context.Context) (err error) {
		resp, err = p.cli.Txn(ctx).Then(
			clientv3.OpGet(p.recordKey(key)),
			clientv3.OpGet(p.queuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly()),
		).Commit()
		return err
	})
	if err != nil {
		return lock.Record{}, fail(err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return lock.Record{}, nil
	}
	s, ok := parseStored(kvs[0])
	if !ok {
		return lock.Record{}, &lock.RecordError{Key: key, Value: string(kvs[0].Value)}
	}
	rec := s.record(time.Now(), p.minTTL)
	rec.Waiters = int(resp.Responses[1].GetResponseRange().Count)
	return rec, nil
}

// listPage is how many records List reads in one request.
const listPage = 100

// List implements lock.Provider. It reads the records in key order, a page
// at a time, with the number of waiters of each page's keys counted in a
// second request at the page's revision, then the counted names the same
// way (see listCounted); fn runs between requests.
func (p *Provider) List(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) error {
	if fn == nil {
		return check.Invalidf("nil list function")
	}
	more, err := p.listRecords(ctx, prefix, fn)
	if err != nil || !more {
		return err
	}
	_, err = p.listCounted(ctx, prefix, fn)
	return err
}

// listRecords calls fn, as List does, with each record whose key starts
// with prefix. It reports whether fn asked for more.
func (p *Provider) listRecords(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) (bool, error) {
	return p.listPages(ctx, p.recordKey(""), prefix, false,
		func(key string, rev int64) clientv3.Op {
			return clientv3.OpGet(p.queuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
		},
		func(key string, kv *mvccKV, waiters *pb.ResponseOp, now time.Time) bool {
			s, ok := parseStored(kv)
			if !ok {
				return fn(key, lock.Record{}, &lock.RecordError{Key: key, Value: string(kv.Value)})
			}
			rec := s.record(now, p.minTTL)
			rec.Waiters = int(waiters.GetResponseRange().Count)
			return fn(key, rec, nil)
		})
}

// listPages reads the keys under base whose names (what follows base)
// start with prefix, in key order, a page of listPage at a time (only the
// keys with keysOnly), and then, in a second request at the page's
// revision, the read of each name that of returns. It calls each with
// every name of the page, its key, the reply to its read and the time the
// page was read by, until each returns false. It reports whether each
// asked for more.
func (p *Provider) listPages(ctx context.Context, base, prefix string, keysOnly bool,
	of func(name string, rev int64) clientv3.Op,
	each func(name string, kv *mvccKV, r *pb.ResponseOp, now time.Time) bool) (bool, error) {
	from, end := base+prefix, clientv3.GetPrefixRangeEnd(base+prefix)
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	for {
		var resp *clientv3.GetResponse
		err := p.read(ctx, func(ctx context.Context) (err error) {
			resp, err = p.cli.Get(ctx, from, opts...)
			return err
		})
		if err != nil {
			return false, fail(err)
		}
		if len(resp.Kvs) == 0 {
			return true, nil
		}
		reads := make([]clientv3.Op, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			reads[i] = of(strings.TrimPrefix(string(kv.Key), base), resp.Header.Revision)
		}
		var replies *clientv3.TxnResponse
		err = p.read(ctx, func(ctx context.Context) (err error) {
			replies, err = p.cli.Txn(ctx).Then(reads...).Commit()
			return err
		})
		if err != nil {
			return false, fail(err)
		}
		now := time.Now()
		for i, kv := range resp.Kvs {
			if !each(strings.TrimPrefix(string(kv.Key), base), kv, replies.Responses[i], now) {
				return false, nil
			}
		}
		if !resp.More {
			return true, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// ForceRelease implements lock.Provider.
func (p *Provider) ForceRelease(ctx context.Context, key string) (lock.Record, error) {
	if err := check.Key(key); err != nil {
		return lock.Record{}, err
	}
	var rec lock.Record
	_, err := p.update(ctx, key, reads{}, nil, false, func(st *state, ls *leases) (*change, error) {
		if st.bad != "" {
			return nil, &lock.RecordError{Key: key, Value: st.bad}
		}
		r := st.rec
		if r == nil {
			rec = lock.Record{}
			return nil, nil
		}
		now := time.Now()
		rec = r.record(now, p.minTTL)
		ch := p.newChange(key, st)
		_, err := ch.free(ctx, ls, "", now)
		return ch, err
	})
	if err != nil {
		return lock.Record{}, err
	}
	p.forget(key)
	return rec, nil
}

// read runs fn, a read, with a context ended by the request timeout, and
// again as update does when that or the want of a leader failed it.
func (p *Provider) read(ctx context.Context, fn func(ctx context.Context) error) error {
	wait := minBackoff
	for {
		rctx, cancel := p.request(ctx)
		err := fn(rctx)
		cancel()
		if err == nil || !p.again(ctx, err, &wait) {
			return err
		}
	}
}

// guess returns the state of key as this provider last wrote it for owner,
// or nil: Release, Renew and Finish try it first, and a transaction whose
// compares find it wrong reads the real state in the same round trip. It
// guesses an empty queue.
func (p *Provider) guess(key, owner string) *state {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.mine[key]
	if !ok || s.owner != owner {
		return nil
	}
	return &state{rec: &s, recMod: s.mod}
}

// remember keeps what the change committed at rev did to the caller's record.
func (p *Provider) remember(key string, ch *change, rev int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ch.mine != nil:
		s := *ch.mine
		s.mod = rev
		if s.token == 0 {
			s.token = uint64(rev)
		}
		if _, ok := p.mine[key]; ok || len(p.mine) < maxMine {
			p.mine[key] = s
		}
	case ch.forget || ch.wrote:
		delete(p.mine, key) // the record it knew is gone or changed
	}
}

func (p *Provider) forget(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mine, key)
}

// revoke revokes leases in the background, each within 5s; Close waits for
// them.
func (p *Provider) revoke(ids []clientv3.LeaseID) {
	if len(ids) == 0 {
		return
	}
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(p.cli.Ctx(), 5*time.Second)
		defer cancel()
		for _, id := range ids {
			_, _ = p.cli.Revoke(ctx, id)
		}
	}()
}

// fail marks a server's, network's or context's error as etcd's; the
// lock.Client names the operation and the key.
func fail(err error) error {
	return fmt.Errorf("etcd: %w", err)
}
