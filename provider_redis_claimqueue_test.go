package lock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// TestRedisClaimCommandsFromTheQueue counts what a hold served from the
// queue costs on a name of limit 1: a waiter joins (5 commands with its
// script), the holder's release grants it (8), and the next waiter joins
// (5), besides the PEXPIREATs that move the keys' expiry; none reads every claim (HGETALL): a release that leaves no claim
// but the one it grants knows which expires first.
func TestRedisClaimCommandsFromTheQueue(t *testing.T) {
	srv := faults.StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	p := lock.NewRedisProvider(rc)
	ctx := ctxTimeout(t, 20*time.Second)
	in := listen(t, p)
	key := uniqueName(t)
	hold := func() lock.Claim { return claimOf(1, 1, time.Minute, in) }
	// Warm: the scripts' digests are learned, the counter made.
	a := hold()
	mustClaim(t, p, key, a)
	w := hold()
	mustQueue(t, p, key, w)
	require.NoError(t, p.ReleaseClaim(ctx, key, a.Owner))
	in.next(t)

	require.NoError(t, rc.ConfigResetStat(ctx).Err())
	b := hold()
	mustQueue(t, p, key, b)
	require.NoError(t, p.ReleaseClaim(ctx, key, w.Owner)) // grants b
	assert.Equal(t, b.Owner, in.next(t).Owner)
	mustQueue(t, p, key, hold())
	stats := commandStats(t, ctx, rc)
	delete(stats, "config|resetstat")
	delete(stats, "config")
	total := 0
	for _, n := range stats {
		total += n
	}
	t.Logf("join, release granting, join: %d commands: %v", total, stats)
	assert.Zero(t, stats["hgetall"], "no call reads every claim")
	// PEXPIREAT when the keys' expiry moves: a quarter further than it
	// must, so that most calls of a busy name need not.
	assert.LessOrEqual(t, total-stats["pexpireat"], 18, "5 + 8 + 5 commands, the scripts' calls included")
}
