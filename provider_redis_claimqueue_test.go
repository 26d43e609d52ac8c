package lock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestRedisClaimCommandsFromTheQueue counts what a hold served from the
// queue costs on names of limit 1 and 2: a waiter joins (5 commands with
// its script), a holder's release grants it (7), and the next waiter joins
// (5), besides the PEXPIREATs that move the keys' expiry. No call reads
// every claim (HGETALL): a release that drops the claim that expires first
// names the claim it grants, and keeps the deadline as a bound. No call
// takes a token from the counter (INCR, INCRBY) while the name's block of
// tokens lasts. A waiter's look again is 6, its entry's new deadline
// (LSET, HSET) included.
func TestRedisClaimCommandsFromTheQueue(t *testing.T) {
	rc, p := ownRedis(t)
	ctx := ctxTimeout(t, 20*time.Second)
	in := listen(t, p)
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			key := uniqueName(t)
			hold := func() lock.Claim { return claimOf(1, limit, time.Minute, in) }
			// Warm: the scripts' digests are learned, the block of
			// tokens taken, the name full, a waiter granted.
			var holders []lock.Claim
			for range limit {
				a := hold()
				mustClaim(t, p, key, a)
				holders = append(holders, a)
			}
			// Grants from the queue until the name's block of tokens
			// (" tok": last, max, size) has one left for the grant
			// measured: its blocks double from 1.
			for i := 0; ; i++ {
				require.Less(t, i, 20, "the block of tokens never had one left")
				w := hold()
				mustQueue(t, p, key, w)
				require.NoError(t, p.ReleaseClaim(ctx, key, holders[0].Owner))
				assert.Equal(t, w.Owner, in.next(t).Owner)
				holders = append(holders[1:], w)
				tok, err := rc.HGet(ctx, rawKey(key)+":c", " tok").Result()
				require.NoError(t, err)
				var last, max, size int64
				_, err = fmt.Sscanf(tok, "%d %d %d", &last, &max, &size)
				require.NoError(t, err, "tok %q", tok)
				if max > last {
					break
				}
			}

			require.NoError(t, rc.ConfigResetStat(ctx).Err())
			b := hold()
			mustQueue(t, p, key, b)
			require.NoError(t, p.ReleaseClaim(ctx, key, holders[0].Owner)) // grants b
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
			assert.Zero(t, stats["incr"]+stats["incrby"], "no call takes a token from the counter")
			// PEXPIREAT when the keys' expiry moves: a quarter further
			// than it must, so that most calls of a busy name need not.
			assert.LessOrEqual(t, total-stats["pexpireat"], 17, "5 + 7 + 5 commands, the scripts' calls included")

			// A waiter's look again: its entry's deadline moves (issue
			// 38), in the queue and in the hash: an LSET and an HSET more
			// than the look cost before.
			again := hold()
			again.QueueTTL = 2 * time.Second
			mustQueue(t, p, key, again)
			require.NoError(t, rc.ConfigResetStat(ctx).Err())
			again.Look = lock.LookAgain
			mustQueue(t, p, key, again)
			stats = commandStats(t, ctx, rc)
			delete(stats, "config|resetstat")
			delete(stats, "config")
			total = 0
			for _, n := range stats {
				total += n
			}
			t.Logf("look again: %d commands: %v", total, stats)
			assert.LessOrEqual(t, total, 6, "EVALSHA, TIME, HMGET, LPOS, LSET, HSET")
		})
	}
}
