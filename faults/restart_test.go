package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// TestTokensAcrossRestartWithPersistence: the fencing counters are data like
// the records, so a Redis that keeps its data across a restart keeps them,
// and the tokens of a name continue from where they were, without reading
// the server's clock: the first grant after the restart has the next token
// of its slot's counter (issue 17).
func TestTokensAcrossRestartWithPersistence(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "persisted"
	var last uint64
	grant := func(c *lock.Client) uint64 {
		t.Helper()
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.Greater(t, l.Token(), last, "tokens increase")
		last = l.Token()
		return last
	}
	c := newClient(t, newRedis(t, srv.Addr))
	for range 5 {
		grant(c)
	}
	direct := newRedis(t, srv.Addr)
	require.NoError(t, direct.Save(ctx).Err(), "SAVE: the data is on disk")
	_, fence, _, err := lock.RedisKeys(keyOf(name))
	require.NoError(t, err)
	counter, err := direct.Get(ctx, fence).Uint64()
	require.NoError(t, err)
	require.Equal(t, last, counter, "the counter of the name's slot gave the last token")

	require.NoError(t, srv.Kill())
	require.NoError(t, srv.Start(), "the server starts again and loads its data")
	c = newClient(t, newRedis(t, srv.Addr))
	before := last
	require.Equal(t, before+1, grant(c), "the first token after the restart is the counter's next, not the clock's")
}
