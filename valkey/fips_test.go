package valkey_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	lockvalkey "github.com/seed05627090/lock/valkey"
)

// TestFIPS140Only runs itself again in a test binary with
// GODEBUG=fips140=only (Go's FIPS 140-3 mode, which panics on SHA-1), and
// there hands a lock to a waiter, again after the server forgot its scripts
// (SCRIPT FLUSH), and writes through a Fence, a stale write included:
// neither this package nor valkey-go hashes a script in this process (the
// digests are the server's).
func TestFIPS140Only(t *testing.T) {
	if !testenv.FIPS140Only(t) {
		return
	}
	ctx := ctxTimeout(t, 20*time.Second)
	cleanKeys(t)
	rc := newValkey(t)
	c := newClient(t, lockvalkey.NewProvider(rc), lock.WithPrefix(uniqueName(t)+":"))
	_, second := testenv.HandOn(t, ctx, c, "fips")
	require.NoError(t, second.Release(ctx))

	require.NoError(t, rc.Do(ctx, rc.B().ScriptFlush().Build()).Error())
	first, second := testenv.HandOn(t, ctx, c, "fips")
	defer func() { require.NoError(t, second.Release(ctx)) }()

	tag := "{" + uniqueName(t) + "}"
	_, err := fencedSet.Run(ctx, rc, tag+":fence", second.Token(), []string{tag + ":data"}, "second")
	require.NoError(t, err, "the holder's fenced write")
	require.NoError(t, rc.Do(ctx, rc.B().ScriptFlush().Build()).Error())
	_, err = fencedSet.Run(ctx, rc, tag+":fence", first.Token(), []string{tag + ":data"}, "first")
	assert.ErrorIs(t, err, lock.ErrStaleToken, "a stale holder's fenced write, after SCRIPT FLUSH")
	v, err := rc.Do(ctx, rc.B().Get().Key(tag+":data").Build()).ToString()
	require.NoError(t, err)
	assert.Equal(t, "second", v)
}
