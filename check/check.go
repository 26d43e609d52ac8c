// Package check holds the checks of a lock.Provider's arguments, for the
// author of a backend. They are the same for every backend: a provider
// calls them before it sends anything, so that bad input fails with an
// error matching lock.ErrInvalidArgument and changes nothing. Each
// Provider method's arguments are checked by one function here, or by
// lock.Wait.Check and lock.Claim.Check for a waiter's and a claim's. A
// backend may refuse more after these (the PostgreSQL provider refuses text
// that is not valid UTF-8, the etcd provider a TTL longer than an etcd
// lease), with an error made by [Invalidf].
package check

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalidArgument is the lock package's ErrInvalidArgument, which every
// check's error matches.
var ErrInvalidArgument = errors.New("lock: invalid argument")

// Limits on keys, owners and counted names; the lock package has them under
// the same names.
const (
	// MaxKeyLen is the longest key (prefix and name) accepted, in bytes.
	MaxKeyLen = 1024
	// MaxOwnerLen is the longest owner accepted, in bytes.
	MaxOwnerLen = 128
	// MaxLimit is the largest limit of a counted name: the most permits of
	// a Semaphore, and readers of an RWMutex.
	MaxLimit = 1024
)

// Invalidf returns an error matching [ErrInvalidArgument] that says what is
// wrong, as fmt.Sprintf(format, args...) formats it.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// Key checks a key: not empty, at most [MaxKeyLen] bytes.
func Key(key string) error {
	switch {
	case key == "":
		return Invalidf("empty lock name")
	case len(key) > MaxKeyLen:
		return Invalidf("lock key is %d bytes, more than %d", len(key), MaxKeyLen)
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

// Owner checks an owner: not empty, at most [MaxOwnerLen] bytes, without a
// comma or white space.
func Owner(owner string) error { return word("owner", owner, MaxOwnerLen, true) }

// TTL checks a time to live: at least a millisecond.
func TTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return Invalidf("ttl %v is less than 1ms", ttl)
	}
	return nil
}

// Inbox checks an inbox: not empty, at most [MaxKeyLen] bytes, without
// white space.
func Inbox(inbox string) error { return word("inbox", inbox, MaxKeyLen, false) }

// word checks s, what the error calls what: not empty, at most max bytes,
// without white space, nor, with comma, a comma.
func word(what, s string, max int, comma bool) error {
	switch {
	case s == "":
		return Invalidf("empty %s", what)
	case len(s) > max:
		return Invalidf("%s is %d bytes, more than %d", what, len(s), max)
	case !hasSpace(s, comma):
		return nil
	case comma:
		return Invalidf("%s %q contains a comma or white space", what, s)
	}
	return Invalidf("%s %q contains white space", what, s)
}

// KeyOwner checks the arguments of Release and ReleaseClaim (and
// LowerClaim's, with [Weight]): [Key], then [Owner].
func KeyOwner(key, owner string) error {
	if err := Key(key); err != nil {
		return err
	}
	return Owner(owner)
}

// Args checks the arguments of the methods that set a TTL (Acquire, Renew,
// Finish, RenewClaim): [KeyOwner], then [TTL].
func Args(key, owner string, ttl time.Duration) error {
	if err := KeyOwner(key, owner); err != nil {
		return err
	}
	return TTL(ttl)
}

// Weight checks the weight of LowerClaim: at least 1, at most [MaxLimit].
func Weight(weight int) error {
	if weight < 1 || weight > MaxLimit {
		return Invalidf("weight %d, not between 1 and %d", weight, MaxLimit)
	}
	return nil
}

// Fence checks the name and token of an advance of a fence (see the lock
// package's SQLFence.Advance): an empty name, a name that is not valid
// UTF-8 or holds a NUL byte, and a token of 0 or above math.MaxInt64 (the
// column is a bigint) are refused.
func Fence(name string, token uint64) error {
	switch {
	case name == "":
		return Invalidf("empty fence name")
	case !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0:
		return Invalidf("fence name %q is not valid UTF-8 without NUL bytes", name)
	case token == 0:
		return Invalidf("fencing token 0 (no grant has it)")
	case token > math.MaxInt64:
		return Invalidf("fencing token %d is above the bigint column's maximum", token)
	}
	return nil
}
