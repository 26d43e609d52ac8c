package locktest

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// runRecords checks records and their fencing tokens, renewals and grace
// periods: Acquire, Release, Renew and Finish, and the arguments they refuse.
func (s *suite) runRecords(t *testing.T) {
	t.Run("AcquireFreeKey", s.acquireFreeKey)
	t.Run("AcquireHeldKeyReturnsHolder", s.acquireHeldKeyReturnsHolder)
	t.Run("AcquireAgainBySameOwnerResetsTTL", s.acquireAgainBySameOwnerResetsTTL)
	t.Run("TokensStrictlyIncrease", s.tokensStrictlyIncrease)
	t.Run("ReleaseByWrongOwner", s.releaseByWrongOwner)
	t.Run("ReleaseByOwnerFreesKey", s.releaseByOwnerFreesKey)
	t.Run("ReleaseAbsentKey", s.releaseAbsentKey)
	t.Run("RenewOnlyForOwner", s.renewOnlyForOwner)
	t.Run("FinishKeepsKeyClosedUntilTTL", s.finishKeepsKeyClosedUntilTTL)
	t.Run("RenewOrFinishOfAbsentRecordChangesNothing", s.renewOrFinishOfAbsentRecord)
	t.Run("GraceWriteAfterReleaseDoesNotRecreate", s.graceWriteAfterReleaseDoesNotRecreate)
	t.Run("GraceWriteDoesNotOverwriteNewHolder", s.graceWriteDoesNotOverwriteNewHolder)
	t.Run("RenewOrFinishOfEndedRecordChangesNothing", s.renewOrFinishOfEndedRecord)
	t.Run("TTLExpiryFreesKey", s.ttlExpiryFreesKey)
	t.Run("TTLLongerThan25Days", s.ttlLongerThan25Days)
	t.Run("BadInput", s.badInput)
	t.Run("ConcurrentAcquireRelease", s.concurrentAcquireRelease)
}

func (s *suite) acquireFreeKey(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, o := uniqueName(t), newOwner()
	rec, err := p.Acquire(ctx, key, o, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Release(context.Background(), key, o) })
	assert.Equal(t, o, rec.Owner, "a free key is granted to the caller")
	assert.NotZero(t, rec.Token, "a grant carries a positive fencing token")
	assert.False(t, rec.GracePeriod, "a new record is not ended")
	assertTTL(t, 10*time.Second, rec.TTL, "the returned TTL is the requested one")
	assert.Equal(t, withoutTTL(rec), withoutTTL(holder(t, p, key)), "the stored record is the returned one")
}

func (s *suite) acquireHeldKeyReturnsHolder(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a, o := uniqueName(t), newOwner(), newOwner()
	recA := mustAcquire(t, p, key, a, 10*time.Second)
	rec, err := p.Acquire(ctx, key, o, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner, "a held key reports its holder")
	assert.Equal(t, recA.Token, rec.Token, "a held key reports the holder's token")
	assert.False(t, rec.GracePeriod)
	assert.Positive(t, rec.TTL, "the holder's remaining TTL is reported")
	assert.LessOrEqual(t, rec.TTL, 10*time.Second, "the holder's TTL is not extended by a contender")
	again := holder(t, p, key)
	assert.LessOrEqual(t, again.TTL, 10*time.Second, "the contender's 1h TTL was not applied to the holder's record")
	assert.NoError(t, p.Release(ctx, key, a), "the holder still holds the key after contention")
}

func (s *suite) acquireAgainBySameOwnerResetsTTL(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	first := mustAcquire(t, p, key, a, 10*time.Second)

	rec, err := p.Acquire(ctx, key, a, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner, "a repeated Acquire (lost reply) returns the owner's own record")
	assert.Equal(t, first.Token, rec.Token, "a repeated Acquire keeps the token of the grant")
	assert.False(t, rec.GracePeriod)
	assertTTL(t, time.Hour, rec.TTL, "a repeated Acquire resets the TTL to the new ttl")
	assertTTL(t, time.Hour, holder(t, p, key).TTL, "the reset TTL is stored")

	rec, err = p.Acquire(ctx, key, a, 10*time.Second)
	require.NoError(t, err)
	assertTTL(t, 10*time.Second, rec.TTL, "the TTL is reset, not only ever extended")
	assert.NoError(t, p.Release(ctx, key, a))
}

// tokensStrictlyIncrease takes one key in turns on two providers over the
// same storage.
func (s *suite) tokensStrictlyIncrease(t *testing.T) {
	p, ctx := s.p, s.ctx
	p2 := s.b.New(t)
	key := uniqueName(t)
	n := 100
	if s.b.Remote {
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
}

func (s *suite) releaseByWrongOwner(t *testing.T) {
	p, ctx := s.p, s.ctx
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
}

func (s *suite) releaseByOwnerFreesKey(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a, o := uniqueName(t), newOwner(), newOwner()
	mustAcquire(t, p, key, a, 10*time.Second)
	require.NoError(t, p.Release(ctx, key, a))
	rec := mustAcquire(t, p, key, o, 10*time.Second)
	assert.False(t, rec.GracePeriod)
	assert.ErrorIs(t, p.Release(ctx, key, a), lock.ErrLost, "a second release by the old owner finds no record of its own")
	assert.NoError(t, p.Release(ctx, key, o), "the old owner's second release left the new record alone")
}

func (s *suite) releaseAbsentKey(t *testing.T) {
	err := s.p.Release(s.ctx, uniqueName(t), newOwner())
	assert.ErrorIs(t, err, lock.ErrLost, "releasing a key that holds no record reports ErrLost")
}

func (s *suite) renewOnlyForOwner(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	recA := mustAcquire(t, p, key, a, 10*time.Second)
	require.NoError(t, p.Renew(ctx, key, a, time.Hour), "the owner renews its record")
	h := holder(t, p, key)
	assert.Equal(t, a, h.Owner)
	assert.Equal(t, recA.Token, h.Token, "a renewal keeps the token")
	assert.False(t, h.GracePeriod, "a renewal does not end the record")
	assertTTL(t, time.Hour, h.TTL, "a renewal sets the TTL")

	assert.ErrorIs(t, p.Renew(ctx, key, newOwner(), 2*time.Hour), lock.ErrLost,
		"another owner cannot renew the record")
	assert.LessOrEqual(t, holder(t, p, key).TTL, time.Hour, "a refused renewal does not change the TTL")
	assert.NoError(t, p.Release(ctx, key, a))
}

func (s *suite) finishKeepsKeyClosedUntilTTL(t *testing.T) {
	testenv.SkipShort(t, "a conformance check of 1 s (a grace period runs out)")
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	recA := mustAcquire(t, p, key, a, 10*time.Second)
	t.Cleanup(func() { _ = p.Release(context.Background(), key, a) })
	grace := time.Second
	require.NoError(t, p.Finish(ctx, key, a, grace), "the owner ends its record")

	rec, err := p.Acquire(ctx, key, newOwner(), 10*time.Second)
	require.NoError(t, err)
	assert.True(t, rec.GracePeriod, "an ended record keeps the key closed")
	assert.Equal(t, a, rec.Owner, "the ended record is intact")
	assert.Equal(t, recA.Token, rec.Token, "the ended record keeps its token")
	assert.LessOrEqual(t, rec.TTL, grace, "the ended record lives for the grace period")

	rec, err = p.Acquire(ctx, key, a, 10*time.Second)
	require.NoError(t, err)
	assert.True(t, rec.GracePeriod, "its own owner cannot take an ended record back either")
	assert.LessOrEqual(t, rec.TTL, grace, "an Acquire by the owner does not renew an ended record")

	if !s.expires(t) {
		return
	}
	o := newOwner()
	require.Eventually(t, func() bool {
		rec, err := p.Acquire(ctx, key, o, 10*time.Second)
		return err == nil && rec.Owner == o && !rec.GracePeriod
	}, 5*time.Second, 10*time.Millisecond, "the key is free once the grace period's TTL has passed")
	assert.Greater(t, holder(t, p, key).Token, recA.Token)
	assert.NoError(t, p.Release(ctx, key, o))
}

func (s *suite) renewOrFinishOfAbsentRecord(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	assert.ErrorIs(t, p.Renew(ctx, key, a, time.Hour), lock.ErrLost, "renewing an absent record")
	assert.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost, "ending an absent record")
	assertFree(t, ctx, p, key, "a renewal or finish of an absent record does not create one")
}

func (s *suite) graceWriteAfterReleaseDoesNotRecreate(t *testing.T) {
	// Alepha flaw 1: the grace-period write must not re-create a
	// deleted key.
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	mustAcquire(t, p, key, a, 10*time.Second)
	require.NoError(t, p.Release(ctx, key, a))
	assert.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost,
		"ending a record that was deleted")
	assertFree(t, ctx, p, key, "the late grace write left the key free")
}

func (s *suite) graceWriteDoesNotOverwriteNewHolder(t *testing.T) {
	// Alepha flaw 1: A's lock ended (released or expired) and B took
	// it; A's grace-period write must leave B's record alone.
	p, ctx := s.p, s.ctx
	key, a, o := uniqueName(t), newOwner(), newOwner()
	mustAcquire(t, p, key, a, 10*time.Second)
	require.NoError(t, p.Release(ctx, key, a))
	recB := mustAcquire(t, p, key, o, 10*time.Second)
	assert.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost,
		"ending another owner's record is refused")
	assert.ErrorIs(t, p.Renew(ctx, key, a, time.Hour), lock.ErrLost,
		"renewing another owner's record is refused")
	h := holder(t, p, key)
	assert.Equal(t, o, h.Owner, "the new holder's record is intact")
	assert.Equal(t, recB.Token, h.Token)
	assert.False(t, h.GracePeriod, "the new holder's record was not marked ended")
	assert.LessOrEqual(t, h.TTL, 10*time.Second, "the new holder's TTL was not changed")
	assert.NoError(t, p.Release(ctx, key, o))
}

func (s *suite) renewOrFinishOfEndedRecord(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	recA := mustAcquire(t, p, key, a, 10*time.Second)
	t.Cleanup(func() { _ = p.Release(context.Background(), key, a) })
	require.NoError(t, p.Finish(ctx, key, a, 10*time.Second))
	assert.ErrorIs(t, p.Renew(ctx, key, a, time.Hour), lock.ErrLost, "renewing an ended record")
	assert.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost, "ending an ended record again")
	h := holder(t, p, key)
	assert.True(t, h.GracePeriod, "the record is still ended")
	assert.Equal(t, recA.Token, h.Token)
	assert.LessOrEqual(t, h.TTL, 10*time.Second, "a refused update does not extend the grace period")
}

func (s *suite) ttlExpiryFreesKey(t *testing.T) {
	if !s.expires(t) {
		return
	}
	p, ctx := s.p, s.ctx
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
	assert.ErrorIs(t, p.Finish(ctx, key, a, time.Hour), lock.ErrLost, "the expired owner cannot end the new record")
	assert.NoError(t, p.Release(ctx, key, o))
}

func (s *suite) ttlLongerThan25Days(t *testing.T) {
	// Alepha flaw 7: memory timers above 2^31-1 ms fired at once.
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	ttl := 30 * 24 * time.Hour
	rec := mustAcquire(t, p, key, a, ttl)
	assertTTL(t, ttl, rec.TTL, "a 30-day TTL is stored")
	time.Sleep(20 * time.Millisecond)
	h := holder(t, p, key)
	assert.Equal(t, a, h.Owner, "a record with a 30-day TTL does not expire at once")
	assert.Greater(t, h.TTL, 29*24*time.Hour, "the TTL is about 30 days")
	require.NoError(t, p.Finish(ctx, key, a, ttl), "a 30-day grace period is accepted")
	assert.Greater(t, holder(t, p, key).TTL, 29*24*time.Hour, "the grace period is about 30 days")
	assert.NoError(t, p.Release(ctx, key, a))
}

// badInput: every method refuses a bad key, owner or TTL with
// lock.ErrInvalidArgument, and a key and an owner of the longest allowed
// length work.
func (s *suite) badInput(t *testing.T) {
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	for _, in := range BadInputs(key) {
		t.Run(in.Name, func(t *testing.T) { in.Check(t, ctx, p) })
	}
	assertFree(t, ctx, p, key, "no bad call stored a record")
	o := newOwner()

	long := key + strings.Repeat("k", lock.MaxKeyLen-len(key))
	require.Len(t, long, lock.MaxKeyLen)
	mustAcquire(t, p, long, o, 10*time.Second)
	assert.NoError(t, p.Release(ctx, long, o), "a key of exactly MaxKeyLen bytes works")
	owner := strings.Repeat("o", lock.MaxOwnerLen)
	mustAcquire(t, p, key, owner, 10*time.Second)
	assert.NoError(t, p.Release(ctx, key, owner), "an owner of exactly MaxOwnerLen bytes works")
}

// concurrentAcquireRelease: workers on two providers over the same storage
// take and release one key; at most one holds it at any instant.
func (s *suite) concurrentAcquireRelease(t *testing.T) {
	// Alepha test 5: an owner-checked delete and a competing set
	// never interleave.
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	workers, rounds := 16, 200
	if s.b.Remote {
		workers, rounds = 8, 40
	}
	var inside, maxInside, grants atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		pw := p
		if w%2 == 1 {
			pw = s.b.New(t)
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
				raise(&maxInside, inside.Add(1))
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
}
