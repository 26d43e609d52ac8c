package lock

import (
	"context"
	"strconv"
	"time"
)

// Provider stores lock records and the queues of their waiters. It is the one
// contract every backend implements, all of it: the Client builds waiting,
// renewal, grace periods and events on the first seven methods, and Inspect,
// List and ForceRelease on the last three; a
// wrapper that embeds a Provider (for logging or metrics) passes every one on.
//
// A key holds at most one record. Every method is atomic with respect to the
// others on the same key, on every process that shares the backend.
type Provider interface {
	// Acquire stores a new record for owner under key, with a fresh fencing token
	// and the given time to live, when the key holds no record. It returns the
	// record that holds the key after the call: the new one when it was stored,
	// otherwise the existing one, left unchanged, with its remaining TTL. When the
	// existing record is owner's own and not ended (an earlier attempt whose reply
	// was lost), its TTL is reset to ttl and it is returned. The caller holds the
	// lock iff the returned record's Owner is owner and Finished is false.
	//
	// A stored value that is not a record yields a *RecordError.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error)

	// Queue is Acquire for a caller that waits. When the key is held (and not
	// ended), the caller joins the key's wait queue, or keeps its place in it,
	// and the returned record has Queued set. A queued caller is handed the
	// lock by the Release that frees it, in arrival order: the provider stores
	// a record for the caller with w.TTL and tells w.Inbox (see Listen). A
	// free key is taken by the caller unless others are queued and w.Look is
	// LookFair or LookAgain: then the first of them is served, and the caller
	// queues behind it. (A key is free while others are queued only after its
	// record expired. A caller that takes it then with LookFirst or LookJoin
	// may, on release, free it rather than hand it on; the waiters' next
	// look, LookAgain, serves the first of them.)
	Queue(ctx context.Context, key string, w Waiter) (Record, error)

	// Leave takes owner out of key's wait queue. If the lock was handed to
	// owner meanwhile, Leave releases it as Release does. Nothing else
	// changes; a key without owner in its queue is not an error.
	Leave(ctx context.Context, key string, w Waiter) error

	// Listen calls deliver, until stop is called, with every Grant addressed
	// to inbox after Listen returns, and with a Grant without Key when grants
	// may have been lost (a broken connection, reopened): every waiter of the
	// inbox should then look again. deliver must not block. stop waits until
	// deliver is no longer running.
	Listen(ctx context.Context, inbox string, deliver func(Grant)) (stop func(), err error)

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
	// told with a Grant without Owner. It returns a *LostError when the key
	// holds no record, another owner's, or an ended one, and changes nothing
	// then.
	Finish(ctx context.Context, key, owner string, ttl time.Duration) error

	// Inspect returns the record under key without changing anything: Owner
	// is empty when the key is free. TTL is the time the record has left,
	// Since when it was granted, and Waiters the number of callers in the
	// key's wait queue. A stored value that is not a record yields a
	// *RecordError.
	Inspect(ctx context.Context, key string) (Record, error)

	// List calls fn, in no set order, with each key that starts with prefix
	// and holds a record, and the record as Inspect returns it, until fn
	// returns false or every key was seen; err is a *RecordError for a key
	// whose value is not a record. The backend's own companion keys (the Redis
	// provider's fencing counters and queues) are not keys of records. A key
	// taken or freed while List runs may be seen or not. List returns the
	// first error that stopped it.
	List(ctx context.Context, prefix string, fn func(key string, r Record, err error) bool) error

	// ForceRelease deletes the record under key whoever holds it, held or in
	// a grace period, as its owner's Release would: the first caller in the
	// key's wait queue is handed the lock. It returns the record it removed,
	// with an empty Owner when the key was free. The holder finds out at its
	// next renewal (a *LostError). A stored value that is not a record is left
	// as it is and yields a *RecordError.
	ForceRelease(ctx context.Context, key string) (Record, error)
}

// Waiter describes a waiting caller to Provider.Queue and Provider.Leave.
type Waiter struct {
	// Owner identifies the acquisition, as in Provider.Acquire.
	Owner string
	// TTL is the time to live of a record stored for Owner.
	TTL time.Duration
	// Inbox names where the provider delivers the Grant of a lock handed to
	// Owner from the queue (see Provider.Listen); one Client has one inbox.
	// It has no white space.
	Inbox string
	// Look says which request of the wait this is.
	Look Look
}

// Look says which request of a wait a Provider.Queue call makes.
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
	// fair wait may use it too), and otherwise does as LookFirst.
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

// Grant is a message from a provider to a waiter's inbox: the lock under Key
// was handed to Owner from the queue, with Token and TTL, or, with no Owner,
// the lock under Key entered a grace period and its waiters should look
// again; with no Key, every waiter of the inbox should look again.
type Grant struct {
	Key   string
	Owner string
	Token uint64
	TTL   time.Duration
}

// Record is the state stored under a key.
type Record struct {
	// Owner identifies one acquisition (one invocation, one Acquire call).
	// Empty when the key is free, and when a Queue call joined a queue
	// without reading the record.
	Owner string
	// Token is the fencing token of the grant: strictly greater than the token of
	// every earlier grant of the same key by the same backend.
	Token uint64
	// Finished is true during a grace period: the holder has finished
	// (Provider.Finish) and the key stays closed until the record expires.
	Finished bool
	// TTL is the time the record had left to live when it was read; zero when the
	// provider does not know. A record still there reports at least 1ms (in
	// its last millisecond, too).
	TTL time.Duration
	// Queued is set by Queue when the caller is in the key's wait queue.
	Queued bool
	// Position is the caller's place in the queue when Queued: 0 for the
	// first waiter.
	Position int
	// Since is when the record was granted, by the clock of the process (or,
	// where the backend says so, the server) whose call granted it,
	// truncated to the millisecond; zero when the key is free.
	Since time.Time
	// Waiters is the number of callers in the key's wait queue, as Inspect
	// and List read it; zero from the other methods.
	Waiters int
}

// Limits on keys and owners, checked before anything is sent to a provider.
const (
	// MaxKeyLen is the longest key (prefix and name) accepted, in bytes.
	MaxKeyLen = 1024
	// MaxOwnerLen is the longest owner accepted, in bytes.
	MaxOwnerLen = 128
)

// The checks of every provider's arguments, the same for every backend: a
// provider calls them before it sends anything, so that bad input fails
// with ErrInvalidArgument and changes nothing. A backend may refuse more,
// after these (the PostgreSQL provider refuses text that is not valid
// UTF-8, the etcd provider a TTL longer than an etcd lease).

// CheckKey checks a key: not empty, at most MaxKeyLen bytes.
func CheckKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty lock name")
	case len(key) > MaxKeyLen:
		return invalidf("lock key is %d bytes, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

// hasSpace reports whether s has white space in it, or, with comma, a comma.
func hasSpace(s string, comma bool) bool {
	for i := 0; i < len(s); i++ {
		if s[i] > ',' { // above every byte looked for
			continue
		}
		switch s[i] {
		case ' ', '\t', '\r', '\n', '\v', '\f':
			return true
		case ',':
			if comma {
				return true
			}
		}
	}
	return false
}

// CheckOwner checks an owner: not empty, at most MaxOwnerLen bytes, without
// a comma or white space.
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("empty owner")
	case len(owner) > MaxOwnerLen:
		return invalidf("owner is %d bytes, more than %d", len(owner), MaxOwnerLen)
	case hasSpace(owner, true):
		return invalidf("owner %q contains a comma or white space", owner)
	}
	return nil
}

// CheckTTL checks a time to live: at least a millisecond.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalidf("ttl %v is less than 1ms", ttl)
	}
	return nil
}

// CheckKeyOwner checks the key and owner of Release: CheckKey, then
// CheckOwner.
func CheckKeyOwner(key, owner string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckOwner(owner)
}

// CheckArgs checks the arguments of the methods that set a TTL (Acquire,
// Renew, Finish): CheckKeyOwner, then CheckTTL.
func CheckArgs(key, owner string, ttl time.Duration) error {
	if err := CheckKeyOwner(key, owner); err != nil {
		return err
	}
	return CheckTTL(ttl)
}

// CheckWaiter checks the arguments of Queue and Leave: CheckArgs of the key
// and the waiter's owner and TTL, then CheckInbox of its inbox.
func CheckWaiter(key string, w Waiter) error {
	if err := CheckArgs(key, w.Owner, w.TTL); err != nil {
		return err
	}
	return CheckInbox(w.Inbox)
}

// CheckInbox checks an inbox: not empty, at most MaxKeyLen bytes, without
// white space.
func CheckInbox(inbox string) error {
	switch {
	case inbox == "":
		return invalidf("empty inbox")
	case len(inbox) > MaxKeyLen:
		return invalidf("inbox is %d bytes, more than %d", len(inbox), MaxKeyLen)
	case hasSpace(inbox, false):
		return invalidf("inbox %q contains white space", inbox)
	}
	return nil
}
