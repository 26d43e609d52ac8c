package etcd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// List reads page after page (100 records each), with each record's
// waiters, and finds nothing under a prefix that holds no record.
func TestListPages(t *testing.T) {
	ns := testNamespace()
	p := newProvider(t, ns)
	ctx := ctxTimeout(t, time.Minute)
	prefix := uniqueName(t) + "/"
	const n = 250
	for i := range n {
		_, err := p.Acquire(ctx, fmt.Sprintf("%s%03d", prefix, i), newOwner(), time.Minute)
		require.NoError(t, err)
	}
	w := lock.Wait{Owner: newOwner(), TTL: time.Minute, Inbox: "inbox:" + uniqueName(t)}
	_, err := p.Queue(ctx, prefix+"007", w)
	require.NoError(t, err)

	var keys []string
	require.NoError(t, p.List(ctx, prefix, func(key string, r lock.Record, err error) bool {
		assert.NoError(t, err)
		keys = append(keys, key)
		if key == prefix+"007" {
			assert.Equal(t, 1, r.Waiters, "the waiter of %s is counted", key)
		} else {
			assert.Zero(t, r.Waiters, key)
		}
		return true
	}))
	require.Len(t, keys, n, "every record once, across pages")
	for i, k := range keys {
		assert.Equal(t, fmt.Sprintf("%s%03d", prefix, i), k, "in key order")
	}
	calls := 0
	require.NoError(t, p.List(ctx, prefix+"none/", func(string, lock.Record, error) bool { calls++; return true }))
	assert.Zero(t, calls)
}
