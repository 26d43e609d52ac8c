package etcd

import (
	"time"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// The checks of every provider (package check, lock.Wait.Check...), and one
// more: a TTL must fit an etcd lease.

// maxLeaseSeconds is the longest lease etcd grants (lease.MaxLeaseTTL).
const maxLeaseSeconds = 9_000_000_000

// checkLease refuses a TTL longer than etcd's longest lease.
func checkLease(ttl time.Duration) error {
	if leaseSeconds(ttl) > maxLeaseSeconds {
		return check.Invalidf("ttl %v is longer than etcd's longest lease (%d s)", ttl, maxLeaseSeconds)
	}
	return nil
}

// checkKeyOwner checks a key and an owner (Release and the claims').
var checkKeyOwner = check.KeyOwner

// checkArgs checks a key, an owner and a TTL, which must fit a lease.
func checkArgs(key, owner string, ttl time.Duration) error {
	if err := check.Args(key, owner, ttl); err != nil {
		return err
	}
	return checkLease(ttl)
}

// checkWait checks a key and a waiter, whose TTL must fit a lease.
func checkWait(key string, w lock.Wait) error {
	if err := w.Check(key); err != nil {
		return err
	}
	return checkLease(w.TTL)
}
