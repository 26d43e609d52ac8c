package lock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Issue 22, item 6: a refusal names the holder's identity when its Client set
// one (WithIdentity); an owner without one is a random id, left to Holder.
func TestRefusalNamesTheHoldersIdentity(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		worker := newClient(t, b.replica(t), lock.WithIdentity("worker-1:4242"))
		anonymous := newClient(t, b.replica(t))
		other := newClient(t, b.replica(t))

		name := uniqueName(t)
		l, err := worker.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = other.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner (worker-1:4242)`)
		_, err = other.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 100 * time.Millisecond})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": wait timed out (holder worker-1:4242)`)
		require.NoError(t, l.Release(ctx))

		name = uniqueName(t)
		l, err = anonymous.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		_, err = other.Acquire(ctx, name, lock.Options{})
		assert.EqualError(t, err, `lock: could not acquire "`+l.Key()+`": held by another owner`)
		var na *lock.NotAcquiredError
		if assert.ErrorAs(t, err, &na) {
			assert.Equal(t, l.Owner(), na.Holder, "the owner is in Holder")
		}
		require.NoError(t, l.Release(ctx))
	})
}
