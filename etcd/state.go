package etcd

import (
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// The keys of the provider, under its namespace ns (see WithNamespace):
//
//	ns+"r/"+key                          the record of key (on its own lease)
//	ns+"q/"+len(key)+"/"+key+"/"+owner   a waiter of key (on the session lease)
//	ns+"l/"+inbox+" "+id                 a Listen of inbox (on the session lease)
//	ns+"m/"+inbox+" g "+owner+" "+key    a grant to owner, for its inbox (on the grant's lease)
//	ns+"m/"+inbox+" e "+token+" "+key    a grace period of key, for the inbox (on the grace's lease)
//	ns+"m/"+inbox+" c "+owner+" "+key    a claim granted to owner, for its inbox (on the claim's lease)
//
// and the keys of the counted names (see claimstate.go):
//
//	ns+"c/"+len(key)+"/"+key+"/h/"+owner  a claim of owner on the counted name key (on its own lease)
//	ns+"c/"+len(key)+"/"+key+"/w/"+owner  a waiter for a claim on key (on the session lease)
//	ns+"n/"+key                           the version key of the counted name key
//
// The length in a queue key makes the queue of one key never a prefix of
// another's; an inbox has no white space, so the space after it ends it.

func (p *Provider) recordKey(key string) string { return p.ns + "r/" + key }

func (p *Provider) queuePrefix(key string) string {
	return p.ns + "q/" + strconv.Itoa(len(key)) + "/" + key + "/"
}

func (p *Provider) entryKey(key, owner string) string { return p.queuePrefix(key) + owner }

func (p *Provider) listenPrefix(inbox string) string { return p.ns + "l/" + inbox + " " }

func (p *Provider) mailPrefix(inbox string) string { return p.ns + "m/" + inbox + " " }

func (p *Provider) grantMail(inbox, owner, key string) string {
	return p.mailPrefix(inbox) + "g " + owner + " " + key
}

func (p *Provider) graceMail(inbox string, token uint64, key string) string {
	return p.mailPrefix(inbox) + "e " + strconv.FormatUint(token, 10) + " " + key
}

type mvccKV = mvccpb.KeyValue

// stored is a record as the provider keeps it: the value
//
//	"1 <owner> <token> <ended 0|1> <since ms> <ttl ms> <written ms>"
//
// A token of 0 in the value stands for the revision of the write that
// stored it, the grant's (see (*stored).value); a later write of the same
// record (a renewal) spells the token out. since and written are Unix
// milliseconds by the clock of the process that wrote them; ttl is the TTL
// asked for, which the record's lease (whole seconds) is at least.
type stored struct {
	owner   string
	token   uint64
	ended   bool
	since   int64
	ttl     int64
	written int64

	mod   int64            // ModRevision of the key
	lease clientv3.LeaseID // the record's lease
}

// value encodes s; a zero token is written as 0, "this write's revision".
func (s *stored) value() string {
	ended := "0"
	if s.ended {
		ended = "1"
	}
	return "1 " + s.owner + " " + strconv.FormatUint(s.token, 10) + " " + ended + " " +
		strconv.FormatInt(s.since, 10) + " " + strconv.FormatInt(s.ttl, 10) + " " + strconv.FormatInt(s.written, 10)
}

// parseStored decodes a record's key-value; ok is false for a value that is
// not a record.
func parseStored(kv *mvccKV) (s stored, ok bool) {
	f := strings.Split(string(kv.Value), " ")
	if len(f) != 7 || f[0] != "1" || check.Owner(f[1]) != nil || (f[3] != "0" && f[3] != "1") {
		return stored{}, false
	}
	var err [5]error
	s.owner = f[1]
	s.token, err[0] = strconv.ParseUint(f[2], 10, 64)
	s.ended = f[3] == "1"
	s.since, err[1] = strconv.ParseInt(f[4], 10, 64)
	s.ttl, err[2] = strconv.ParseInt(f[5], 10, 64)
	s.written, err[3] = strconv.ParseInt(f[6], 10, 64)
	for _, e := range err {
		if e != nil {
			return stored{}, false
		}
	}
	if s.ttl <= 0 {
		return stored{}, false
	}
	if s.token == 0 {
		s.token = uint64(kv.ModRevision)
	}
	s.mod, s.lease = kv.ModRevision, clientv3.LeaseID(kv.Lease)
	return s, true
}

// overdueTTL is the TTL reported for a record that should have expired by
// the reader's clock and is still there (etcd checks its leases every
// 500ms, a new leader extends them all, clocks differ): a waiter that reads
// it looks again that soon, not at once, nor a poll interval later.
const overdueTTL = 100 * time.Millisecond

// record returns s as a lock.Record read at now: its TTL is what its lease
// has left, by the reader's clock against the writer's (the lease's whole
// seconds, or minTTL, the server's minimum, if longer, from when it was
// written), or overdueTTL when that has run out.
func (s *stored) record(now time.Time, minTTL time.Duration) lock.Record {
	return lock.Record{
		Owner:       s.owner,
		Token:       s.token,
		GracePeriod: s.ended,
		TTL:         leaseLeft(s.written, s.ttl, now, minTTL),
		Since:       time.UnixMilli(s.since),
	}
}

// leaseLife is how long the lease of a key asked to live ttl milliseconds
// lives: its whole seconds, or minTTL, the server's minimum, if longer.
func leaseLife(ttl int64, minTTL time.Duration) time.Duration {
	return max(time.Duration(leaseSeconds(time.Duration(ttl)*time.Millisecond))*time.Second, minTTL)
}

// leaseLeft is what the lease of a key written at written (Unix ms, by the
// writer's clock), asked to live ttl milliseconds, has left at now, by the
// reader's clock: overdueTTL once that has run out.
func leaseLeft(written, ttl int64, now time.Time, minTTL time.Duration) time.Duration {
	life := leaseLife(ttl, minTTL)
	left := time.UnixMilli(written).Add(life).Sub(now).Truncate(time.Millisecond)
	if left <= 0 {
		left = overdueTTL
	}
	return min(left, life)
}

// entry is a waiter in a key's queue: the value "<ttl ms> <inbox>".
type entry struct {
	owner  string
	inbox  string
	ttl    time.Duration
	mod    int64
	create int64 // its place: entries are served by create revision
}

func entryValue(w lock.Wait) string {
	return strconv.FormatInt(max(w.TTL.Milliseconds(), 1), 10) + " " + w.Inbox
}

// parseEntry decodes the entry at kv under prefix; ok is false for a value
// that is not an entry, which the provider then leaves alone.
func parseEntry(prefix string, kv *mvccKV) (e entry, ok bool) {
	ms, inbox, found := strings.Cut(string(kv.Value), " ")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !found || err != nil || n <= 0 || inbox == "" {
		return entry{}, false
	}
	owner, _ := strings.CutPrefix(string(kv.Key), prefix)
	return entry{owner: owner, inbox: inbox, ttl: time.Duration(n) * time.Millisecond, mod: kv.ModRevision, create: kv.CreateRevision}, true
}

// queueRead is how many entries a state reads from the front of a queue
// (all of them for Finish): a release serves the first whose inbox is
// listened to, and skips at most this many that are not.
const queueRead = 16

// state is what one method call knows about a key, read at one revision:
// its record, the front of its queue, and which inboxes nobody listens to.
type state struct {
	rev    int64   // the revision it was read at; 0 for a guess (see Provider.guess)
	rec    *stored // nil when the key holds no record
	recMod int64   // the record key's ModRevision; 0 when there is none
	bad    string  // the value under the record key, when it is not a record
	queue  []entry // the front of the queue, in arrival order
	total  int64   // entries in the whole queue
	own    *entry  // the caller's own entry, when asked for and present
	mail   int64   // the revision of the grant message sent to the caller, when asked for and present
	deaf   map[string]bool
	// counted says, when asked for, that the key's counted name holds a
	// claim or a waiter (any key under its prefix), of kind (empty for a
	// name stored before kinds): a lock's grant of the free key is refused
	// then (see change.noCounted).
	counted bool
	kind    lock.Kind
}

// reads says what a state is read with.
type reads struct {
	owner   string // the caller whose own entry is read; none when empty
	inbox   string // with owner: the caller's inbox, whose grant message is read
	full    bool   // the whole queue rather than its front
	counted bool   // the first key of the key's counted name (see state.counted)
}

// ops returns the reads of st's parts for key, then one count of the
// listeners of each inbox in heard.
func (p *Provider) ops(key string, r reads, heard []string) []clientv3.Op {
	q := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if !r.full {
		q = append(q, clientv3.WithLimit(queueRead))
	}
	ops := []clientv3.Op{clientv3.OpGet(p.recordKey(key)), clientv3.OpGet(p.queuePrefix(key), q...)}
	if r.owner != "" {
		ops = append(ops, clientv3.OpGet(p.entryKey(key, r.owner)))
		if r.inbox != "" {
			ops = append(ops, clientv3.OpGet(p.grantMail(r.inbox, r.owner, key), clientv3.WithKeysOnly()))
		}
	}
	if r.counted {
		ops = append(ops, clientv3.OpGet(p.namePrefix(key), clientv3.WithPrefix(), clientv3.WithLimit(1)))
	}
	return append(ops, p.listenCounts(heard)...)
}

// parse builds the state of key from the replies to ops(key, r, heard), read
// at rev.
func (p *Provider) parse(key string, rev int64, r reads, heard []string, res []*pb.ResponseOp) *state {
	st := &state{rev: rev}
	if kvs := res[0].GetResponseRange().Kvs; len(kvs) > 0 {
		st.recMod = kvs[0].ModRevision
		if s, ok := parseStored(kvs[0]); ok {
			st.rec = &s
		} else {
			st.bad = string(kvs[0].Value)
		}
	}
	prefix := p.queuePrefix(key)
	q := res[1].GetResponseRange()
	st.total = q.Count
	for _, kv := range q.Kvs {
		if e, ok := parseEntry(prefix, kv); ok {
			st.queue = append(st.queue, e)
		}
	}
	i := 2
	if r.owner != "" {
		if kvs := res[2].GetResponseRange().Kvs; len(kvs) > 0 {
			if e, ok := parseEntry(prefix, kvs[0]); ok {
				st.own = &e
			}
		}
		i = 3
		if r.inbox != "" {
			st.mail = firstMod(res[3])
			i = 4
		}
	}
	if r.counted {
		if kvs := res[i].GetResponseRange().Kvs; len(kvs) > 0 {
			st.counted, st.kind = true, p.kindOf(key, kvs[0])
		}
		i++
	}
	st.deaf = deafOf(heard, res[i:])
	return st
}

// listenCounts returns one count of the listeners of each inbox in heard
// (see deafOf).
func (p *Provider) listenCounts(heard []string) []clientv3.Op {
	ops := make([]clientv3.Op, len(heard))
	for i, inbox := range heard {
		ops[i] = clientv3.OpGet(p.listenPrefix(inbox), clientv3.WithPrefix(), clientv3.WithCountOnly())
	}
	return ops
}

// firstMod returns the ModRevision of the first key of the reply to a
// read, 0 when it found none.
func firstMod(res *pb.ResponseOp) int64 {
	if kvs := res.GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0].ModRevision
	}
	return 0
}

// deafOf tells, of each inbox in heard, whether nobody listens to it, from
// counts, the replies to the counts of their listeners in the same order;
// nil when heard is empty.
func deafOf(heard []string, counts []*pb.ResponseOp) map[string]bool {
	var deaf map[string]bool
	for j, inbox := range heard {
		if deaf == nil {
			deaf = map[string]bool{}
		}
		deaf[inbox] = counts[j].GetResponseRange().Count == 0
	}
	return deaf
}

// place returns how many entries are before the caller's own entry, as
// far as st knows: -1 when its entry is not among those read.
func (st *state) place(owner string) int {
	for i, e := range st.queue {
		if e.owner == owner {
			return i
		}
	}
	return -1
}
