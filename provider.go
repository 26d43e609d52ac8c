package lock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Provider stores lock records. It is the one contract every backend implements;
// the Client builds waiting, renewal, grace periods and events on top of it.
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
	// lock iff the returned record's Owner is owner and Ended is false.
	//
	// A stored value that is not a record yields a *RecordError.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error)

	// Release deletes the record under key if owner holds it. It returns a
	// *LostError when the key holds no record or another owner's, and changes
	// nothing then. A provider that implements Topic announces the release on it
	// after the record is gone.
	Release(ctx context.Context, key, owner string) error

	// Update sets the TTL of owner's record under key and, when ended is true,
	// marks it ended: the holder has finished, and the key stays closed to every
	// acquirer until the TTL runs out (the grace period). It returns a *LostError
	// when the key holds no record, another owner's, or an ended one, and changes
	// nothing then. A provider that implements Topic announces an update that ends
	// the record on it.
	Update(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error
}

// Transferer is implemented by providers that can pass a held lock straight
// from one owner to another. The Client uses it to hand a contended lock to
// the next waiter in its own process in one round trip, without freeing the
// key in between; without it, the lock is released and the waiter acquires it.
type Transferer interface {
	// Transfer replaces from's live record under key with a record of to's,
	// with a fresh fencing token and the given TTL, and returns it; it
	// announces nothing: the lock never ends. When another owner than to is
	// first in key's wait queue (see Queuer), it releases the record instead,
	// announces that it is that owner's turn, and returns a Record with no
	// Owner. It returns a *LostError when the key holds no record, another
	// owner's, or an ended one, and changes nothing then.
	Transfer(ctx context.Context, key, from, to string, ttl time.Duration) (Record, error)
}

// Queuer is implemented by providers that keep a wait queue per key, so that
// waiters with Options.Fair are granted the lock in arrival order across
// processes. Both built-in providers implement it.
type Queuer interface {
	// AcquireQueued is Acquire in arrival order: a free key is granted only to
	// the first owner of its queue, or to anyone when the queue is empty. With
	// wait > 0, an owner that is not granted the lock joins the back of the
	// queue, or keeps its place, for wait more; owners that stop asking drop
	// out after that. With wait 0 it does not join. A free key that is another
	// owner's turn is returned as a Record with no Owner.
	AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (Record, error)

	// Dequeue takes owner out of key's queue and, when the key is free,
	// announces it, so that the next owner in the queue looks.
	Dequeue(ctx context.Context, key, owner string) error
}

// Record is the state stored under a key.
type Record struct {
	// Owner identifies one acquisition (one invocation, one Acquire call).
	Owner string
	// Token is the fencing token of the grant: strictly greater than the token of
	// every earlier grant of the same key by the same backend.
	Token uint64
	// Ended is true during a grace period: the holder has finished and the key
	// stays closed until the record expires.
	Ended bool
	// TTL is the time the record had left to live when it was read; zero when the
	// provider does not know.
	TTL time.Duration
}

// Limits on keys and owners, checked before anything is sent to a provider.
const (
	// MaxKeyLen is the longest key (prefix and name) accepted, in bytes.
	MaxKeyLen = 1024
	// MaxOwnerLen is the longest owner accepted, in bytes.
	MaxOwnerLen = 128
)

const endedSuffix = ",ended"

// parseRecord decodes a stored value, or reports it as corrupt. A record is
// "owner,token" while held and "owner,token,ended" during a grace period; the
// parse function of scripts/record.lua is the same parser in Lua.
func parseRecord(key, v string) (Record, error) {
	ended := strings.HasSuffix(v, endedSuffix)
	body := strings.TrimSuffix(v, endedSuffix)
	owner, tok, ok := strings.Cut(body, ",")
	if !ok || checkOwner(owner) != nil {
		return Record{}, &RecordError{Key: key, Value: v}
	}
	// 1 to 19 digits without a leading zero, as the Lua parser takes them.
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || token == 0 || len(tok) > 19 || tok[0] == '0' {
		return Record{}, &RecordError{Key: key, Value: v}
	}
	return Record{Owner: owner, Token: token, Ended: ended}, nil
}

func checkKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty lock name")
	case len(key) > MaxKeyLen:
		return invalidf("lock key is %d bytes, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("empty owner")
	case len(owner) > MaxOwnerLen:
		return invalidf("owner is %d bytes, more than %d", len(owner), MaxOwnerLen)
	case strings.ContainsAny(owner, ", \t\r\n\v\f"):
		return invalidf("owner %q contains a comma or white space", owner)
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalidf("ttl %v is less than 1ms", ttl)
	}
	return nil
}

// checkKeyOwner validates the key and owner every provider method takes.
func checkKeyOwner(key, owner string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return checkOwner(owner)
}

// checkArgs validates the arguments of the provider methods that set a TTL.
func checkArgs(key, owner string, ttl time.Duration) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	return checkTTL(ttl)
}
