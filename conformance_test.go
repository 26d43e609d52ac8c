package lock_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestProviderConformance is the one suite every Provider passes, run through
// the Provider interface against every backend.
func TestProviderConformance(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		p := b.replica(t)
		ctx := ctxTimeout(t, time.Minute)

		t.Run("AcquireFreeKey", func(t *testing.T) {
			key, o := uniqueName(t), newOwner()
			rec, err := p.Acquire(ctx, key, o, 10*time.Second)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Release(context.Background(), key, o) })
			assert.Equal(t, o, rec.Owner, "a free key is granted to the caller")
			assert.NotZero(t, rec.Token, "a grant carries a positive fencing token")
			assert.False(t, rec.Ended, "a new record is not ended")
			assertTTL(t, 10*time.Second, rec.TTL, "the returned TTL is the requested one")
			assert.Equal(t, withoutTTL(rec), withoutTTL(holder(t, p, key)), "the stored record is the returned one")
		})

		t.Run("AcquireHeldKeyReturnsHolder", func(t *testing.T) {
			key, a, o := uniqueName(t), newOwner(), newOwner()
			recA := mustAcquire(t, p, key, a, 10*time.Second)
			var before rawState
			if b.raw != nil {
				before = readRaw(t, b, key)
			}
			rec, err := p.Acquire(ctx, key, o, time.Hour)
			require.NoError(t, err)
			assert.Equal(t, a, rec.Owner, "a held key reports its holder")
			assert.Equal(t, recA.Token, rec.Token, "a held key reports the holder's token")
			assert.False(t, rec.Ended)
			assert.Positive(t, rec.TTL, "the holder's remaining TTL is reported")
			assert.LessOrEqual(t, rec.TTL, 10*time.Second, "the holder's TTL is not extended by a contender")
			if b.raw != nil {
				after := readRaw(t, b, key)
				assert.Equal(t, before.value, after.value, "a contender writes nothing to the record")
				// A contender may use up a token (Acquire takes one before it
				// looks, so that a free key costs one write); the next grant's
				// token is still greater (TokensStrictlyIncrease).
				assert.LessOrEqual(t, after.pttl, before.pttl, "a contender does not extend the record's TTL")
			}
			again := holder(t, p, key)
			assert.LessOrEqual(t, again.TTL, 10*time.Second, "the contender's 1h TTL was not applied to the holder's record")
			assert.NoError(t, p.Release(ctx, key, a), "the holder still holds the key after contention")
		})

		t.Run("AcquireAgainBySameOwnerResetsTTL", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			first := mustAcquire(t, p, key, a, 10*time.Second)

			rec, err := p.Acquire(ctx, key, a, time.Hour)
			require.NoError(t, err)
			assert.Equal(t, a, rec.Owner, "a repeated Acquire (lost reply) returns the owner's own record")
			assert.Equal(t, first.Token, rec.Token, "a repeated Acquire keeps the token of the grant")
			assert.False(t, rec.Ended)
			assertTTL(t, time.Hour, rec.TTL, "a repeated Acquire resets the TTL to the new ttl")
			assertTTL(t, time.Hour, holder(t, p, key).TTL, "the reset TTL is stored")

			rec, err = p.Acquire(ctx, key, a, 10*time.Second)
			require.NoError(t, err)
			assertTTL(t, 10*time.Second, rec.TTL, "the TTL is reset, not only ever extended")
			assert.NoError(t, p.Release(ctx, key, a))
		})

		t.Run("TokensStrictlyIncrease", func(t *testing.T) {
			p2 := b.replica(t)
			key := uniqueName(t)
			n := 100
			if b.raw != nil {
				n = 30
			}
			var last uint64
			for i := range n {
				pi := p
				if i%2 == 1 {
					pi = p2 // another process sharing the backend
				}
				o := newOwner()
				rec := mustAcquire(t, pi, key, o, 10*time.Second)
				require.Greater(t, rec.Token, last, "grant %d: the token strictly increases across grants of one key", i)
				last = rec.Token
				require.NoError(t, pi.Release(ctx, key, o))
			}
		})

		t.Run("ReleaseByWrongOwner", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			recA := mustAcquire(t, p, key, a, 10*time.Second)
			err := p.Release(ctx, key, newOwner())
			assert.ErrorIs(t, err, lock.ErrLost, "releasing another owner's lock is refused")
			var le *lock.LostError
			assert.ErrorAs(t, err, &le, "the refusal is a *LostError")
			h := holder(t, p, key)
			assert.Equal(t, a, h.Owner, "a refused release leaves the holder's record")
			assert.Equal(t, recA.Token, h.Token)
			assert.NoError(t, p.Release(ctx, key, a), "the holder can still release")
		})

		t.Run("ReleaseByOwnerFreesKey", func(t *testing.T) {
			key, a, o := uniqueName(t), newOwner(), newOwner()
			mustAcquire(t, p, key, a, 10*time.Second)
			require.NoError(t, p.Release(ctx, key, a))
			rec := mustAcquire(t, p, key, o, 10*time.Second)
			assert.False(t, rec.Ended)
			assert.ErrorIs(t, p.Release(ctx, key, a), lock.ErrLost, "a second release by the old owner finds no record of its own")
			assert.NoError(t, p.Release(ctx, key, o), "the old owner's second release left the new record alone")
		})

		t.Run("ReleaseAbsentKey", func(t *testing.T) {
			err := p.Release(ctx, uniqueName(t), newOwner())
			assert.ErrorIs(t, err, lock.ErrLost, "releasing a key that holds no record reports ErrLost")
		})

		t.Run("UpdateRenewsOnlyForOwner", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			recA := mustAcquire(t, p, key, a, 10*time.Second)
			require.NoError(t, p.Update(ctx, key, a, time.Hour, false), "the owner renews its record")
			h := holder(t, p, key)
			assert.Equal(t, a, h.Owner)
			assert.Equal(t, recA.Token, h.Token, "a renewal keeps the token")
			assert.False(t, h.Ended, "a renewal does not end the record")
			assertTTL(t, time.Hour, h.TTL, "a renewal sets the TTL")

			assert.ErrorIs(t, p.Update(ctx, key, newOwner(), 2*time.Hour, false), lock.ErrLost,
				"another owner cannot renew the record")
			assert.LessOrEqual(t, holder(t, p, key).TTL, time.Hour, "a refused renewal does not change the TTL")
			assert.NoError(t, p.Release(ctx, key, a))
		})

		t.Run("UpdateEndedKeepsKeyClosedUntilTTL", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			recA := mustAcquire(t, p, key, a, 10*time.Second)
			t.Cleanup(func() { _ = p.Release(context.Background(), key, a) })
			grace := time.Second
			require.NoError(t, p.Update(ctx, key, a, grace, true), "the owner ends its record")

			rec, err := p.Acquire(ctx, key, newOwner(), 10*time.Second)
			require.NoError(t, err)
			assert.True(t, rec.Ended, "an ended record keeps the key closed")
			assert.Equal(t, a, rec.Owner, "the ended record is intact")
			assert.Equal(t, recA.Token, rec.Token, "the ended record keeps its token")
			assert.LessOrEqual(t, rec.TTL, grace, "the ended record lives for the grace period")

			rec, err = p.Acquire(ctx, key, a, 10*time.Second)
			require.NoError(t, err)
			assert.True(t, rec.Ended, "its own owner cannot take an ended record back either")
			assert.LessOrEqual(t, rec.TTL, grace, "an Acquire by the owner does not renew an ended record")

			if !canExpire(t, b) {
				return
			}
			o := newOwner()
			require.Eventually(t, func() bool {
				rec, err := p.Acquire(ctx, key, o, 10*time.Second)
				return err == nil && rec.Owner == o && !rec.Ended
			}, 5*time.Second, 10*time.Millisecond, "the key is free once the grace period's TTL has passed")
			assert.Greater(t, holder(t, p, key).Token, recA.Token)
			assert.NoError(t, p.Release(ctx, key, o))
		})

		t.Run("UpdateOnAbsentRecordChangesNothing", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, false), lock.ErrLost, "renewing an absent record")
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, true), lock.ErrLost, "ending an absent record")
			if b.raw != nil {
				n, err := b.raw.Exists(ctx, rawKey(key)).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "an update of an absent record does not create one")
			}
			o := newOwner()
			rec := mustAcquire(t, p, key, o, 10*time.Second)
			assert.False(t, rec.Ended, "an update of an absent record does not create one")
			assert.NoError(t, p.Release(ctx, key, o))
		})

		t.Run("GraceWriteAfterReleaseDoesNotRecreate", func(t *testing.T) {
			// Alepha flaw 1: the grace-period write must not re-create a
			// deleted key.
			key, a := uniqueName(t), newOwner()
			mustAcquire(t, p, key, a, 10*time.Second)
			require.NoError(t, p.Release(ctx, key, a))
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, true), lock.ErrLost,
				"ending a record that was deleted")
			o := newOwner()
			rec := mustAcquire(t, p, key, o, 10*time.Second)
			assert.False(t, rec.Ended, "the late grace write left the key free")
			assert.NoError(t, p.Release(ctx, key, o))
		})

		t.Run("GraceWriteDoesNotOverwriteNewHolder", func(t *testing.T) {
			// Alepha flaw 1: A's lock ended (released or expired) and B took
			// it; A's grace-period write must leave B's record alone.
			key, a, o := uniqueName(t), newOwner(), newOwner()
			mustAcquire(t, p, key, a, 10*time.Second)
			require.NoError(t, p.Release(ctx, key, a))
			recB := mustAcquire(t, p, key, o, 10*time.Second)
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, true), lock.ErrLost,
				"ending another owner's record is refused")
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, false), lock.ErrLost,
				"renewing another owner's record is refused")
			h := holder(t, p, key)
			assert.Equal(t, o, h.Owner, "the new holder's record is intact")
			assert.Equal(t, recB.Token, h.Token)
			assert.False(t, h.Ended, "the new holder's record was not marked ended")
			assert.LessOrEqual(t, h.TTL, 10*time.Second, "the new holder's TTL was not changed")
			assert.NoError(t, p.Release(ctx, key, o))
		})

		t.Run("UpdateOnEndedRecordChangesNothing", func(t *testing.T) {
			key, a := uniqueName(t), newOwner()
			recA := mustAcquire(t, p, key, a, 10*time.Second)
			t.Cleanup(func() { _ = p.Release(context.Background(), key, a) })
			require.NoError(t, p.Update(ctx, key, a, 10*time.Second, true))
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, false), lock.ErrLost, "renewing an ended record")
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, true), lock.ErrLost, "ending an ended record again")
			h := holder(t, p, key)
			assert.True(t, h.Ended, "the record is still ended")
			assert.Equal(t, recA.Token, h.Token)
			assert.LessOrEqual(t, h.TTL, 10*time.Second, "a refused update does not extend the grace period")
		})

		t.Run("TTLExpiryFreesKey", func(t *testing.T) {
			if !canExpire(t, b) {
				return
			}
			key, a, o := uniqueName(t), newOwner(), newOwner()
			recA := mustAcquire(t, p, key, a, 80*time.Millisecond)
			var rec lock.Record
			require.Eventually(t, func() bool {
				var err error
				rec, err = p.Acquire(ctx, key, o, 10*time.Second)
				return err == nil && rec.Owner == o
			}, 5*time.Second, 10*time.Millisecond, "the key is free once its TTL has passed")
			assert.Greater(t, rec.Token, recA.Token)
			assert.ErrorIs(t, p.Release(ctx, key, a), lock.ErrLost, "the expired owner no longer holds the key")
			assert.ErrorIs(t, p.Update(ctx, key, a, time.Hour, true), lock.ErrLost, "the expired owner cannot end the new record")
			assert.NoError(t, p.Release(ctx, key, o))
		})

		t.Run("TTLLongerThan25Days", func(t *testing.T) {
			// Alepha flaw 7: memory timers above 2^31-1 ms fired at once.
			key, a := uniqueName(t), newOwner()
			ttl := 30 * 24 * time.Hour
			rec := mustAcquire(t, p, key, a, ttl)
			assertTTL(t, ttl, rec.TTL, "a 30-day TTL is stored")
			time.Sleep(20 * time.Millisecond)
			h := holder(t, p, key)
			assert.Equal(t, a, h.Owner, "a record with a 30-day TTL does not expire at once")
			assert.Greater(t, h.TTL, 29*24*time.Hour, "the TTL is about 30 days")
			require.NoError(t, p.Update(ctx, key, a, ttl, true), "a 30-day grace period is accepted")
			assert.Greater(t, holder(t, p, key).TTL, 29*24*time.Hour, "the grace period is about 30 days")
			assert.NoError(t, p.Release(ctx, key, a))
		})

		t.Run("BadInput", func(t *testing.T) {
			key := uniqueName(t)
			cases := []struct {
				name, key, owner string
				ttl              time.Duration
			}{
				{"EmptyKey", "", newOwner(), time.Second},
				{"KeyTooLong", strings.Repeat("k", lock.MaxKeyLen+1), newOwner(), time.Second},
				{"EmptyOwner", key, "", time.Second},
				{"OwnerTooLong", key, strings.Repeat("o", lock.MaxOwnerLen+1), time.Second},
				{"OwnerWithComma", key, "a,1", time.Second},
				{"OwnerWithSpace", key, "a b", time.Second},
				{"OwnerWithNewline", key, "a\n", time.Second},
				{"ZeroTTL", key, newOwner(), 0},
				{"TTLUnderOneMillisecond", key, newOwner(), 999 * time.Microsecond},
				{"NegativeTTL", key, newOwner(), -time.Second},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					_, err := p.Acquire(ctx, c.key, c.owner, c.ttl)
					assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire rejects it")
					assert.ErrorIs(t, p.Update(ctx, c.key, c.owner, c.ttl, false), lock.ErrInvalidArgument, "Update rejects it")
					assert.ErrorIs(t, p.Update(ctx, c.key, c.owner, c.ttl, true), lock.ErrInvalidArgument, "Update(ended) rejects it")
					if c.ttl >= time.Millisecond {
						assert.ErrorIs(t, p.Release(ctx, c.key, c.owner), lock.ErrInvalidArgument, "Release rejects it")
					}
					if b.raw != nil && c.key != "" {
						n, err := b.raw.Exists(ctx, rawKey(c.key), fenceKey(c.key)).Result()
						require.NoError(t, err)
						assert.Zero(t, n, "nothing is stored for bad input")
					}
				})
			}
			o := newOwner()
			rec := mustAcquire(t, p, key, o, 10*time.Second)
			assert.False(t, rec.Ended, "no bad call stored a record")
			assert.NoError(t, p.Release(ctx, key, o))

			long := key + strings.Repeat("k", lock.MaxKeyLen-len(key))
			require.Len(t, long, lock.MaxKeyLen)
			mustAcquire(t, p, long, o, 10*time.Second)
			assert.NoError(t, p.Release(ctx, long, o), "a key of exactly MaxKeyLen bytes works")
			owner := strings.Repeat("o", lock.MaxOwnerLen)
			mustAcquire(t, p, key, owner, 10*time.Second)
			assert.NoError(t, p.Release(ctx, key, owner), "an owner of exactly MaxOwnerLen bytes works")
		})

		t.Run("ConcurrentAcquireRelease", func(t *testing.T) {
			// Alepha test 5: an owner-checked delete and a competing set
			// never interleave.
			key := uniqueName(t)
			workers, rounds := 16, 200
			if b.raw != nil {
				workers, rounds = 8, 40
			}
			var inside, maxInside, grants atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				pw := p
				if w%2 == 1 {
					pw = b.replica(t)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						o := newOwner()
						rec, err := pw.Acquire(ctx, key, o, 10*time.Second)
						if !assert.NoError(t, err) {
							return
						}
						if rec.Owner != o {
							// A failed contender's release must not
							// delete the holder's record.
							if !assert.ErrorIs(t, pw.Release(ctx, key, o), lock.ErrLost, "a contender's release is refused") {
								return
							}
							continue
						}
						grants.Add(1)
						n := inside.Add(1)
						for {
							m := maxInside.Load()
							if n <= m || maxInside.CompareAndSwap(m, n) {
								break
							}
						}
						runtime.Gosched()
						inside.Add(-1)
						if !assert.NoError(t, pw.Release(ctx, key, o), "the holder's release finds its own record") {
							return
						}
					}
				}()
			}
			wg.Wait()
			assert.EqualValues(t, 1, maxInside.Load(), "at most one holder at any instant")
			assert.Positive(t, grants.Load())
			o := newOwner()
			mustAcquire(t, p, key, o, 10*time.Second)
			assert.NoError(t, p.Release(ctx, key, o), "the key is free after every holder released")
			t.Logf("%d grants", grants.Load())
		})

		t.Run("CorruptRecords", func(t *testing.T) {
			if b.raw == nil {
				t.Skipf("%s backend has no raw access", b.name)
			}
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
				assertCorrupt(t, p.Update(ctx, key, o, time.Second, false), key, want, "Update")
				assertCorrupt(t, p.Update(ctx, key, o, time.Second, true), key, want, "Update(ended)")
				w := lock.Waiter{Owner: o, TTL: time.Second, Inbox: "inbox-" + o}
				_, err = p.Queue(ctx, key, w)
				assertCorrupt(t, err, key, want, "Queue")
				w.Again = true
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
			if b.raw == nil {
				t.Skipf("%s backend has no raw access", b.name)
			}
			// A key as Client.Key makes it is stored as it is.
			name, a := uniqueName(t), newOwner()
			key := "lock:{" + name + "}"
			rk, fk := key, key+":fence"
			rec := mustAcquire(t, p, key, a, 10*time.Second)
			n, err := b.raw.Exists(ctx, rk, fk).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 2, n, "Acquire of K writes %q and %q", rk, fk)
			assert.Equal(t, name, hashTag(rk), "the record key's Cluster hash tag is the name")
			assert.Equal(t, name, hashTag(fk), "the fence key's Cluster hash tag is the name: same slot as the record")
			v, err := b.raw.Get(ctx, rk).Result()
			require.NoError(t, err)
			assert.Equal(t, a+","+strconv.FormatUint(rec.Token, 10), v, "the record is stored as owner,token")
			pttl, err := b.raw.PTTL(ctx, rk).Result()
			require.NoError(t, err)
			assertTTL(t, 10*time.Second, pttl, "the record key carries the TTL")

			require.NoError(t, p.Update(ctx, key, a, 5*time.Second, true))
			v, err = b.raw.Get(ctx, rk).Result()
			require.NoError(t, err)
			assert.Equal(t, a+","+strconv.FormatUint(rec.Token, 10)+",ended", v, "an ended record is stored as owner,token,ended")

			require.NoError(t, p.Release(ctx, key, a))
			n, err = b.raw.Exists(ctx, rk).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "Release deletes the record key")
			fpttl, err := b.raw.PTTL(ctx, fk).Result()
			require.NoError(t, err)
			assert.Positive(t, fpttl, "the fencing counter has a TTL, so nothing is left behind for ever")
			assert.LessOrEqual(t, fpttl, time.Hour)
			keys, err := b.raw.Keys(ctx, globEscape(key)+"*").Result()
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{fk}, keys, "only the expiring fencing counter is left after Release")
		})
	})
}

// TestMemoryProviderLen checks that the memory provider keeps nothing behind.
func TestMemoryProviderLen(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	m := lock.NewMemoryProvider()
	o := newOwner()
	for i := range 10 {
		mustAcquire(t, m, fmt.Sprint("k", i), o, time.Minute)
	}
	require.Equal(t, 10, m.Len())
	for i := range 5 {
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o))
	}
	for i := 5; i < 10; i++ {
		require.NoError(t, m.Update(ctx, fmt.Sprint("k", i), o, time.Minute, true))
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o), "the owner can delete its ended record")
	}
	assert.Zero(t, m.Len(), "no record is left after every key was released")

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				o := newOwner()
				rec, err := m.Acquire(ctx, "shared", o, time.Minute)
				if assert.NoError(t, err) && rec.Owner == o {
					assert.NoError(t, m.Release(ctx, "shared", o))
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, m.Len(), "no record is left after concurrent acquire/release")
}

// TestMemoryProviderFakeClock expires records by moving a fake clock.
func TestMemoryProviderFakeClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clock := newFakeClock()
	m := lock.NewMemoryProvider(lock.MemoryClock(clock))
	a, o := newOwner(), newOwner()

	mustAcquire(t, m, "k", a, time.Minute)
	clock.Advance(59 * time.Second)
	h := holder(t, m, "k")
	assert.Equal(t, a, h.Owner, "the record lives until its TTL has passed")
	assert.Equal(t, time.Second, h.TTL, "the TTL is measured by the provider's clock")
	clock.Advance(time.Second)
	assert.Zero(t, m.Len(), "the record expires when the clock reaches its deadline")
	mustAcquire(t, m, "k", o, time.Minute)
	assert.ErrorIs(t, m.Release(ctx, "k", a), lock.ErrLost, "the expired owner holds nothing")

	require.NoError(t, m.Update(ctx, "k", o, 10*time.Second, true))
	clock.Advance(9 * time.Second)
	rec, err := m.Acquire(ctx, "k", a, time.Minute)
	require.NoError(t, err)
	assert.True(t, rec.Ended, "the grace period lasts its TTL")
	clock.Advance(time.Second)
	rec = mustAcquire(t, m, "k", a, time.Minute)
	assert.False(t, rec.Ended, "the key is free after the grace period")

	require.NoError(t, m.Update(ctx, "k", a, 30*24*time.Hour, false))
	clock.Advance(29 * 24 * time.Hour)
	assert.Equal(t, a, holder(t, m, "k").Owner, "a 30-day TTL outlives 29 days")
	clock.Advance(24 * time.Hour)
	assert.Zero(t, m.Len(), "a 30-day TTL expires after 30 days")
}

// --- helpers shared by the test files ---

func newOwner() string { return "o-" + uuid.NewString() }

// rawKey and fenceKey return the Redis keys of the record and the fencing
// counter of key.
func rawKey(key string) string {
	r, _, _, _ := lock.RedisKeys(key)
	return r
}

func fenceKey(key string) string {
	_, f, _, _ := lock.RedisKeys(key)
	return f
}

// canExpire reports whether b's records expire in real time. The miniredis
// backend is started without ClockTTL(true), so its TTLs never run out; a test
// that needs expiry skips the rest of itself there.
func canExpire(t *testing.T, b backend) bool {
	t.Helper()
	if b.name == "miniredis" {
		t.Log("miniredis TTLs do not run out in real time (helpers_test.go does not call ClockTTL(true)); expiry not checked")
		return false
	}
	return true
}

func mustAcquire(t testing.TB, p lock.Provider, key, owner string, ttl time.Duration) lock.Record {
	t.Helper()
	rec, err := p.Acquire(context.Background(), key, owner, ttl)
	require.NoError(t, err)
	require.Equal(t, owner, rec.Owner, "Acquire of %q by %s should have been granted", key, owner)
	require.False(t, rec.Ended)
	return rec
}

// holder returns the record that holds key, read by an Acquire of a fresh
// owner that must not be granted.
func holder(t testing.TB, p lock.Provider, key string) lock.Record {
	t.Helper()
	o := newOwner()
	rec, err := p.Acquire(context.Background(), key, o, time.Hour)
	require.NoError(t, err)
	if rec.Owner == o {
		_ = p.Release(context.Background(), key, o)
		require.FailNow(t, "key should have been held", "a probe acquired %q", key)
	}
	return rec
}

func withoutTTL(r lock.Record) lock.Record {
	r.TTL = 0
	return r
}

// assertTTL checks that got is want, less what a slow machine takes.
func assertTTL(t testing.TB, want, got time.Duration, msg string) {
	t.Helper()
	assert.LessOrEqual(t, got, want, msg)
	assert.Greater(t, got, want-want/10-time.Second/2, msg)
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

func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// fakeClock is a lock.Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
