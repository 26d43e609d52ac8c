package lock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

// The Redis provider beside the conformance suite: what it stores and
// where (keys, records, Cluster hash slots), and its scripts.

// redisStorageConformance checks the keys and values the Redis provider
// stores, through b.raw: the layout of a record, that corrupt records are
// reported and left alone, and that calls that must change nothing write
// nothing.
func redisStorageConformance(t *testing.T, b backend) {
	p := b.replica(t)
	ctx := ctxTimeout(t, time.Minute)

	t.Run("RedisContenderWritesNothing", func(t *testing.T) {
		key, a, o := uniqueName(t), newOwner(), newOwner()
		mustAcquire(t, p, key, a, 10*time.Second)
		before := readRaw(t, b, key)
		rec, err := p.Acquire(ctx, key, o, time.Hour)
		require.NoError(t, err)
		require.Equal(t, a, rec.Owner, "a held key reports its holder")
		after := readRaw(t, b, key)
		assert.Equal(t, before.value, after.value, "a contender writes nothing to the record")
		// A contender may use up a token (Acquire takes one before it
		// looks, so that a free key costs one write); the next grant's
		// token is still greater (TokensStrictlyIncrease).
		assert.LessOrEqual(t, after.pttl, before.pttl, "a contender does not extend the record's TTL")
		assert.NoError(t, p.Release(ctx, key, a))
	})

	t.Run("RedisRenewOrFinishOfAbsentRecordStoresNothing", func(t *testing.T) {
		key, a := uniqueName(t), newOwner()
		require.ErrorIs(t, p.Renew(ctx, key, a, time.Hour), lock.ErrLost, "renewing an absent record")
		require.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost, "ending an absent record")
		n, err := b.raw.Exists(ctx, rawKey(key)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "a renewal or finish of an absent record does not create one")
	})

	t.Run("RedisBadInputStoresNothing", func(t *testing.T) {
		for _, in := range locktest.BadInputs(uniqueName(t)) {
			t.Run(in.Name, func(t *testing.T) {
				in.Check(t, ctx, p)
				n, err := b.raw.Exists(ctx, rawKey(in.Key), queueKey(in.Key)).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "nothing is stored for bad input")
			})
		}
	})

	t.Run("RedisLeaveNotQueuedStoresNothing", func(t *testing.T) {
		free, inbox := uniqueName(t)+":free", "inbox:"+uniqueName(t)
		require.NoError(t, p.Leave(ctx, free, lock.Wait{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox}))
		require.NoError(t, p.Leave(ctx, free, lock.Wait{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox, Look: lock.LookAgain}))
		o := newOwner() // the probe: Leave on a free key leaves it free
		mustAcquire(t, p, free, o, 10*time.Second)
		require.NoError(t, p.Release(ctx, free, o))
		n, err := b.raw.Exists(ctx, rawKey(free), queueKey(free)).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Leave stored nothing")
	})

	t.Run("RedisQueueBadInputStoresNothing", func(t *testing.T) {
		key, inbox := uniqueName(t), "inbox:"+uniqueName(t)
		good := lock.Wait{Owner: newOwner(), TTL: 10 * time.Second, Inbox: inbox}
		check := func(t *testing.T, held bool) {
			for _, c := range locktest.BadWaits(key, good) {
				t.Run(c.Name, func(t *testing.T) {
					c.Check(t, ctx, p)
					keys := []string{queueKey(c.Key)}
					if !held || c.Key != key {
						keys = append(keys, rawKey(c.Key))
					}
					n, err := b.raw.Exists(ctx, keys...).Result()
					require.NoError(t, err)
					assert.Zero(t, n, "nothing is stored for bad input (held key: %v)", held)
				})
			}
		}
		t.Run("FreeKey", func(t *testing.T) { check(t, false) })
		a := newOwner()
		mustAcquire(t, p, key, a, 10*time.Second)
		t.Run("HeldKey", func(t *testing.T) { check(t, true) })
		require.NoError(t, p.Release(ctx, key, a))
	})

	t.Run("CorruptRecords", func(t *testing.T) {
		values := map[string]string{
			"Garbage":       "hello",
			"Empty":         "",
			"NoToken":       "a,b",
			"AlephaFormat":  "id,2024-01-01T00:00:00Z",
			"AlephaEnded":   "id,2024-01-01T00:00:00Z,2024-01-01T00:00:01Z",
			"BadEndedToken": "a,b,ended",
		}
		ops := func(t *testing.T, key, want string) {
			t.Helper()
			o := newOwner()
			_, err := p.Acquire(ctx, key, o, time.Second)
			assertCorrupt(t, err, key, want, "Acquire")
			assertCorrupt(t, p.Release(ctx, key, o), key, want, "Release")
			assertCorrupt(t, p.Renew(ctx, key, o, time.Second), key, want, "Renew")
			assertCorrupt(t, p.Finish(ctx, key, o, time.Second), key, want, "Finish")
			w := lock.Wait{Owner: o, TTL: time.Second, Inbox: "inbox-" + o}
			_, err = p.Queue(ctx, key, w)
			assertCorrupt(t, err, key, want, "Queue")
			w.Look = lock.LookAgain
			_, err = p.Queue(ctx, key, w)
			assertCorrupt(t, err, key, want, "Queue(Again)")
			// (Acquire takes a token before it looks, so the fencing
			// counter may have moved; the corrupt value may not.)
		}
		for name, v := range values {
			t.Run(name, func(t *testing.T) {
				key := uniqueName(t)
				require.NoError(t, b.raw.Set(ctx, rawKey(key), v, 0).Err())
				t.Cleanup(func() { b.raw.Del(context.Background(), rawKey(key)) })
				ops(t, key, v)
				got, err := b.raw.Get(ctx, rawKey(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, v, got, "a corrupt record is left as it is")
				pttl, err := b.raw.PTTL(ctx, rawKey(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, time.Duration(-1), pttl, "no TTL is put on a corrupt record")
			})
		}
		t.Run("Hash", func(t *testing.T) {
			key := uniqueName(t)
			require.NoError(t, b.raw.HSet(ctx, rawKey(key), "owner", "x").Err())
			t.Cleanup(func() { b.raw.Del(context.Background(), rawKey(key)) })
			ops(t, key, "")
			got, err := b.raw.HGetAll(ctx, rawKey(key)).Result()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"owner": "x"}, got, "a hash at the record key is left as it is")
		})
	})

	t.Run("RedisKeyLayout", func(t *testing.T) {
		// A key as Client.Key makes it is stored as it is.
		name, a := uniqueName(t), newOwner()
		key := "lock:{" + name + "}"
		rk, fk := key, fenceKey(key)
		rec := mustAcquire(t, p, key, a, 10*time.Second)
		n, err := b.raw.Exists(ctx, rk, fk).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 2, n, "Acquire of K writes %q, and its slot's counter %q exists", rk, fk)
		assert.Equal(t, name, hashTag(rk), "the record key's Cluster hash tag is the name")
		assert.Equal(t, clusterSlot(rk), clusterSlot(fk), "the fencing counter %q is in the record's slot", fk)
		assert.True(t, strings.HasPrefix(fk, "lock:{") && strings.HasSuffix(fk, "}:fence"), "the counter is lock:{tag}:fence, not %q", fk)
		counter, err := b.raw.Get(ctx, fk).Uint64()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, rec.Token, uint64(1)<<52, "tokens start above 2^52")
		assert.LessOrEqual(t, rec.Token, counter, "the token came from the slot's counter")
		v, err := b.raw.Get(ctx, rk).Result()
		require.NoError(t, err)
		stored := a + "," + strconv.FormatUint(rec.Token, 10) + "," + strconv.FormatInt(rec.Since.UnixMilli(), 10)
		assert.Equal(t, stored, v, "the record is stored as owner,token,since")
		assert.WithinDuration(t, time.Now(), rec.Since, time.Minute, "since is the grant's time")
		pttl, err := b.raw.PTTL(ctx, rk).Result()
		require.NoError(t, err)
		assertTTL(t, 10*time.Second, pttl, "the record key carries the TTL")

		require.NoError(t, p.Finish(ctx, key, a, 5*time.Second))
		v, err = b.raw.Get(ctx, rk).Result()
		require.NoError(t, err)
		assert.Equal(t, stored+",ended", v, "an ended record is stored as owner,token,since,ended")

		require.NoError(t, p.Release(ctx, key, a))
		n, err = b.raw.Exists(ctx, rk).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "Release deletes the record key")
		fpttl, err := b.raw.PTTL(ctx, fk).Result()
		require.NoError(t, err)
		assert.Equal(t, time.Duration(-1), fpttl, "the slot's fencing counter never expires")
		keys, err := b.raw.Keys(ctx, globEscape(key)+"*").Result()
		require.NoError(t, err)
		assert.Empty(t, keys, "nothing of the lock is left after Release")
	})
}

func assertCorrupt(t *testing.T, err error, key, value, op string) {
	t.Helper()
	if !assert.ErrorIs(t, err, lock.ErrCorruptRecord, "%s on a corrupt record reports ErrCorruptRecord", op) {
		return
	}
	var re *lock.RecordError
	if assert.ErrorAs(t, err, &re, "%s reports a *RecordError", op) {
		assert.Equal(t, key, re.Key, "%s: the RecordError names the key", op)
		if value != "" {
			assert.Equal(t, value, re.Value, "%s: the RecordError carries the stored value", op)
		}
	}
}

type rawState struct {
	value, fence string
	pttl         time.Duration
}

func readRaw(t *testing.T, b backend, key string) rawState {
	t.Helper()
	ctx := context.Background()
	var s rawState
	var err error
	s.value, err = b.raw.Get(ctx, rawKey(key)).Result()
	require.NoError(t, err)
	s.fence, err = b.raw.Get(ctx, fenceKey(key)).Result()
	require.NoError(t, err)
	s.pttl, err = b.raw.PTTL(ctx, rawKey(key)).Result()
	require.NoError(t, err)
	return s
}

// hashTag returns the part of a Redis key that Cluster hashes: between the
// first "{" and the next "}", when not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of the Redis Cluster key distribution model.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// clusterSlot is the Redis Cluster hash slot of key: the CRC16 of its hash
// tag (what lies between its first "{" and the first "}" after it, when
// that is not empty), or of the whole key, modulo 16384.
func clusterSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16([]byte(key)) % 16384
}

// Issue 7, item 4 (every key of a lock in one Cluster slot; was
// TestIssue7KeySlotReference): TestClusterSlotReference checks clusterSlot
// against CLUSTER KEYSLOT answers of a Redis 7 Cluster node.
func TestClusterSlotReference(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16([]byte("123456789")), "the check value of CRC-16/XMODEM")
	for key, slot := range map[string]uint16{
		"foo":                  12182,
		"somekey":              11058,
		"123456789":            12739,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"}":                    12090,
		"}x":                   410,
		"{}x":                  10595,
		"a{b":                  13340,
	} {
		assert.Equal(t, slot, clusterSlot(key), "slot of %q", key)
	}
}

func TestScriptsSentAgainAfterFlush(t *testing.T) {
	// A server that forgot the scripts (restarted, or SCRIPT FLUSH) answers
	// EVALSHA with NOSCRIPT; the provider then sends the script in full.
	for _, b := range backends(t) {
		if b.raw == nil {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			p := b.replica(t)
			key := "lock:{" + uniqueName(t) + "}"
			flush := func() { require.NoError(t, b.raw.ScriptFlush(ctx).Err()) }

			flush()
			rec, err := p.Acquire(ctx, key, "a", time.Minute)
			require.NoError(t, err)
			require.Equal(t, "a", rec.Owner, "acquired after a flush")
			flush()
			require.NoError(t, p.Renew(ctx, key, "a", time.Minute), "renewed after a flush")
			flush()
			got, err := p.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, rec.Token, got.Token, "inspected after a flush")
			flush()
			require.NoError(t, p.Release(ctx, key, "a"), "released after a flush")
			got, err = p.Inspect(ctx, key)
			require.NoError(t, err)
			assert.Empty(t, got.Owner, "the release freed the key")
		})
	}
	t.Run("WaitForReplicas", func(t *testing.T) {
		// The script and WAIT share a pipeline: on NOSCRIPT the script is
		// sent again in full, with the WAIT after it. This server has no replica,
		// so the grant is refused as not replicated: never as NOSCRIPT.
		ctx := ctxTimeout(t, 30*time.Second)
		rc := realRedis(t)
		p := lock.NewRedisProvider(rc, lock.WaitForReplicas(1, 10*time.Millisecond))
		key := "lock:{" + uniqueName(t) + "}"
		require.NoError(t, rc.ScriptFlush(ctx).Err())
		_, err := p.Acquire(ctx, key, "a", time.Minute)
		require.ErrorIs(t, err, lock.ErrNotReplicated)
		_ = p.Release(ctx, key, "a")
	})
}
