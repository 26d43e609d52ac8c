package check_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

func TestChecks(t *testing.T) {
	long := func(n int) string { return strings.Repeat("k", n) }
	for _, c := range []struct {
		name string
		err  error
		ok   bool
	}{
		{"key", check.Key("k"), true},
		{"key of MaxKeyLen", check.Key(long(check.MaxKeyLen)), true},
		{"empty key", check.Key(""), false},
		{"key too long", check.Key(long(check.MaxKeyLen + 1)), false},
		{"owner", check.Owner("host/id-1~r"), true},
		{"owner of MaxOwnerLen", check.Owner(long(check.MaxOwnerLen)), true},
		{"empty owner", check.Owner(""), false},
		{"owner too long", check.Owner(long(check.MaxOwnerLen + 1)), false},
		{"owner with a comma", check.Owner("a,b"), false},
		{"owner with a tab", check.Owner("a\tb"), false},
		{"ttl", check.TTL(time.Millisecond), true},
		{"ttl under 1ms", check.TTL(time.Millisecond - 1), false},
		{"inbox with a comma", check.Inbox("a,b"), true},
		{"empty inbox", check.Inbox(""), false},
		{"inbox with a space", check.Inbox("a b"), false},
		{"inbox too long", check.Inbox(long(check.MaxKeyLen + 1)), false},
		{"key and owner", check.KeyOwner("k", "o"), true},
		{"key and empty owner", check.KeyOwner("k", ""), false},
		{"empty key and owner", check.KeyOwner("", "o"), false},
		{"args", check.Args("k", "o", time.Second), true},
		{"args with a negative ttl", check.Args("k", "o", -time.Second), false},
		{"weight", check.Weight(check.MaxLimit), true},
		{"weight 0", check.Weight(0), false},
		{"weight too high", check.Weight(check.MaxLimit + 1), false},
		{"fence", check.Fence("f", math.MaxInt64), true},
		{"fence without a name", check.Fence("", 1), false},
		{"fence name with a NUL", check.Fence("a\x00", 1), false},
		{"fence name not UTF-8", check.Fence("\xff", 1), false},
		{"fence token 0", check.Fence("f", 0), false},
		{"fence token above bigint", check.Fence("f", math.MaxInt64+1), false},
	} {
		switch {
		case c.ok && c.err != nil:
			t.Errorf("%s: %v, want nil", c.name, c.err)
		case !c.ok && !errors.Is(c.err, lock.ErrInvalidArgument):
			t.Errorf("%s: %v, want an error matching lock.ErrInvalidArgument", c.name, c.err)
		}
	}
}
