//go:build go1.24

package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

// Issue 31, item 4: a program that imports the library runs under Go's
// FIPS 140-3 mode (GODEBUG=fips140=only), which panics on SHA-1: nothing
// hashes the Redis scripts when the package is initialized (their digests
// are the server's, from SCRIPT LOAD), nor when a RedisFence is made (this
// package's fencedSet is made in a package variable).

// TestFIPS140Only runs itself again in a test binary with
// GODEBUG=fips140=only, where the package's initialization must not panic,
// and there takes locks on memory and on the real Redis (without Wait, with
// a waiter handed the lock, after SCRIPT FLUSH) and writes through a
// RedisFence, including a stale write it refuses. miniredis is not used
// there: it hashes the scripts it is sent with SHA-1 itself.
func TestFIPS140Only(t *testing.T) {
	if !testenv.FIPS140Only(t) {
		return
	}
	ctx := ctxTimeout(t, 20*time.Second)
	t.Run("memory", func(t *testing.T) {
		fipsLocks(t, ctx, lock.NewMemoryProvider(), nil)
	})
	t.Run("redis", func(t *testing.T) {
		rc := realRedis(t)
		servers.DeleteAtEnd(t, rc, testenv.Pattern(t)) // every key written holds the test's name: counters, fence, data
		fipsLocks(t, ctx, lock.NewRedisProvider(rc), rc)
	})
}

// fipsLocks takes and hands on locks on p; with rc (the Redis of p), it also
// does so after the server forgot its scripts, and fences writes.
func fipsLocks(t *testing.T, ctx context.Context, p lock.Provider, rc redis.UniversalClient) {
	c := newClient(t, p, lock.WithPrefix(uniqueName(t)+":"))
	first, second := testenv.HandOn(t, ctx, c, "fips")
	require.NoError(t, second.Release(ctx))
	if rc == nil {
		return
	}

	require.NoError(t, rc.ScriptFlush(ctx).Err())
	_, second = testenv.HandOn(t, ctx, c, "fips")
	defer func() { require.NoError(t, second.Release(ctx)) }()

	fence, data, log := fenceKeys(t)
	n, err := fencedSet.Run(ctx, rc, fence, second.Token(), []string{data, log}, "second").Int()
	require.NoError(t, err, "the holder's fenced write")
	assert.Equal(t, 1, n)
	require.NoError(t, rc.ScriptFlush(ctx).Err())
	err = fencedSet.Run(ctx, rc, fence, first.Token(), []string{data, log}, "first").Err()
	assert.ErrorIs(t, err, lock.ErrStaleToken, "a stale holder's fenced write, after SCRIPT FLUSH")
	assert.Equal(t, "second", rc.Get(ctx, data).Val())
}
