package lock

import (
	"context"
	"strconv"
	"time"

	"github.com/seed05627090/lock/check"
)

// Provider stores lock records, the counted names of semaphores and
// read-write locks, and the queues of their waiters. It is the one
// contract every backend implements, all of it: the Client builds waiting,
// renewal, grace periods and events on Acquire, Queue, Leave, Listen,
// Release, Renew and Finish; [Client.Observe] on Watch and Notify;
// [Client.Inspect], [Client.List] and [Client.ForceRelease] on Inspect,
// List and ForceRelease; and Semaphore and [RWMutex] on the claim methods
// (AcquireClaim to InspectClaims). A wrapper that embeds a Provider (for
// logging or metrics) passes every one on.
//
// A key holds at most one record, and is one [Kind] at a time: a lock (an
// election's role is one too) or a counted name, never both. Every method
// is atomic with respect to the others on the same key, on every process
// that shares the backend.
//
// Every method returns once its ctx ends, with ctx's error when the store
// had not answered, whatever the store does (refuses, never answers,
// answers late): the Client bounds its callers by their deadlines on that.
// A request that ctx cut short may still be applied; the Client cleans up
// after it, and what is left expires with its TTL. The Redis provider sends
// such a call from a goroutine of its own when its client would wait past
// the context (go-redis without ContextTimeoutEnabled); faults.Deadlines in
// this repository checks a provider behind a proxy that plays each fault.
type Provider interface {
	// Acquire stores a new record for owner under key, with a fresh fencing token
	// and the given time to live, when the key holds no record. It returns the
	// record that holds the key after the call: the new one when it was stored,
	// otherwise the existing one, left unchanged, with its remaining TTL. When the
	// existing record is owner's own and not ended (an earlier attempt whose reply
	// was lost), its TTL is reset to ttl and it is returned. The caller holds the
	// lock iff the returned record's Owner is owner and GracePeriod is false.
	//
	// A key in use as a counted name (see [Kind]) is not a lock's to take:
	// Acquire changes nothing then, and returns a Record whose Kind is the
	// name's and whose Owner is empty.
	//
	// A stored value that is not a record yields a *RecordError.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error)

	// Queue is Acquire for a caller that waits. When the key is held (and not
	// ended), the caller joins the key's wait queue, or keeps its place in it,
	// and the returned record has Queued set. A queued caller is handed the
	// lock by the Release that frees it, in arrival order: the provider stores
	// a record for the caller with w.TTL and tells w.Inbox (see Listen). A
	// free key is taken by the caller unless others are queued and w.Look is
	// [LookFair] or [LookAgain]: then the first of them is served, and the caller
	// queues behind it. (A key is free while others are queued only after its
	// record expired. A caller that takes it then with [LookFirst] or [LookJoin]
	// may, on release, free it rather than hand it on; the waiters' next
	// look, LookAgain, serves the first of them.)
	//
	// Nor does Queue take, or queue for, a key in use as a counted name: it
	// returns the Record Acquire does then. (A LookJoin that joins the key's
	// queue without reading the record may queue the caller; its next look
	// is refused.)
	Queue(ctx context.Context, key string, w Wait) (Record, error)

	// Leave takes owner out of key's wait queue. If the lock was handed to
	// owner meanwhile, Leave releases it as Release does. Nothing else
	// changes; a key without owner in its queue is not an error.
	Leave(ctx context.Context, key string, w Wait) error

	// Listen calls deliver, until stop is called, with every Notice addressed
	// to inbox after Listen returns, and with a Notice without Key when grants
	// may have been lost (a broken connection, reopened): every waiter of the
	// inbox should then look again. deliver must not block. stop waits until
	// deliver is no longer running.
	Listen(ctx context.Context, inbox string, deliver func(Notice)) (stop func(), err error)

	// Watch calls deliver, until stop is called, with every Notice that
	// Notify sends to key after Watch returns, from any process sharing
	// the backend, and with a Notice without Key when notices may have been
	// lost (a broken connection, reopened): the watcher should then read
	// the key again. deliver must not block. stop waits until deliver is
	// no longer running. Several Watches of one key each get every Notice.
	// Watches are apart from the inboxes of Listen: [Client.Observe] hears a
	// role's changes on one, and a key nobody watches costs nothing.
	Watch(ctx context.Context, key string, deliver func(Notice)) (stop func(), err error)

	// Notify sends n to every Watch of key: a Notice with Owner says that
	// Owner holds key's record, with Token and TTL; one without Owner, that
	// the record may have ended. n.Key is key. It is a message only: nothing
	// stored changes, and a Notice nobody watches for is lost.
	Notify(ctx context.Context, key string, n Notice) error

	// Release deletes the record under key if owner holds it, or hands it to
	// the first caller in the key's wait queue (see Queue). It returns a
	// *LostError when the key holds no record or another owner's, and
	// changes nothing then.
	Release(ctx context.Context, key, owner string) error

	// Renew sets the TTL of owner's live record under key to ttl. It returns
	// a *LostError when the key holds no record, another owner's, or an
	// ended one, and changes nothing then.
	Renew(ctx context.Context, key, owner string, ttl time.Duration) error

	// Finish marks owner's live record under key ended, for ttl: the holder
	// has finished, and the key stays closed to every acquirer until the TTL
	// runs out (a grace period). The key's waiters leave its queue and are
	// told with a Notice without Owner. It returns a *LostError when the key
	// holds no record, another owner's, or an ended one, and changes nothing
	// then.
	Finish(ctx context.Context, key, owner string, ttl time.Duration) error

	// Inspect returns the record under key without changing anything: Owner
	// is empty when the key is free. TTL is the time the record has left,
	// Since when it was granted, and Waiters the number of callers in the
	// key's wait queue. A key in use as a counted name holds no record:
	// Owner is empty (InspectClaims reads the name). A stored value that is
	// not a record yields a *RecordError.
	Inspect(ctx context.Context, key string) (Record, error)

	// List calls fn, in no set order, with each key that starts with prefix
	// and holds a record, and the record as Inspect returns it, until fn
	// returns false or every key was seen; err is a *RecordError for a key
	// whose value is not a record. The backend's own companion keys (the Redis
	// provider's fencing counters and queues) are not keys of records. A
	// counted name that holds claims or waiters is listed too, with a Record
	// whose Limit and Kind are set (see [Record.Limit]; its TTL is the
	// longest a live claim has left). A key taken or freed while List runs
	// may be seen or not. List returns the first error that stopped it.
	List(ctx context.Context, prefix string, fn func(key string, r Record, err error) bool) error

	// ForceRelease deletes the record under key whoever holds it, held or in
	// a grace period, as its owner's Release would: the first caller in the
	// key's wait queue is handed the lock. It returns the record it removed,
	// with an empty Owner when the key was free, or in use as a counted name
	// (which it leaves as it is). The holder finds out at its
	// next renewal (a *LostError). A stored value that is not a record is left
	// as it is and yields a *RecordError.
	ForceRelease(ctx context.Context, key string) (Record, error)

	// The counted names: a name with a limit, holding claims, each with its
	// owner, weight, lease and fencing token, whose weights add up to at
	// most the limit (a Semaphore's permits, an RWMutex's readers, a
	// writer claiming them all). A counted name has a kind (a Semaphore's
	// or an RWMutex's: see [Kind]) and a limit, those of the call that made
	// it: its first claim or waiter. It is in use from then until it holds
	// no claim and no waiter; a provider may count it in use a while
	// longer, until it notices that its last claims and waiters expired
	// (the Redis provider: until its keys expire, up to a quarter of a
	// claim's TTL after the last claim's deadline, and 75 s after a
	// waiter's last look, or a quarter more than its QueueTTL when that is
	// longer than a minute). A key in use as a counted name holds no lock
	// (see Acquire), and AcquireClaim and QueueClaim do not make a counted
	// name of a key whose lock record exists, held or in a grace period:
	// they change nothing then, and return a Record with Kind [KindLock],
	// Owner the record's holder and GracePeriod set in a grace period (Limit
	// and Used 0). Each of these checks is atomic with the call's own
	// work, so that two callers racing never make a key both kinds. Each
	// call below is atomic, as the lock's are, and judges expiry by the
	// store's clock: a claim whose TTL has run out is gone for every call,
	// which frees its weight (see QueueClaim for what a freed weight does).

	// AcquireClaim takes c for owner c.Owner when it fits: the weights of
	// the live claims and c.Weight add up to at most c.Limit, and nobody
	// is queued for key. A taken claim lives c.TTL, with a fresh fencing
	// token from the counters of the locks: strictly greater than every
	// earlier claim's and lock's of key (docs/holds.md, "Tokens of counted
	// names", says which may share one). When c.Owner holds a live claim
	// already (an earlier attempt whose reply was lost), its TTL is reset
	// to c.TTL and it is returned as it is.
	//
	// The returned Record says what the name holds after the call: Owner
	// is c.Owner, with the claim's Token, TTL and Since, when c.Owner
	// holds a claim; otherwise Owner and Token are those of a live claim
	// (the one that expires first, or another when the provider cannot
	// tell which without reading every claim, as Redis may) and TTL is at
	// most the time left to the live claim that expires first: a waiter
	// that looks again then finds any weight its expiry freed (all empty
	// when none is live). Limit and Kind are the name's, and Used the
	// weight its live claims hold. While a name holds a claim or a waiter,
	// its limit and kind are the ones they gave; a call with another
	// c.Limit or c.Kind changes nothing (but the expiry and serving that
	// every call does), and its Record has the stored Limit and Kind (the
	// caller reports the mismatch). c.Inbox and c.Look are not read.
	AcquireClaim(ctx context.Context, key string, c Claim) (Record, error)

	// QueueClaim is AcquireClaim for a caller that waits: when c does not
	// fit, or others are queued for key, the caller joins key's queue of
	// claims, or keeps its place in it, and the returned Record has Queued
	// and Position set. The queue is served in arrival order, by every
	// call that frees weight (ReleaseClaim, LeaveClaim, LowerClaim, and any
	// call that finds a claim expired): the head is granted while it fits,
	// then the next, and so on; a head that does not fit yet is never
	// overtaken. Each caller granted from the queue gets a claim of its
	// own weight, with its c.TTL, and a Notice with its Weight on its inbox
	// (see Listen); a waiter whose inbox nobody listens to may be skipped.
	// QueueClaim serves the queue first, so that it may grant the caller
	// itself (and tell it, too). c.Look is as in [Wait], for a provider
	// that wants it; a claim is never granted past a queued caller.
	//
	// The caller's entry lasts c.QueueTTL after the call: a waiter that
	// does not ask again by then (its process died, or stalled) is gone
	// from the queue for every call after that, as if it had left, and
	// the waiters behind it are served without it; its next QueueClaim
	// joins the queue at the back. A queued caller behind the head is told
	// in HeadTTL when the head's entry runs out, so that it looks again
	// then (see [Record.HeadTTL]).
	QueueClaim(ctx context.Context, key string, c Claim) (Record, error)

	// LeaveClaim takes c.Owner out of key's queue of claims, and serves
	// the queue (the callers behind it may fit now). If a claim was
	// granted to c.Owner meanwhile, LeaveClaim releases it as ReleaseClaim
	// does. A key without c.Owner in its queue is not an error.
	LeaveClaim(ctx context.Context, key string, c Claim) error

	// RenewClaim sets the TTL of owner's live claim under key to ttl. It
	// returns a *LostError when owner holds no live claim there, and
	// changes nothing then.
	RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error

	// ReleaseClaim deletes owner's live claim under key and serves the
	// queue with the weight freed. It returns a *LostError when owner
	// holds no live claim there, and changes nothing then. An operator may
	// call it with an owner that InspectClaims shows: the holder finds out
	// at its next renewal.
	ReleaseClaim(ctx context.Context, key, owner string) error

	// LowerClaim sets the weight of owner's live claim under key to weight
	// when that is less than its weight (never more), keeping its token
	// and TTL, and serves the queue with the weight freed (an [RWMutex]'s
	// writer that becomes a reader lets the readers behind it in). It
	// returns a *LostError when owner holds no live claim there, and
	// changes nothing then.
	LowerClaim(ctx context.Context, key, owner string, weight int) error

	// InspectClaims returns the live claims and the queue of the counted
	// name key, without changing anything; a name that holds neither has
	// Limit 0 and no Kind.
	InspectClaims(ctx context.Context, key string) (Claims, error)
}

// Claim describes a claim on a counted name to [Provider.AcquireClaim],
// QueueClaim and LeaveClaim, and a waiter of its queue to InspectClaims.
type Claim struct {
	// Owner identifies the claim (one hold), as a lock's owner does.
	Owner string
	// Weight is how much of the limit the claim takes: 1 to Limit.
	Weight int
	// Limit is the name's limit: 1 to [MaxLimit].
	Limit int
	// Kind is the name's kind: [KindSemaphore] or [KindRWMutex].
	Kind Kind
	// TTL is the claim's time to live.
	TTL time.Duration
	// Inbox and Look are a waiter's, as in [Wait].
	Inbox string
	Look  Look
	// QueueTTL is, for QueueClaim, how long the caller's queue entry lasts
	// if the caller does not ask again (see [Provider.QueueClaim]); zero
	// means [DefaultQueueTTL] (cmp.Or(c.QueueTTL, DefaultQueueTTL)). A
	// provider may keep it longer, by the step of its TTLs (etcd's whole
	// seconds). The other methods do not read it.
	QueueTTL time.Duration
}

// DefaultQueueTTL is how long a waiter's queue entry lasts after its last
// QueueClaim when its Claim gives no QueueTTL.
const DefaultQueueTTL = time.Minute

// Claims is a counted name as [Provider.InspectClaims] found it.
type Claims struct {
	// Limit and Kind are the name's; 0 and empty when it holds no claim
	// and no waiter.
	Limit int
	Kind  Kind
	// Holders are the live claims, in the order they were granted: Owner,
	// Token, TTL (the time left) and Since of each in its Record, and its
	// weight in Weights at the same index.
	Holders []Record
	Weights []int
	// Queue is the waiters, in arrival order: Owner, Weight, Limit, Kind,
	// TTL and Inbox as they asked.
	Queue []Claim
}

// Wait describes a waiting caller to [Provider.Queue] and [Provider.Leave].
type Wait struct {
	// Owner identifies the acquisition, as in [Provider.Acquire].
	Owner string
	// TTL is the time to live of a record stored for Owner.
	TTL time.Duration
	// Inbox names where the provider delivers the Notice of a lock handed to
	// Owner from the queue (see [Provider.Listen]); one Client has one inbox.
	// It has no white space.
	Inbox string
	// Look says which request of the wait this is.
	Look Look
}

// Look says which request of a wait a [Provider.Queue] call makes.
type Look int

const (
	// LookFirst is the first request: a free key is taken, a held one
	// queued for.
	LookFirst Look = iota
	// LookFair is the first request of a fair wait: a free key goes to the
	// first queued caller, if any, before this one.
	LookFair
	// LookJoin is a first request for a key that was busy lately: the
	// provider may look for a queue to join first (in arrival order, so a
	// fair wait may use it too), and otherwise does as [LookFirst].
	LookJoin
	// LookAgain is a later request of the same wait, after a wake-up or a
	// timeout: the caller may still be in the queue, and keeps its place; a
	// free key goes to the first queued caller.
	LookAgain
)

func (l Look) String() string {
	switch l {
	case LookFirst:
		return "first"
	case LookFair:
		return "fair"
	case LookJoin:
		return "join"
	case LookAgain:
		return "again"
	}
	return "Look(" + strconv.Itoa(int(l)) + ")"
}

// Notice is news of who holds a key, from a provider to those listening
// (an inbox, see [Provider.Listen]; a Watch, see [Provider.Notify]). With
// Owner, Owner holds Key now: the lock, with Token and TTL (handed over
// from the queue, or the holder a Notify names), or a claim of Weight on
// the counted name Key. Without Owner, Key's holder may have changed (a
// grace period began, a record ended): look at Key again. Without Key,
// news may have been lost (a connection reopened): look at every key
// again.
type Notice struct {
	Key    string
	Owner  string
	Token  uint64
	TTL    time.Duration
	Weight int // of a claim; 0 for a lock
}

// Record is a key as a Provider call found or left it: the lock record
// stored under it (Owner, Token, GracePeriod, TTL, Since) or the counted
// name's state (Limit, Used, Kind); for the caller of Queue or QueueClaim,
// its place in the key's queue (Queued, Position, HeadTTL); for Inspect
// and List, the queue's length (Waiters).
type Record struct {
	// Owner identifies one acquisition (one invocation, one Acquire call).
	// Empty when the key is free, and when a Queue call joined a queue
	// without reading the record.
	Owner string
	// Token is the fencing token of the grant: strictly greater than the token of
	// every earlier grant of the same key by the same backend.
	Token uint64
	// GracePeriod is true during a grace period: the holder has finished
	// ([Provider.Finish]) and the key stays closed until the record expires.
	GracePeriod bool
	// TTL is the time the record had left to live when it was read; zero when the
	// provider does not know. A record still there reports at least 1ms (in
	// its last millisecond, too).
	TTL time.Duration
	// Queued is set by Queue when the caller is in the key's wait queue.
	Queued bool
	// Position is the caller's place in the queue when Queued: 0 for the
	// first waiter.
	Position int
	// HeadTTL is set by QueueClaim when the caller is queued behind the
	// head of the queue and the provider read the head's entry: the time
	// that entry has left (see [Claim.QueueTTL]), at least 1ms. If the
	// head's waiter has not asked again by then, a look then finds it gone
	// and the queue served without it. Zero otherwise.
	HeadTTL time.Duration
	// Since is when the record was granted, by the clock of the process (or,
	// where the backend says so, the server) whose call granted it,
	// truncated to the millisecond; zero when the key is free.
	Since time.Time
	// Waiters is the number of callers in the key's wait queue, as Inspect
	// and List read it; zero from the other methods.
	Waiters int
	// Limit and Used are a counted name's limit and the weight its live
	// claims hold, as the claim methods and List read them (List reports
	// a counted name that holds claims or waiters with Limit set, and
	// Owner, Token, GracePeriod and Since empty); zero for a lock.
	Limit, Used int
	// Kind says what the key is in use as, in a Record of a counted name
	// and in a refusal for the kind (see [Kind]): the name's kind in the
	// Records of the claim methods and of List, beside Limit; [KindLock] in
	// the Record of an AcquireClaim or QueueClaim refused because the key
	// holds a lock's record; a counted name's kind in the Record of a
	// lock's Acquire or Queue refused because the key is in use as one
	// (Owner empty). Empty in every other Record of a lock.
	Kind Kind
}

// Limits on keys, owners and counted names, checked before anything is
// sent to a provider (package [check] has the checks).
const (
	// MaxKeyLen is the longest key (prefix and name) accepted, in bytes.
	MaxKeyLen = check.MaxKeyLen
	// MaxOwnerLen is the longest owner accepted, in bytes.
	MaxOwnerLen = check.MaxOwnerLen
	// MaxLimit is the largest limit of a counted name: the most permits of
	// a Semaphore, and readers of an [RWMutex].
	MaxLimit = check.MaxLimit
)

// Check checks the arguments of Queue and Leave, as every provider does
// first (see package [check]): [check.Args] of key and w's owner and TTL,
// then [check.Inbox] of its inbox.
func (w Wait) Check(key string) error {
	if err := check.Args(key, w.Owner, w.TTL); err != nil {
		return err
	}
	return check.Inbox(w.Inbox)
}

// Check checks the arguments of AcquireClaim, as every provider does first
// (see package [check]): [check.Args] of key and c's owner and TTL, a Limit
// from 1 to [MaxLimit], a Weight from 1 to Limit, a QueueTTL that is not
// negative, and a Kind of a counted name ([KindSemaphore] or
// [KindRWMutex]). QueueClaim and LeaveClaim check [check.Inbox] of c.Inbox
// too.
func (c Claim) Check(key string) error {
	if err := check.Args(key, c.Owner, c.TTL); err != nil {
		return err
	}
	switch {
	case c.Limit < 1 || c.Limit > MaxLimit:
		return invalidf("limit %d, not between 1 and %d", c.Limit, MaxLimit)
	case c.Weight < 1 || c.Weight > c.Limit:
		return invalidf("weight %d, not between 1 and the limit %d", c.Weight, c.Limit)
	case c.QueueTTL < 0:
		return invalidf("queue ttl %v is negative", c.QueueTTL)
	case !c.Kind.counted():
		return invalidf("claim kind %q, not %q or %q", c.Kind, KindSemaphore, KindRWMutex)
	}
	return nil
}
