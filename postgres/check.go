package postgres

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seed05627090/lock"
)

// The checks of the root package (lock.CheckArgs and the others), and one
// more: text must be valid UTF-8 without NUL bytes, which PostgreSQL cannot
// store in a text column. Each check below is the root's check of the same
// name, then checkText on the strings it took.

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

// checkTexts is checkText on a key, an owner and an inbox; an empty string
// passes.
func checkTexts(key, owner, inbox string) error {
	if err := checkText("lock key", key); err != nil {
		return err
	}
	if err := checkText("owner", owner); err != nil {
		return err
	}
	return checkText("inbox", inbox)
}

func checkKey(key string) error {
	if err := lock.CheckKey(key); err != nil {
		return err
	}
	return checkText("lock key", key)
}

func checkInbox(inbox string) error {
	if err := lock.CheckInbox(inbox); err != nil {
		return err
	}
	return checkText("inbox", inbox)
}

func checkKeyOwner(key, owner string) error {
	if err := lock.CheckKeyOwner(key, owner); err != nil {
		return err
	}
	return checkTexts(key, owner, "")
}

func checkArgs(key, owner string, ttl time.Duration) error {
	if err := lock.CheckArgs(key, owner, ttl); err != nil {
		return err
	}
	return checkTexts(key, owner, "")
}

func checkWait(key string, w lock.Wait) error {
	if err := lock.CheckWait(key, w); err != nil {
		return err
	}
	return checkTexts(key, w.Owner, w.Inbox)
}
