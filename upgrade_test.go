package lock_test

import (
	"context"
	_ "embed"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// The acquire script of v0.1.2, which took tokens from a counter per lock
// name (K:fence, an hour), kept to stand for a process of that version.
//
//go:embed testdata/v0.1.2/acquire.lua
var acquireV012 string

// oldAcquire runs v0.1.2's acquire for owner on key, as a process of that
// version would, and reports whether it was granted and the token.
func oldAcquire(t *testing.T, rc redis.UniversalClient, key, owner string) (bool, uint64) {
	t.Helper()
	res, err := redis.NewScript(acquireV012).Run(context.Background(), rc, []string{key, key + ":fence"},
		owner, time.Minute.Milliseconds(), time.Hour.Milliseconds(), time.Now().UnixMilli()).Result()
	require.NoError(t, err)
	if token, ok := res.(int64); ok {
		return true, uint64(token)
	}
	return false, 0
}

// TestUpgradeFromPerNameCounters: a process of v0.1.x and one of this
// version on one Redis never both hold a lock, and this version refuses,
// with ErrIncompatible, a lock it finds held by the old one, instead of
// granting tokens that could go backwards (issue 17: the two must not
// share; MIGRATING.md). Once the old process is gone, tokens continue above
// the old ones.
func TestUpgradeFromPerNameCounters(t *testing.T) {
	for _, b := range backends(t)[1:] { // the Redis backends
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			c := newClient(t, b.replica(t))
			name := uniqueName(t)
			key := c.Key(name)
			t.Cleanup(func() { b.raw.Del(context.Background(), key, key+":fence") })

			// The old version holds it: this one is refused, and says why.
			ok, oldToken := oldAcquire(t, b.raw, key, "o-old")
			require.True(t, ok)
			_, err := c.Acquire(ctx, name, lock.Options{})
			require.ErrorIs(t, err, lock.ErrIncompatible)
			assert.Contains(t, err.Error(), "before v0.2.0")
			_, err = c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: time.Second})
			require.ErrorIs(t, err, lock.ErrIncompatible, "a wait is refused too")
			v, err := b.raw.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, "o-old,"+strconv.FormatUint(oldToken, 10), v[:len("o-old,")+len(strconv.FormatUint(oldToken, 10))],
				"the old holder's record is left as it is")

			// The old holder releases (its record goes); this version's
			// token is above every token of the old counters.
			require.NoError(t, b.raw.Del(ctx, key).Err())
			l, err := c.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			assert.Greater(t, l.Token(), oldToken, "the first token after the old version's is greater")

			// This version holds it: the old version is not granted it.
			ok, _ = oldAcquire(t, b.raw, key, "o-old-2")
			assert.False(t, ok, "the old version's acquire was granted a lock this version holds")
			require.NoError(t, l.Release(ctx))
		})
	}
}
