package lock

import (
	"context"
	"errors"
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
	// Err is set by List alone, for a key that holds something other than a
	// record: a *RecordError. The other fields but Name and Key are then
	// empty.
	Err error `json:"-"`
}

// Held reports whether the lock is held, or closed for a grace period.
func (s Status) Held() bool { return s.Owner != "" }

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
	if s.Held() {
		c.log.Warn("lock: forced release", "key", key, "owner", s.Owner, "token", s.Token, "since", s.Since)
		c.emit(Event{Kind: EventForceReleased, Key: key, Owner: s.Owner, Token: s.Token})
	}
	return s, nil
}

// checkName returns the key of the lock called name, or why it is refused.
func (c *Client) checkName(name string) (string, error) {
	if name == "" {
		return "", invalidf("empty lock name")
	}
	key := c.Key(name)
	return key, checkKey(key)
}

// failed names the operation and the key of a provider error, as an
// acquisition's does, and remembers it as the provider's last error (see
// lastError) unless it is a context's. ctx is the caller's context, nil
// when the call ran on a context of the library's own: a call that ended
// because the caller's context did is no sign of the provider's health (the
// error does not match ErrUnavailable).
func (c *Client) failed(ctx context.Context, op, key string, err error) error {
	if errors.Is(err, ErrLost) || errors.Is(err, ErrCorruptRecord) || errors.Is(err, ErrInvalidArgument) {
		return err
	}
	ended := isContextErr(err)
	if !ended {
		c.lastErr.Store(&err)
	}
	return &opError{op: op, key: key, err: err, callerEnded: ended && ctx != nil && ctx.Err() != nil}
}

// answered forgets the provider's last error: a call has succeeded.
func (c *Client) answered() {
	if c.lastErr.Load() != nil {
		c.lastErr.Store(nil)
	}
}

// lastError returns the last error a call of c to the provider returned
// since the last success, other than a context's; nil when there is none.
func (c *Client) lastError() error {
	if p := c.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// nameOf returns the name whose key (see Key) is key, and whether key is
// the key of a name under the Client's prefix at all.
func (c *Client) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.prefix)
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", false
	}
	var name string
	if tag, n, ok := strings.Cut(rest[1:], "}("); ok && strings.HasSuffix(n, ")") {
		name = n[:len(n)-1] // a name kept whole after a checksum tag
		if tag != "" && c.Key(name) == key {
			return name, true
		}
	}
	name = strings.TrimSuffix(rest[1:], "}")
	return name, name != "" && c.Key(name) == key
}

// status makes the Status of rec, read at now.
func status(name, key string, rec Record, now time.Time) Status {
	s := Status{Name: name, Key: key}
	if rec.Owner == "" {
		return s
	}
	s.Owner, s.Token, s.Since, s.GracePeriod, s.Waiters = rec.Owner, rec.Token, rec.Since, rec.Ended, rec.Waiters
	if i := strings.LastIndexByte(rec.Owner, '/'); i > 0 {
		s.Identity = rec.Owner[:i]
	}
	if rec.TTL > 0 {
		s.Until = now.Add(rec.TTL)
	}
	return s
}
