package lock

import (
	"errors"
	"fmt"
	"strings"
)

// Fencing tokens on Redis.
//
// Tokens come from counters that never expire, one per Redis Cluster hash
// slot and key prefix: the lock under key K takes its token from the counter
// of K's slot, P{t}:fence, where t is the slot's tag (slotTag: a tag that
// Redis hashes to the slot) and P the text of K before its hash tag ("lock:"
// for the keys of a Client with the default prefix). So a script touches
// keys of one slot only, the counter moves with its slot when a Cluster
// migrates it, and a database holds at most 16,384 counters per prefix
// (about 1.5 MB), however many names were ever locked. Nothing else a lock
// writes outlives it: its record goes with its release or its TTL, its queue
// with its last waiter. A counted name (a Semaphore's, an RWMutex's) takes
// its tokens in blocks (one token for its new keys, then twice the last
// block, up to 1,024: one INCRBY each) and grants them in turn, keeping its
// place in the block in its hash (see fresh in scripts/claim.lua): its
// tokens strictly increase like a lock's, and are above every token the
// counter gave before the block was taken, every lock's of the same key
// before the name included; no lock of the key is granted while the block
// lasts (it lasts as long as the name's keys, and so its mark: see
// countedMark), and a lock's after it is above the block. The unused rest of a block
// is skipped when the name's keys go, so a name takes at most twice the
// tokens it grants: the counter stays behind the clock (see below) as long
// as the slot grants fewer than half a million tokens a second.
//
// A counter starts, when it is created, at the server's clock in
// microseconds plus tokenBase, and is only incremented afterwards. The clock
// is read at that moment only: at the first grant in a slot, and after the
// counter was lost (a restart without persistence, FLUSHALL, a failover to a
// replica that never had it). A counter that exists never reads it. So tokens
// of a name strictly increase across any number of grants, across restarts
// that keep the data, and across slot migrations; after the data was lost,
// they increase as long as the server's clock is later than it was when the
// lost counter was created plus one microsecond per token it gave. A clock
// stepped back by more than that, at the moment a lost counter is made anew,
// can repeat tokens.

// tokenBase is added to the clock when a counter is created: every token of
// this version is at least 2^52, above every token of versions before 0.2.0,
// which started their per-name counters at the clock in microseconds (below
// 2^52 until the year 2112). Tokens stay below 2^53, which Redis's Lua
// numbers hold exactly, until then too.
const tokenBase = 1 << 52

// ErrIncompatible is matched by the error of an acquisition that found its
// lock held through a version of this library before 0.2.0, whose fencing
// tokens come from per-name counters: the two would not keep tokens
// increasing, so they must not share a Redis (see MIGRATING.md).
var ErrIncompatible = errors.New("lock: held by a process of lock before v0.2.0, which must not share this Redis")

// checkVersion reports a live record of key granted by a version before
// 0.2.0 (its token is below tokenBase). An ended record (a grace period)
// is left to run its course.
func checkVersion(key string, rec Record) error {
	if rec.Owner == "" || rec.GracePeriod || rec.Token >= tokenBase {
		return nil
	}
	return fmt.Errorf("%w: %q has token %d (owner %s)", ErrIncompatible, key, rec.Token, rec.Owner)
}

// fenceKey returns the fencing counter of the lock whose record Redis stores
// under record (see recordKey): P{t}:fence, P the text of key before its
// hash tag, or [DefaultPrefix] for a key without one.
func fenceKey(key, record string) string {
	prefix := DefaultPrefix
	if record == key { // key has a hash tag
		prefix = key[:strings.IndexByte(key, '{')]
	}
	var tag [10]byte
	t := appendSlotTag(tag[:0], slotOf(record))
	var b strings.Builder
	b.Grow(len(prefix) + len(t) + len("{}:fence"))
	b.WriteString(prefix)
	b.WriteByte('{')
	b.Write(t)
	b.WriteString("}:fence")
	return b.String()
}

// counterCorrupt begins the error of a script whose fencing counter holds
// something else than an integer, followed by what it holds (see
// scripts/token.lua).
const counterCorrupt = "LOCKCORRUPT "
