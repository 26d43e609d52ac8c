package etcd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed05627090/lock"
)

// A TTL longer than etcd's longest lease is refused by every check that
// takes a TTL, after the root's checks; one that fits passes.
func TestCheckLease(t *testing.T) {
	long := (maxLeaseSeconds + 1) * time.Second
	w := lock.Wait{Owner: "o", TTL: long, Inbox: "i"}
	assert.ErrorIs(t, checkArgs("k", "o", long), lock.ErrInvalidArgument, "checkArgs")
	assert.ErrorIs(t, checkWait("k", w), lock.ErrInvalidArgument, "checkWait")
	assert.ErrorContains(t, checkArgs("k", "o", long), "longer than etcd's longest lease")

	w.TTL = maxLeaseSeconds * time.Second
	assert.NoError(t, checkArgs("k", "o", w.TTL), "the longest lease fits")
	assert.NoError(t, checkWait("k", w), "the longest lease fits")
	assert.ErrorContains(t, checkArgs("", "o", long), "empty lock name", "the root's checks come first")
}
