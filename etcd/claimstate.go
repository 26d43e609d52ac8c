package etcd

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// A counted name key keeps, under the namespace ns:
//
//	ns+"c/"+len(key)+"/"+key+"/h/"+owner  a claim of owner (on its own lease)
//	ns+"c/"+len(key)+"/"+key+"/w/"+owner  a waiter for a claim (on a queue lease: see queueLeases)
//	ns+"n/"+key                           the name's version key
//
// One range over the first two prefixes reads the whole name: its claims
// in the order they were granted and its waiters in the order they came,
// each by create revision. A claim's token is the create revision of its
// key, the revision of the transaction that granted it: the same counter
// as the tokens of the locks. Its lease is its TTL, so etcd deletes it when
// that runs out, and the next call to find room serves the queue.
//
// Every transaction that writes or deletes a claim, or deletes a waiter,
// puts the name's version key, or deletes it with the name's last claim or
// waiter, and is made only if no claim was written and no waiter joined
// since the state was read (compares over the prefixes) and the version
// key is as read: a claim or waiter deleted by another call is seen
// through the version key, which etcd's compares over a prefix cannot see
// (see claimChange.commit). The version key is on the lease of the claim
// that lasts longest (on the session lease when only waiters are left), so
// that the name leaves no key behind when its claims expire; List finds
// the counted names by it.
//
// A key is one kind at a time (lock.Kind): each claim and waiter stores the
// name's kind, beside its limit; a lock's grant of a free key is made only
// if no key is under the name's prefix (change.noCounted), and the change
// that makes a name (its first claim or waiter) only if the key holds no
// lock's record (claimChange.made): each transaction's compares cover the
// other's keys, so two callers racing never make both.

func (p *Provider) namePrefix(key string) string {
	return p.ns + "c/" + strconv.Itoa(len(key)) + "/" + key + "/"
}

func (p *Provider) claimKey(key, owner string) string { return p.namePrefix(key) + "h/" + owner }

func (p *Provider) claimWaiterKey(key, owner string) string { return p.namePrefix(key) + "w/" + owner }

func (p *Provider) versionKey(key string) string { return p.ns + "n/" + key }

func (p *Provider) claimMail(inbox, owner, key string) string {
	return p.mailPrefix(inbox) + "c " + owner + " " + key
}

// claim is a claim as the provider keeps it: the value
//
//	"1 <weight> <limit> <since ms> <ttl ms> <written ms> <order> <kind>"
//
// since and written are Unix milliseconds by the clock of the process that
// wrote them; ttl is the TTL asked for, which the claim's lease (whole
// seconds) is at least; order is its place among the claims granted by the
// same transaction, which share their create revision; kind is the name's
// (absent in a claim stored before kinds).
type claim struct {
	owner   string
	weight  int
	limit   int
	kind    lock.Kind
	since   int64
	ttl     int64
	written int64
	order   int

	token uint64           // the key's create revision; 0 for a claim the change grants
	mod   int64            // the key's ModRevision; 0 for a claim the change grants
	lease clientv3.LeaseID // the claim's lease
}

func (c *claim) value() string {
	return "1 " + strconv.Itoa(c.weight) + " " + strconv.Itoa(c.limit) + " " + strconv.FormatInt(c.since, 10) + " " +
		strconv.FormatInt(c.ttl, 10) + " " + strconv.FormatInt(c.written, 10) + " " + strconv.Itoa(c.order) + " " + string(c.kind)
}

// parseClaim decodes owner's claim at kv; ok is false for a value that is
// not a claim.
func parseClaim(owner string, kv *mvccKV) (c claim, ok bool) {
	f := strings.Split(string(kv.Value), " ")
	if len(f) == 8 && f[7] != "" {
		c.kind = lock.Kind(f[7])
		f = f[:7]
	}
	if len(f) != 7 || f[0] != "1" || check.Owner(owner) != nil {
		return claim{}, false
	}
	var err [6]error
	c.owner = owner
	c.weight, err[0] = strconv.Atoi(f[1])
	c.limit, err[1] = strconv.Atoi(f[2])
	c.since, err[2] = strconv.ParseInt(f[3], 10, 64)
	c.ttl, err[3] = strconv.ParseInt(f[4], 10, 64)
	c.written, err[4] = strconv.ParseInt(f[5], 10, 64)
	c.order, err[5] = strconv.Atoi(f[6])
	for _, e := range err {
		if e != nil {
			return claim{}, false
		}
	}
	if c.limit < 1 || c.limit > lock.MaxLimit || c.weight < 1 || c.weight > c.limit || c.ttl <= 0 {
		return claim{}, false
	}
	c.token, c.mod, c.lease = uint64(kv.CreateRevision), kv.ModRevision, clientv3.LeaseID(kv.Lease)
	return c, true
}

// ends is when c's lease runs out, in Unix milliseconds by its writer's
// clock.
func (c *claim) ends(minTTL time.Duration) int64 {
	return c.written + leaseLife(c.ttl, minTTL).Milliseconds()
}

// record returns c as a lock.Record read at now.
func (c *claim) record(now time.Time, minTTL time.Duration) lock.Record {
	return lock.Record{Owner: c.owner, Token: c.token, TTL: leaseLeft(c.written, c.ttl, now, minTTL), Since: time.UnixMilli(c.since)}
}

// claimWaiter is a waiter in a counted name's queue: the value
// "<weight> <limit> <ttl ms> <ends ms> <kind> <inbox>", ends when its
// queue lease runs out, in Unix milliseconds by the clock of the process
// that wrote it (etcd deletes it then, by the leader's; see queueLeases),
// kind the name's (absent in an entry stored before kinds).
type claimWaiter struct {
	owner  string
	inbox  string
	weight int
	limit  int
	kind   lock.Kind
	ttl    time.Duration
	ends   int64
	mod    int64 // 0 for an entry the change makes
}

func (w *claimWaiter) value() string {
	return strconv.Itoa(w.weight) + " " + strconv.Itoa(w.limit) + " " +
		strconv.FormatInt(max(w.ttl.Milliseconds(), 1), 10) + " " + strconv.FormatInt(w.ends, 10) + " " + string(w.kind) + " " + w.inbox
}

// parseClaimWaiter decodes owner's entry at kv; ok is false for a value
// that is not an entry. (An inbox has no white space: a value of six
// fields has a kind.)
func parseClaimWaiter(owner string, kv *mvccKV) (w claimWaiter, ok bool) {
	f := strings.Split(string(kv.Value), " ")
	if len(f) == 6 && f[4] != "" {
		w.kind = lock.Kind(f[4])
		f = []string{f[0], f[1], f[2], f[3], f[5]}
	}
	if len(f) != 5 || check.Owner(owner) != nil || check.Inbox(f[4]) != nil {
		return claimWaiter{}, false
	}
	var err [4]error
	var ms int64
	w.weight, err[0] = strconv.Atoi(f[0])
	w.limit, err[1] = strconv.Atoi(f[1])
	ms, err[2] = strconv.ParseInt(f[2], 10, 64)
	w.ends, err[3] = strconv.ParseInt(f[3], 10, 64)
	for _, e := range err {
		if e != nil {
			return claimWaiter{}, false
		}
	}
	if w.limit < 1 || w.limit > lock.MaxLimit || w.weight < 1 || w.weight > w.limit || ms <= 0 {
		return claimWaiter{}, false
	}
	w.owner, w.inbox, w.ttl, w.mod = owner, f[4], time.Duration(ms)*time.Millisecond, kv.ModRevision
	return w, true
}

// left returns what w's queue lease has left at now, by the reader's
// clock against the writer's: overdueTTL once that has run out (etcd
// deletes the entry within its check of the leases).
func (w *claimWaiter) left(now time.Time) time.Duration {
	left := time.UnixMilli(w.ends).Sub(now).Truncate(time.Millisecond)
	if left <= 0 {
		return overdueTTL
	}
	return left
}

// counted is what one call knows about a counted name, read at one
// revision.
type counted struct {
	rev     int64     // the revision it was read at; 0 for a guess
	limit   int       // 0 when the name holds no claim and no waiter
	kind    lock.Kind // the name's; empty when it holds nothing, or has none stored
	holders []claim
	queue   []claimWaiter
	version int64             // the version key's ModRevision; 0 when there is none
	bad     *lock.RecordError // the first value of the name that is not what the provider writes
	mail    int64             // the revision of the grant message sent to the caller, when asked for and present
	deaf    map[string]bool   // inboxes nobody listens to (true) or someone does (false), when asked
	// lock is the key's lock record, when there is one (lockBad, when
	// the value there is not a record): a name is not made beside it.
	lock    *stored
	lockBad string
}

// claimReads says what a counted state is read with: with inbox, the
// grant message of a claim to owner there.
type claimReads struct {
	owner, inbox string
}

// claimOps returns the reads of key's counted state, then one count of the
// listeners of each inbox in heard.
func (p *Provider) claimOps(key string, r claimReads, heard []string) []clientv3.Op {
	ops := []clientv3.Op{
		clientv3.OpGet(p.namePrefix(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
		clientv3.OpGet(p.versionKey(key), clientv3.WithKeysOnly()),
		clientv3.OpGet(p.recordKey(key)),
	}
	if r.inbox != "" {
		ops = append(ops, clientv3.OpGet(p.claimMail(r.inbox, r.owner, key), clientv3.WithKeysOnly()))
	}
	return append(ops, p.listenCounts(heard)...)
}

// parseCounted builds the counted state of key from the replies to
// claimOps(key, r, heard), read at rev.
func (p *Provider) parseCounted(key string, rev int64, r claimReads, heard []string, res []*pb.ResponseOp) *counted {
	st := p.parseName(key, res[0].GetResponseRange().Kvs)
	st.rev = rev
	st.version = firstMod(res[1])
	if kvs := res[2].GetResponseRange().Kvs; len(kvs) > 0 {
		if s, ok := parseStored(kvs[0]); ok {
			st.lock = &s
		} else {
			st.lockBad = string(kvs[0].Value)
		}
	}
	i := 3
	if r.inbox != "" {
		st.mail = firstMod(res[3])
		i = 4
	}
	st.deaf = deafOf(heard, res[i:])
	return st
}

// parseName builds a counted state of key from its keys under namePrefix,
// in create order.
func (p *Provider) parseName(key string, kvs []*mvccKV) *counted {
	st := &counted{}
	prefix := p.namePrefix(key)
	for _, kv := range kvs {
		kind, owner, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		ok, limit, k := false, 0, lock.Kind("")
		switch kind {
		case "h":
			var c claim
			if c, ok = parseClaim(owner, kv); ok {
				st.holders = append(st.holders, c)
				limit, k = c.limit, c.kind
			}
		case "w":
			var w claimWaiter
			if w, ok = parseClaimWaiter(owner, kv); ok {
				st.queue = append(st.queue, w)
				limit, k = w.limit, w.kind
			}
		}
		if !ok {
			if st.bad == nil {
				st.bad = &lock.RecordError{Key: key, Value: string(kv.Value)}
			}
			continue
		}
		st.limit = firstLimit(st.limit, limit)
		st.kind = cmp.Or(st.kind, k)
	}
	// Claims granted in one transaction share their create revision.
	slices.SortFunc(st.holders, func(a, b claim) int {
		return cmp.Or(cmp.Compare(a.token, b.token), cmp.Compare(a.order, b.order))
	})
	return st
}

// kindOf returns the kind of the counted name of key whose first key is
// kv (a claim or a waiter), empty when it has none or is not one.
func (p *Provider) kindOf(key string, kv *mvccKV) lock.Kind {
	return p.parseName(key, []*mvccKV{kv}).kind
}

// firstLimit returns the limit already found, or limit when there is none.
func firstLimit(found, limit int) int {
	if found != 0 {
		return found
	}
	return limit
}

// weightOf is the weight the claims cs hold.
func weightOf(cs []claim) int {
	n := 0
	for _, c := range cs {
		n += c.weight
	}
	return n
}

// maxServe bounds the waiters one call grants or passes over: each takes
// three operations and two compares of the transaction, and etcd refuses a
// transaction of more than 128 of either (--max-txn-ops).
const maxServe = 32

// claimChange is the writes of one attempt of a claim method, and the
// compares that make them, with the name as it will be once they commit.
//
// Its detach are the leases no claim is on once it commits.
type claimChange struct {
	guarded
	p       *Provider
	key     string
	st      *counted
	now     time.Time
	limit   int
	kind    lock.Kind     // the name's, which its new claims and waiters store
	made    bool          // it makes the name: it depends on the key holding no lock's record
	holders []claim       // the claims once it commits, in grant order
	queue   []claimWaiter // the waiters once it commits, in arrival order
	used    int
	granted int                        // the claims it grants
	bump    bool                       // it writes or deletes a claim, or deletes a waiter: it puts the version key
	kept    bool                       // it rewrites the caller's entry, which keeps its place
	gone    []clientv3.LeaseID         // leases of the claims it replaces or deletes
	fresh   map[int64]clientv3.LeaseID // leases of the claims it grants to waiters, by seconds
}

// newClaimChange starts a change of key's counted state st.
func (p *Provider) newClaimChange(key string, st *counted) *claimChange {
	return &claimChange{
		p:       p,
		key:     key,
		st:      st,
		now:     time.Now(),
		limit:   st.limit,
		kind:    st.kind,
		holders: slices.Clone(st.holders),
		queue:   slices.Clone(st.queue),
		used:    weightOf(st.holders),
	}
}

// holds returns the index of owner's claim, or -1.
func (ch *claimChange) holds(owner string) int {
	return slices.IndexFunc(ch.holders, func(c claim) bool { return c.owner == owner })
}

// waits returns the index of owner's entry in the queue, or -1.
func (ch *claimChange) waits(owner string) int {
	return slices.IndexFunc(ch.queue, func(w claimWaiter) bool { return w.owner == owner })
}

// fits reports whether a claim of weight fits in the room left.
func (ch *claimChange) fits(weight int) bool { return ch.used+weight <= ch.limit }

// guard makes the change depend on the key k being at revision mod (for a
// key read; a key deleted since has none).
func (ch *claimChange) guard(k string, mod int64) {
	if mod != 0 {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
	}
}

// put stores c, a new claim or one of those read, on lease.
func (ch *claimChange) put(c claim, lease clientv3.LeaseID) {
	k := ch.p.claimKey(ch.key, c.owner)
	i := ch.holds(c.owner)
	if i >= 0 {
		ch.guard(k, ch.holders[i].mod)
		if old := ch.holders[i].lease; old != lease {
			ch.gone = append(ch.gone, old)
		}
		ch.used -= ch.holders[i].weight
	} else {
		c.token, c.mod, c.order = 0, 0, ch.granted
		ch.granted++
		ch.holders = append(ch.holders, c)
		i = len(ch.holders) - 1
	}
	ch.ops = append(ch.ops, clientv3.OpPut(k, c.value(), clientv3.WithLease(lease)))
	ch.bump = true
	c.lease = lease
	ch.used += c.weight
	ch.holders[i] = c
}

// take grants owner a new claim of weight, for ttl on lease.
func (ch *claimChange) take(owner string, weight int, ttl time.Duration, lease clientv3.LeaseID) {
	ms := ch.now.UnixMilli()
	ch.put(claim{owner: owner, weight: weight, limit: ch.limit, kind: ch.kind, since: ms, ttl: ttl.Milliseconds(), written: ms}, lease)
}

// renew stores the claim at i again for ttl, on lease.
func (ch *claimChange) renew(i int, ttl time.Duration, lease clientv3.LeaseID) {
	c := ch.holders[i]
	c.ttl, c.written = ttl.Milliseconds(), ch.now.UnixMilli()
	ch.put(c, lease)
}

// lower sets the weight of the claim at i to weight, on its lease.
func (ch *claimChange) lower(i, weight int) {
	c := ch.holders[i]
	c.weight = weight
	ch.put(c, c.lease)
}

// release deletes the claim at i.
func (ch *claimChange) release(i int) {
	c := ch.holders[i]
	k := ch.p.claimKey(ch.key, c.owner)
	ch.guard(k, c.mod)
	ch.ops = append(ch.ops, clientv3.OpDelete(k))
	ch.bump = true
	ch.gone = append(ch.gone, c.lease)
	ch.used -= c.weight
	ch.holders = slices.Delete(ch.holders, i, i+1)
}

// leave deletes the entry at i of the queue.
func (ch *claimChange) leave(i int) {
	ch.ops = append(ch.ops, clientv3.OpDelete(ch.p.claimWaiterKey(ch.key, ch.queue[i].owner)))
	ch.bump = true
	ch.queue = slices.Delete(ch.queue, i, i+1)
}

// enqueue puts c in the queue on q, a queue lease, or keeps its place
// there (a Put keeps a key's create revision), rewriting its entry on q
// either way.
func (ch *claimChange) enqueue(c lock.Claim, q queueLease) {
	k := ch.p.claimWaiterKey(ch.key, c.Owner)
	w := claimWaiter{owner: c.Owner, inbox: c.Inbox, weight: c.Weight, limit: ch.limit, kind: ch.kind, ttl: c.TTL, ends: q.ends.UnixMilli()}
	ch.ops = append(ch.ops, clientv3.OpPut(k, w.value(), clientv3.WithLease(q.id)))
	if i := ch.waits(c.Owner); i >= 0 {
		ch.guard(k, ch.queue[i].mod)
		ch.queue[i] = w
		ch.kept = true
		return
	}
	ch.queue = append(ch.queue, w)
}

// listened makes the change depend on someone listening to inbox (deaf
// false) or on nobody (deaf true), as change.listened does.
func (ch *claimChange) listened(inbox string, deaf bool) {
	c := clientv3.Compare(clientv3.CreateRevision(ch.p.listenPrefix(inbox)), ">", 0)
	if deaf {
		c = clientv3.Compare(clientv3.CreateRevision(ch.p.listenPrefix(inbox)), "=", 0)
	}
	ch.cmps = append(ch.cmps, c.WithPrefix())
	if !slices.Contains(ch.heard, inbox) {
		ch.heard = append(ch.heard, inbox)
	}
}

// serve grants the head of the queue a claim while it fits, then the next,
// and so on, up to maxServe of them: each gets a claim of its weight and
// TTL, on a lease granted after the state was read, and a message on its
// inbox, on the same lease, whose revision is its token. A waiter whose
// inbox nobody listens to is passed over and dropped. self, when not nil,
// is the caller (QueueClaim's): its claim has self.TTL, on a lease of its
// own, and its inbox is told whether or not it is listened to. serve
// reports whether it granted the caller.
func (ch *claimChange) serve(ctx context.Context, ls *leases, self *lock.Claim) (bool, error) {
	granted := false
	for n := 0; n < maxServe && len(ch.queue) > 0; n++ {
		w := ch.queue[0]
		isSelf := self != nil && w.owner == self.Owner
		if isSelf {
			w.ttl, w.weight, w.inbox = self.TTL, self.Weight, self.Inbox
		}
		if !isSelf && ch.st.deaf[w.inbox] {
			ch.leave(0)
			ch.listened(w.inbox, true)
			continue
		}
		if !ch.fits(w.weight) {
			break
		}
		var lease clientv3.LeaseID
		var err error
		if isSelf {
			lease, err = ls.own(ctx, w.ttl)
			granted = true
		} else {
			lease, err = ch.freshLease(ctx, ls, w.ttl)
			ch.listened(w.inbox, false)
		}
		if err != nil {
			return false, err
		}
		ch.guard(ch.p.claimWaiterKey(ch.key, w.owner), w.mod)
		ch.leave(0)
		ch.take(w.owner, w.weight, w.ttl, lease)
		ch.ops = append(ch.ops, clientv3.OpPut(ch.p.claimMail(w.inbox, w.owner, ch.key),
			strconv.FormatInt(w.ttl.Milliseconds(), 10)+" "+strconv.Itoa(w.weight), clientv3.WithLease(lease)))
	}
	return granted, nil
}

// freshLease returns a lease of ttl for a waiter's claim, granted after the
// state was read; the waiters granted by one change share one lease for
// each number of seconds.
func (ch *claimChange) freshLease(ctx context.Context, ls *leases, ttl time.Duration) (clientv3.LeaseID, error) {
	secs := leaseSeconds(ttl)
	if id, ok := ch.fresh[secs]; ok {
		return id, nil
	}
	id, err := ls.fresh(ctx, ttl)
	if err != nil {
		return 0, err
	}
	if ch.fresh == nil {
		ch.fresh = map[int64]clientv3.LeaseID{}
	}
	ch.fresh[secs] = id
	return id, nil
}

// commit finishes the change, or returns nil when it writes nothing.
//
// A change that only rewrites the caller's entry, which keeps its place,
// depends on that entry alone: a call that changed the name since served
// the queue, and granted the caller if it could (deleting the entry). Any
// other change depends on no claim having been written since the state
// was read, no waiter having joined, and the version key being as read
// (no claim or waiter deleted); when it writes or deletes a claim, or
// deletes a waiter, it puts the version key (on the lease of the claim
// that lasts longest, or on the session lease when only waiters are left),
// or deletes it when the name is left empty.
func (ch *claimChange) commit(ctx context.Context) (*claimChange, error) {
	if len(ch.ops) == 0 {
		return nil, nil
	}
	if ch.kept && len(ch.ops) == 1 {
		return ch, nil
	}
	prefix, vk := ch.p.namePrefix(ch.key), ch.p.versionKey(ch.key)
	if ch.made {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(ch.p.recordKey(ch.key)), "=", 0))
	}
	ch.cmps = append(ch.cmps,
		clientv3.Compare(clientv3.ModRevision(prefix+"h/"), "<", ch.st.rev+1).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(prefix+"w/"), "<", ch.st.rev+1).WithPrefix())
	if ch.st.version == 0 {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.CreateRevision(vk), "=", 0))
	} else {
		ch.cmps = append(ch.cmps, clientv3.Compare(clientv3.ModRevision(vk), "=", ch.st.version))
	}
	switch {
	case !ch.bump && ch.st.version != 0:
	case len(ch.holders) > 0:
		last := ch.holders[0]
		for _, c := range ch.holders[1:] {
			if c.ends(ch.p.minTTL) > last.ends(ch.p.minTTL) {
				last = c
			}
		}
		ch.ops = append(ch.ops, clientv3.OpPut(vk, strconv.Itoa(ch.limit), clientv3.WithLease(last.lease)))
	case len(ch.queue) > 0:
		session, err := ch.p.sess.lease(ctx)
		if err != nil {
			return nil, err
		}
		ch.ops = append(ch.ops, clientv3.OpPut(vk, strconv.Itoa(ch.limit), clientv3.WithLease(session)))
	default:
		ch.ops = append(ch.ops, clientv3.OpDelete(vk))
	}
	for _, id := range ch.gone {
		kept := slices.ContainsFunc(ch.holders, func(c claim) bool { return c.lease == id })
		if !kept && id != clientv3.NoLease && !slices.Contains(ch.detach, id) {
			ch.detach = append(ch.detach, id)
		}
	}
	return ch, nil
}

// record returns what the name holds for owner once the change committed
// at rev (0 when it wrote nothing): owner's claim when it holds one,
// otherwise the claim that expires first, if any; with Limit and Used.
func (ch *claimChange) record(owner string, rev int64) lock.Record {
	var rec lock.Record
	if i := ch.holds(owner); i >= 0 {
		rec = ch.holders[i].record(ch.now, ch.p.minTTL)
	} else {
		for _, c := range ch.holders {
			if r := c.record(ch.now, ch.p.minTTL); rec.Owner == "" || r.TTL < rec.TTL {
				rec = r
			}
		}
		rec.Since = time.Time{}
	}
	if rec.Owner != "" && rec.Token == 0 {
		rec.Token = uint64(rev)
	}
	rec.Limit, rec.Used, rec.Kind = ch.limit, ch.used, ch.kind
	return rec
}

// accept starts a change of AcquireClaim or QueueClaim for c: it reports
// whether c is the name's limit and kind (a name that holds nothing takes
// c's, and one stored without a kind c's kind), and, when the change would
// make the name of a key that holds a lock's record, returns that record
// (Kind lock.KindLock) and false. It marks a change that makes the name
// (made), whose commit depends on the key holding no record.
func (ch *claimChange) accept(c lock.Claim) (refused *lock.Record, ok bool, err error) {
	st := ch.st
	if ch.limit == 0 {
		switch {
		case st.lockBad != "":
			return nil, false, &lock.RecordError{Key: ch.key, Value: st.lockBad}
		case st.lock != nil:
			rec := st.lock.record(ch.now, ch.p.minTTL)
			rec.Kind = lock.KindLock
			return &rec, false, nil
		}
		ch.limit, ch.kind, ch.made = c.Limit, c.Kind, true
	}
	if ch.limit != c.Limit || ch.kind != "" && ch.kind != c.Kind {
		return nil, false, nil // another limit or kind: the caller reports it
	}
	ch.kind = c.Kind
	return nil, true, nil
}
