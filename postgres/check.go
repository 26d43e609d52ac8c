package postgres

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// The checks of every provider (package check, lock.Wait.Check...), and one
// more: text must be valid UTF-8 without NUL bytes, which PostgreSQL cannot
// store in a text column. Each check below is the check of the same name,
// then checkText on the strings it took.

// checkText refuses what a text column cannot hold.
func checkText(what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return check.Invalidf("%s %q is not valid UTF-8", what, s)
	case strings.IndexByte(s, 0) >= 0:
		return check.Invalidf("%s %q contains a NUL byte", what, s)
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
	if err := check.Key(key); err != nil {
		return err
	}
	return checkText("lock key", key)
}

func checkInbox(inbox string) error {
	if err := check.Inbox(inbox); err != nil {
		return err
	}
	return checkText("inbox", inbox)
}

func checkKeyOwner(key, owner string) error {
	if err := check.KeyOwner(key, owner); err != nil {
		return err
	}
	return checkTexts(key, owner, "")
}

func checkArgs(key, owner string, ttl time.Duration) error {
	if err := check.Args(key, owner, ttl); err != nil {
		return err
	}
	return checkTexts(key, owner, "")
}

func checkWait(key string, w lock.Wait) error {
	if err := w.Check(key); err != nil {
		return err
	}
	return checkTexts(key, w.Owner, w.Inbox)
}
