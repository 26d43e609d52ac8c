package etcd

import (
	"fmt"
	"time"

	"github.com/seed05627090/lock"
)

// The checks of the root package (lock.CheckKey and the others), combined
// for each method, and one more: a TTL must fit an etcd lease.

// maxLeaseSeconds is the longest lease etcd grants (lease.MaxLeaseTTL).
const maxLeaseSeconds = 9_000_000_000

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lock.ErrInvalidArgument}, args...)...)
}

// checkLease refuses a TTL longer than etcd's longest lease.
func checkLease(ttl time.Duration) error {
	if leaseSeconds(ttl) > maxLeaseSeconds {
		return invalidf("ttl %v is longer than etcd's longest lease (%d s)", ttl, maxLeaseSeconds)
	}
	return nil
}

// firstErr returns the first error of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkKeyOwner checks a key and an owner (Release and the claims').
func checkKeyOwner(key, owner string) error {
	return firstErr(lock.CheckKey(key), lock.CheckOwner(owner))
}

// checkArgs checks a key, an owner and a TTL, which must fit a lease.
func checkArgs(key, owner string, ttl time.Duration) error {
	return firstErr(checkKeyOwner(key, owner), lock.CheckTTL(ttl), checkLease(ttl))
}

// checkWaiter is checkArgs of the key and the waiter's owner and TTL, then
// lock.CheckInbox of its inbox.
func checkWaiter(key string, w lock.Waiter) error {
	return firstErr(checkArgs(key, w.Owner, w.TTL), lock.CheckInbox(w.Inbox))
}
