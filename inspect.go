package lock

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Status is a lock as Inspect, List or ForceRelease found it.
type Status struct {
	// Name is the lock's name; Key its key (the Client's prefix and the name).
	Name string `json:"name"`
	Key  string `json:"key"`
	// Owner is the holder's acquisition id (see Lock.Owner); empty when the
	// lock is free.
	Owner string `json:"owner,omitempty"`
	// Identity is the identity of the holder's Client (WithIdentity), when
	// it set one: the owner's text before its last "/".
	Identity string `json:"identity,omitempty"`
	// Token is the fencing token of the grant.
	Token uint64 `json:"token,omitempty"`
	// Since is when the lock was granted, by the clock of the process whose
	// call granted it (the server's, for a backend that says so).
	Since time.Time `json:"since"`
	// Until is when the record expires unless its holder renews it: this
	// process's clock when it read the record, plus the record's TTL.
	Until time.Time `json:"until"`
	// GracePeriod is true when the holder has finished and the lock stays
	// closed until Until (Options.GracePeriod or OncePer).
	GracePeriod bool `json:"grace_period,omitempty"`
	// Waiters is the number of acquisitions queued for the lock.
	Waiters int `json:"waiters,omitempty"`
	// Kind says what the lock is part of, when it is one of the locks a
	// Semaphore or an RWMutex is made of (its holder's owner says so):
	// "permit" (a Semaphore's), "reader" (a reader's share of an RWMutex),
	// "writer" (an RWMutex's writer, at its gate: writing, or waiting for
	// the readers to leave), "gate" (a caller entering: taking permits or a
	// reader's share, or waiting for them); "role" for an election's role
	// (Campaign, Lead), Of then its own name. Empty for a plain lock, and
	// for a free one. Of is then the name of the Semaphore or RWMutex, and
	// Limit its number of permits or of readers.
	Kind  string `json:"kind,omitempty"`
	Of    string `json:"of,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// Err is set by List alone, for a key that holds something other than a
	// record: a *RecordError. The other fields but Name and Key are then
	// empty.
	Err error `json:"-"`
}

// Free reports whether the lock can be taken now: nobody holds it, and it
// is in no grace period (a lock in one has an Owner, its last holder, and
// GracePeriod set).
func (s Status) Free() bool { return s.Owner == "" }

// Inspect returns who holds the lock called name, since when and until
// when, without changing anything. A free lock has an empty Owner.
func (c *Client) Inspect(ctx context.Context, name string) (Status, error) {
	key, err := c.checkName(name)
	if err != nil {
		return Status{}, err
	}
	rec, err := c.provider.Inspect(ctx, key)
	if err != nil {
		return Status{}, c.failed(ctx, "inspect", key, err)
	}
	return status(name, key, rec, time.Now()), nil
}

// List returns the locks under the Client's prefix that are held or in a
// grace period, sorted by name: at most limit of them, and whether there
// were more (those listed are then the first the provider found, not the
// first by name). A key under the prefix that holds something other than a
// record is listed with Err set. The provider reads the locks one by one
// (the Redis provider with SCAN, on every primary of a Cluster), so a lock
// taken or freed meanwhile may be listed or not.
func (c *Client) List(ctx context.Context, limit int) (locks []Status, more bool, err error) {
	if limit <= 0 {
		return nil, false, invalidf("list limit %d is not positive", limit)
	}
	now := time.Now()
	err = c.provider.List(ctx, c.prefix, func(key string, rec Record, err error) bool {
		name, ok := c.nameOf(key)
		if !ok {
			return true // not a key of this Client's
		}
		if len(locks) == limit {
			more = true
			return false
		}
		s := Status{Name: name, Key: key, Err: err}
		if err == nil {
			s = status(name, key, rec, now)
		}
		locks = append(locks, s)
		return true
	})
	if err != nil {
		return nil, false, c.failed(ctx, "list", c.prefix, err)
	}
	slices.SortFunc(locks, func(a, b Status) int { return strings.Compare(a.Name, b.Name) })
	return locks, more, nil
}

// ForceRelease frees the lock called name whoever holds it, held or in a
// grace period, and returns the record it removed (Waiters is not counted
// there): the first waiter, if one is queued, is handed the lock. It is for
// operators (a holder that hangs, a window to cut short), not for normal
// work: the holder is told its lock is lost only at its next renewal
// (within a third of its lease) or its release, and may act on the resource
// until then; its fencing token tells the resource which grant is newer.
// Its LostError says LostRemoved, or LostTaken when another owner took the
// lock meanwhile. The release is logged at warning level and emitted as
// EventForceReleased.
func (c *Client) ForceRelease(ctx context.Context, name string) (Status, error) {
	key, err := c.checkName(name)
	if err != nil {
		return Status{}, err
	}
	rec, err := c.provider.ForceRelease(ctx, key)
	if err != nil {
		return Status{}, c.failed(ctx, "force release", key, err)
	}
	s := status(name, key, rec, time.Now())
	if !s.Free() {
		c.log.Warn("lock: forced release", "key", key, "owner", s.Owner, "token", s.Token, "since", s.Since)
		c.emit(Event{Kind: EventForceReleased, Key: key, Owner: s.Owner, Token: s.Token})
	}
	return s, nil
}

// status makes the Status of rec, read at now.
func status(name, key string, rec Record, now time.Time) Status {
	s := Status{Name: name, Key: key}
	if rec.Owner == "" {
		return s
	}
	s.Owner, s.Token, s.Since, s.GracePeriod, s.Waiters = rec.Owner, rec.Token, rec.Since, rec.Finished, rec.Waiters
	if i := strings.LastIndexByte(rec.Owner, '/'); i > 0 {
		s.Identity = rec.Owner[:i]
	}
	if rec.TTL > 0 {
		s.Until = now.Add(rec.TTL)
	}
	s.Kind, s.Of, s.Limit = partOf(name, rec.Owner)
	return s
}

// PartOf returns what the lock under key, held (or asked for) by owner, is
// part of, as Status.Kind, Of and Limit say: "permit", "reader", "writer" or
// "gate", with the name of the Semaphore or RWMutex and its number of
// permits or readers; "role" for an election's role; empty for a plain
// lock. It reads the name between
// the key's braces (see Client.Key) and the owner's last characters, so
// that an Event (Key, Owner) can be told apart as a Status can; it calls
// nothing.
func PartOf(key, owner string) (kind, of string, limit int) {
	i := strings.IndexByte(key, '{')
	j := strings.LastIndexByte(key, '}')
	if i < 0 || j < i {
		return "", "", 0
	}
	return partOf(key[i+1:j], owner)
}

// partOf returns what the lock called name, held by owner, is part of: see
// Status.Kind, from the tag that ends the holder's owner (see parseTag). It
// does not allocate.
func partOf(name, owner string) (kind, of string, limit int) {
	j := strings.LastIndexByte(name, '#')
	tag, n, ok := parseTag(owner)
	if ok && tag == tagRole && n == 1 {
		return "role", name, 0
	}
	if j <= 0 || !ok {
		return "", "", 0
	}
	of, slot := name[:j], name[j+1:]
	switch {
	case slot == "gate" && tag == tagWriter:
		return "writer", of, n
	case slot == "gate" && (tag == tagPermit || tag == tagReader):
		return "gate", of, n
	case tag == tagPermit && isSlot(slot, n):
		return "permit", of, n
	case tag == tagReader && len(slot) > 1 && slot[0] == 'r' && isSlot(slot[1:], n):
		return "reader", of, n
	}
	return "", "", 0
}

// isSlot reports whether s is a slot's number below n, written as
// strconv.Itoa writes it.
func isSlot(s string, n int) bool {
	k, ok := number(s)
	return ok && k < n && (s[0] != '0' || len(s) == 1)
}

// number returns the value of s, decimal digits only (at most 9 of them),
// and whether it is one.
func number(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}
