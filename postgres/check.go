package postgres

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seed05627090/lock"
)

// The checks of the root package (lock.CheckKey and the others), and one
// more: text must be valid UTF-8 without NUL bytes, which PostgreSQL cannot
// store in a text column.

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
	if err := lock.CheckKey(key); err != nil {
		return err
	}
	return checkText("lock key", key)
}

func checkOwner(owner string) error {
	if err := lock.CheckOwner(owner); err != nil {
		return err
	}
	return checkText("owner", owner)
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
	return lock.CheckTTL(ttl)
}

// checkWaiter validates the arguments of Queue and Leave.
func checkWaiter(key string, w lock.Waiter) error {
	if err := checkArgs(key, w.Owner, w.TTL); err != nil {
		return err
	}
	return checkInbox(w.Inbox)
}

func checkInbox(inbox string) error {
	if err := lock.CheckInbox(inbox); err != nil {
		return err
	}
	return checkText("inbox", inbox)
}
