package postgres

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seed05627090/lock"
)

// The checks of the root package's providers, with the same rules (they are
// not exported there), and one more: text must be valid UTF-8 without NUL
// bytes, which PostgreSQL cannot store in a text column.

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lock.ErrInvalidArgument}, args...)...)
}

// checkText refuses what a text column cannot hold.
func checkText(what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return invalidf("%s %q is not valid UTF-8", what, s)
	case strings.IndexByte(s, 0) >= 0:
		return invalidf("%s %q contains a NUL byte", what, s)
	}
	return nil
}

func checkKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty lock name")
	case len(key) > lock.MaxKeyLen:
		return invalidf("lock key is %d bytes, more than %d", len(key), lock.MaxKeyLen)
	}
	return checkText("lock key", key)
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("empty owner")
	case len(owner) > lock.MaxOwnerLen:
		return invalidf("owner is %d bytes, more than %d", len(owner), lock.MaxOwnerLen)
	case strings.ContainsAny(owner, ", \t\r\n\v\f"):
		return invalidf("owner %q contains a comma or white space", owner)
	}
	return checkText("owner", owner)
}

func checkTTL(ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalidf("ttl %v is less than 1ms", ttl)
	}
	return nil
}

// checkKeyOwner validates the key and owner every method but Listen takes.
func checkKeyOwner(key, owner string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return checkOwner(owner)
}

// checkArgs validates the arguments of the methods that set a TTL.
func checkArgs(key, owner string, ttl time.Duration) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	return checkTTL(ttl)
}

// checkWaiter validates the arguments of Queue and Leave.
func checkWaiter(key string, w lock.Waiter) error {
	if err := checkArgs(key, w.Owner, w.TTL); err != nil {
		return err
	}
	return checkInbox(w.Inbox)
}

func checkInbox(inbox string) error {
	switch {
	case inbox == "":
		return invalidf("empty inbox")
	case len(inbox) > lock.MaxKeyLen:
		return invalidf("inbox is %d bytes, more than %d", len(inbox), lock.MaxKeyLen)
	case strings.ContainsAny(inbox, " \t\r\n\v\f"):
		return invalidf("inbox %q contains white space", inbox)
	}
	return checkText("inbox", inbox)
}
