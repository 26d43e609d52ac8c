package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestReleaseSkipsAtMost64DeadWaiters: a release hands the lock on past
// waiters whose inbox nobody listens to, but at most 64 of them in one
// script, so that no script runs for as long as a queue is long (issue 21:
// every loop in a script bounded); the key is then left free, and the next
// live waiter's look serves the rest of the queue.
func TestReleaseSkipsAtMost64DeadWaiters(t *testing.T) {
	for _, b := range backends(t)[1:] { // the Redis backends
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p := b.replica(t)
			key := "lock:{" + uniqueName(t) + "}"
			t.Cleanup(func() { b.raw.Del(context.Background(), key, key+":q") })
			holder := newOwner()
			mustAcquire(t, p, key, holder, time.Minute)
			for i := range 100 {
				rec, err := p.Queue(ctx, key, lock.Wait{Owner: "dead-" + strconv.Itoa(i), TTL: time.Minute, Inbox: "nobody-listens-" + strconv.Itoa(i)})
				require.NoError(t, err)
				require.True(t, rec.Queued)
			}
			require.NoError(t, p.Release(ctx, key, holder))
			rec, err := p.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Empty(t, rec.Owner, "no dead waiter holds the lock")
			left, err := b.raw.LLen(ctx, key+":q").Result()
			require.NoError(t, err)
			assert.EqualValues(t, 36, left, "one release skipped 64 dead waiters, no more")

			// A live waiter's look again serves the rest, skipping the dead.
			live := newOwner()
			rec, err = p.Queue(ctx, key, lock.Wait{Owner: live, TTL: time.Minute, Inbox: "nobody-either", Look: lock.LookAgain})
			require.NoError(t, err)
			assert.Equal(t, live, rec.Owner, "the look again took the lock after the dead waiters")
			require.NoError(t, p.Release(ctx, key, live))
		})
	}
}
