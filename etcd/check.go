package etcd

import (
	"fmt"
	"time"

	"github.com/seed05627090/lock"
)

// The checks of the root package (lock.CheckKey and the others), and one
// more: a TTL must fit an etcd lease.

// maxLeaseSeconds is the longest lease etcd grants (lease.MaxLeaseTTL).
const maxLeaseSeconds = 9_000_000_000

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lock.ErrInvalidArgument}, args...)...)
}

func checkKeyOwner(key, owner string) error {
	if err := lock.CheckKey(key); err != nil {
		return err
	}
	return lock.CheckOwner(owner)
}

func checkTTL(ttl time.Duration) error {
	if err := lock.CheckTTL(ttl); err != nil {
		return err
	}
	if leaseSeconds(ttl) > maxLeaseSeconds {
		return invalidf("ttl %v is longer than etcd's longest lease (%d s)", ttl, maxLeaseSeconds)
	}
	return nil
}

func checkArgs(key, owner string, ttl time.Duration) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	return checkTTL(ttl)
}

func checkWaiter(key string, w lock.Waiter) error {
	if err := checkArgs(key, w.Owner, w.TTL); err != nil {
		return err
	}
	return lock.CheckInbox(w.Inbox)
}
