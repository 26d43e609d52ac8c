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
	// Owner is the holder's acquisition id (see [Lock.Owner]); empty when the
	// lock is free.
	Owner string `json:"owner,omitempty"`
	// Identity is the identity of the holder's Client ([WithIdentity]), when
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
	// closed until Until ([Options.GracePeriod] or OncePer).
	GracePeriod bool `json:"grace_period,omitempty"`
	// Waiters is the number of acquisitions queued for the lock.
	Waiters int `json:"waiters,omitempty"`
	// Kind says what it is, when it is not a plain lock: "semaphore" or
	// "rwmutex" for a Semaphore or an [RWMutex] as a whole (Limit its permits
	// or readers, Used the weight held, Holders and Queue its holds and
	// waiters); for one of their holds or waiters, "permit" (a Semaphore's:
	// Weight permits), "reader" or "writer" (an RWMutex's), Of then the
	// name of the Semaphore or RWMutex and Limit its permits or readers;
	// "role" for an election's role (Campaign, Lead), Of then its own name.
	// Empty for a plain lock, and for a free one.
	Kind   string `json:"kind,omitempty"`
	Of     string `json:"of,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Weight int    `json:"weight,omitempty"`
	Used   int    `json:"used,omitempty"`
	// Holders and Queue are a Semaphore's or an [RWMutex]'s holds, in the
	// order they were granted, and waiters, in arrival order (Owner,
	// Identity, Kind, Weight; a hold's Token, Since and Until).
	Holders []Status `json:"holders,omitempty"`
	Queue   []Status `json:"queue,omitempty"`
	// Err is set by List alone, for a key that holds something other than a
	// record: a *RecordError. The other fields but Name and Key are then
	// empty.
	Err error `json:"-"`
}

// Free reports whether nobody holds the name: no lock holder, and no grace
// period (a lock in one has an Owner, its last holder, and GracePeriod
// set), and, for a Semaphore or an [RWMutex], no hold.
func (s Status) Free() bool { return s.Owner == "" && s.Used == 0 }

// Inspect returns who holds the lock called name, since when and until
// when, without changing anything. A free lock has an empty Owner. A name
// in use as a Semaphore or an [RWMutex] (held or waited for: a name is one
// [Kind] at a time) is returned as one, with the kind its store keeps
// (Kind "semaphore" or "rwmutex"), its holds and its queue.
func (c *Client) Inspect(ctx context.Context, name string) (Status, error) {
	key, err := c.checkName(name)
	if err != nil {
		return Status{}, err
	}
	rec, err := c.provider.Inspect(ctx, key)
	if err != nil {
		return Status{}, c.failed(ctx, "inspect", key, err)
	}
	if rec.Owner != "" {
		return status(name, key, rec, time.Now()), nil
	}
	s, err := c.inspectCounted(ctx, name, key)
	if err != nil || s.Limit > 0 {
		return s, err
	}
	return status(name, key, rec, time.Now()), nil
}

// inspectCounted returns the Status of the Semaphore or [RWMutex] called
// name, whose key is key: Limit 0 when it holds nothing.
func (c *Client) inspectCounted(ctx context.Context, name, key string) (Status, error) {
	cs, err := c.provider.InspectClaims(ctx, key)
	if err != nil {
		return Status{Name: name, Key: key}, c.failed(ctx, "inspect", key, err)
	}
	return countedStatus(name, key, cs, time.Now()), nil
}

// countedStatus makes the Status of the counted name whose claims are cs,
// read at now.
func countedStatus(name, key string, cs Claims, now time.Time) Status {
	s := Status{Name: name, Key: key, Limit: cs.Limit, Waiters: len(cs.Queue)}
	for i, rec := range cs.Holders {
		h := status(name, key, rec, now)
		h.Weight = cs.Weights[i]
		if h.Kind == "writer" && h.Weight < cs.Limit {
			h.Kind = "reader" // downgraded
		}
		s.Used += h.Weight
		s.Holders = append(s.Holders, h)
	}
	for _, q := range cs.Queue {
		w := status(name, key, Record{Owner: q.Owner}, now)
		w.Weight = q.Weight
		s.Queue = append(s.Queue, w)
	}
	s.Kind = string(cs.Kind)
	for _, h := range append(s.Holders, s.Queue...) {
		// A name stored without its kind (before kinds were): its
		// holders' tags tell it.
		switch {
		case s.Kind != "":
		case h.Kind == "permit":
			s.Kind = string(KindSemaphore)
		case h.Kind == "reader", h.Kind == "writer":
			s.Kind = string(KindRWMutex)
		}
	}
	return s
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
			s.Limit, s.Used, s.Waiters = max(s.Limit, rec.Limit), rec.Used, rec.Waiters
			if rec.Kind.counted() {
				s.Kind = string(rec.Kind)
			}
		}
		locks = append(locks, s)
		return true
	})
	if err != nil {
		return nil, false, c.failed(ctx, "list", c.prefix, err)
	}
	// A Semaphore or an RWMutex is read whole: its holds and its queue.
	for i, s := range locks {
		if s.Err == nil && s.Owner == "" && s.Limit > 0 {
			if cs, err := c.inspectCounted(ctx, s.Name, s.Key); err == nil && cs.Limit > 0 {
				locks[i] = cs
			}
		}
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
// Its [LostError] says [LostRemoved], or [LostTaken] when another owner took the
// lock meanwhile. The release is logged at warning level and emitted as
// [EventForceReleased].
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
		c.announce(ctx, key, Notice{}) // for Observe
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
	s.Owner, s.Token, s.Since, s.GracePeriod, s.Waiters = rec.Owner, rec.Token, rec.Since, rec.GracePeriod, rec.Waiters
	s.Identity = identityOf(rec.Owner)
	if rec.TTL > 0 {
		s.Until = now.Add(rec.TTL)
	}
	s.Kind, s.Of, s.Limit = partOf(name, rec.Owner)
	return s
}

// PartOf returns what the hold under key, held (or asked for) by owner, is
// part of, as [Status.Kind], Of and Limit say: "permit", "reader" or
// "writer", with the name of the Semaphore or [RWMutex] and its number of
// permits or readers; "role" for an election's role; empty for a plain
// lock. It reads the name between
// the key's braces (see [Client.Key]) and the owner's last characters, so
// that an Event (Key, Owner) can be told apart as a Status can; it calls
// nothing. (A write hold that Downgrade made a read hold keeps the
// writer's owner: its events say "writer".)
func PartOf(key, owner string) (kind, of string, limit int) {
	i := strings.IndexByte(key, '{')
	j := strings.LastIndexByte(key, '}')
	if i < 0 || j < i {
		return "", "", 0
	}
	return partOf(key[i+1:j], owner)
}

// partOf returns what the hold of the name called name, held by owner, is
// part of: see [Status.Kind], from the tag that ends the holder's owner (see
// parseTag). It does not allocate.
func partOf(name, owner string) (kind, of string, limit int) {
	tag, n, ok := parseTag(owner)
	if !ok {
		return "", "", 0
	}
	switch {
	case tag == tagRole && n == 1:
		return "role", name, 0
	case tag == tagPermit:
		return "permit", name, n
	case tag == tagReader:
		return "reader", name, n
	case tag == tagWriter:
		return "writer", name, n
	}
	return "", "", 0
}
