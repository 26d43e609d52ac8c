package locktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// runInspect checks what operators use: Inspect, List and ForceRelease.
func (s *suite) runInspect(t *testing.T) {
	t.Run("InspectFreeKey", s.inspectFreeKey)
	t.Run("InspectHeldKey", s.inspectHeldKey)
	t.Run("InspectCountsWaiters", s.inspectCountsWaiters)
	t.Run("ListFindsRecordsUnderPrefix", s.listFindsRecordsUnderPrefix)
	t.Run("ListStopsWhenAsked", s.listStopsWhenAsked)
	t.Run("ForceReleaseFreesKey", s.forceReleaseFreesKey)
	t.Run("ForceReleaseEndsGracePeriod", s.forceReleaseEndsGracePeriod)
	t.Run("ForceReleaseHandsToWaiter", s.forceReleaseHandsToWaiter)
	t.Run("InspectBadInput", s.inspectBadInput)
}

func (s *suite) inspectFreeKey(t *testing.T) {
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	rec, err := p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.Record{}, rec, "a free key inspects as the zero Record")
	rec, err = p.ForceRelease(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.Record{}, rec, "a forced release of a free key finds nothing")
	assertFree(t, ctx, p, key, "inspecting and force-releasing a free key store nothing")
}

// inspectHeldKey: Inspect shows the holder's record, and changes nothing,
// not even the TTL.
func (s *suite) inspectHeldKey(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	before := time.Now()
	recA := mustAcquire(t, p, key, a, 10*time.Second)
	t.Cleanup(func() { _ = p.Release(context.Background(), key, a) })
	rec, err := p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner, "Inspect shows the holder")
	assert.Equal(t, recA.Token, rec.Token, "Inspect shows the holder's token")
	assert.False(t, rec.GracePeriod)
	assertTTL(t, 10*time.Second, rec.TTL, "Inspect shows the TTL left")
	assert.WithinDuration(t, before, rec.Since, time.Minute, "Since is the time of the grant (within a minute: clocks differ)")
	assert.Equal(t, recA.Since, rec.Since, "Acquire and Inspect show the same Since")
	assert.Zero(t, rec.Waiters)

	require.NoError(t, p.Renew(ctx, key, a, 2*time.Second), "shorten the TTL")
	rec, err = p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.LessOrEqual(t, rec.TTL, 2*time.Second, "Inspect does not renew the record")
	assert.Equal(t, recA.Since, rec.Since, "a renewal keeps Since")

	require.NoError(t, p.Finish(ctx, key, a, 10*time.Second), "end the record: a grace period")
	rec, err = p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.True(t, rec.GracePeriod, "Inspect shows a grace period")
	assert.Equal(t, a, rec.Owner, "an ended record keeps its owner")
	assert.Equal(t, recA.Since, rec.Since, "an ended record keeps Since")
}

func (s *suite) inspectCountsWaiters(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	mustAcquire(t, p, key, a, queueTTL)
	in := listen(t, ctx, p)
	ws := []lock.Wait{in.waiter(queueTTL), in.waiter(queueTTL)}
	for _, w := range ws {
		mustQueue(t, ctx, p, key, w)
	}
	rec, err := p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner)
	assert.Equal(t, 2, rec.Waiters, "Inspect counts the queued callers")
	for _, w := range ws {
		require.NoError(t, p.Leave(ctx, key, w))
	}
	rec, err = p.Inspect(ctx, key)
	require.NoError(t, err)
	assert.Zero(t, rec.Waiters, "callers that left are not counted")
	require.NoError(t, p.Release(ctx, key, a))
}

// listFindsRecordsUnderPrefix: List passes every key under the prefix that
// holds a record, held or ended, once, with its record, and nothing else.
func (s *suite) listFindsRecordsUnderPrefix(t *testing.T) {
	p, ctx := s.p, s.ctx
	prefix := uniqueName(t) + "/"
	held := map[string]string{}
	for _, k := range []string{"a", "b", "c{x}", "d"} {
		o := newOwner()
		mustAcquire(t, p, prefix+k, o, queueTTL)
		held[prefix+k] = o
		t.Cleanup(func() { _ = p.Release(context.Background(), prefix+k, o) })
	}
	require.NoError(t, p.Finish(ctx, prefix+"b", held[prefix+"b"], queueTTL), "b ends: still listed")
	require.NoError(t, p.Release(ctx, prefix+"d", held[prefix+"d"]), "d is released: not listed")
	delete(held, prefix+"d")
	other, o := uniqueName(t)+"-other", newOwner()
	mustAcquire(t, p, other, o, queueTTL)
	t.Cleanup(func() { _ = p.Release(context.Background(), other, o) })

	seen := map[string]lock.Record{}
	err := p.List(ctx, prefix, func(key string, r lock.Record, err error) bool {
		assert.NoError(t, err, "key %q", key)
		_, dup := seen[key]
		assert.False(t, dup, "key %q is listed once", key)
		seen[key] = r
		return true
	})
	require.NoError(t, err)
	require.Len(t, seen, len(held), "List finds the held and ended keys under the prefix, and no other: %v", seen)
	for key, owner := range held {
		r, ok := seen[key]
		if assert.True(t, ok, "key %q is listed", key) {
			assert.Equal(t, owner, r.Owner, "key %q is listed with its owner", key)
			assert.NotZero(t, r.Token, "key %q is listed with its token", key)
			assert.Positive(t, r.TTL, "key %q is listed with its TTL", key)
			assert.Equal(t, key == prefix+"b", r.GracePeriod, "key %q: ended as stored", key)
		}
	}
}

func (s *suite) listStopsWhenAsked(t *testing.T) {
	p, ctx := s.p, s.ctx
	prefix := uniqueName(t) + "/"
	for _, k := range []string{"a", "b", "c"} {
		o := newOwner()
		mustAcquire(t, p, prefix+k, o, queueTTL)
		t.Cleanup(func() { _ = p.Release(context.Background(), prefix+k, o) })
	}
	calls := 0
	err := p.List(ctx, prefix, func(string, lock.Record, error) bool {
		calls++
		return false
	})
	require.NoError(t, err, "a List stopped by its function is not an error")
	assert.Equal(t, 1, calls, "List stops when its function returns false")
}

// forceReleaseFreesKey: ForceRelease deletes another owner's record and
// returns it; the holder finds the lock lost.
func (s *suite) forceReleaseFreesKey(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	recA := mustAcquire(t, p, key, a, queueTTL)
	rec, err := p.ForceRelease(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner, "ForceRelease returns the record it removed")
	assert.Equal(t, recA.Token, rec.Token)
	assert.ErrorIs(t, p.Renew(ctx, key, a, queueTTL), lock.ErrLost, "the holder's renewal finds the lock lost")
	assert.ErrorIs(t, p.Release(ctx, key, a), lock.ErrLost, "the holder's release finds the lock lost")
	b := newOwner()
	recB := mustAcquire(t, p, key, b, queueTTL)
	assert.Greater(t, recB.Token, recA.Token, "the next grant has a greater token")
	require.NoError(t, p.Release(ctx, key, b))
}

func (s *suite) forceReleaseEndsGracePeriod(t *testing.T) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	mustAcquire(t, p, key, a, queueTTL)
	require.NoError(t, p.Finish(ctx, key, a, time.Hour))
	rec, err := p.ForceRelease(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, a, rec.Owner)
	assert.True(t, rec.GracePeriod, "ForceRelease returns the ended record")
	assertFree(t, ctx, p, key, "a forced release ends the grace period")
}

// forceReleaseHandsToWaiter: a forced release hands the key to the first
// waiter, as the holder's Release would.
func (s *suite) forceReleaseHandsToWaiter(t *testing.T) {
	p, ctx := s.p, s.ctx
	in := listen(t, ctx, p)
	key, recA, w := queueBehind(t, ctx, p, in)
	_, err := p.ForceRelease(ctx, key)
	require.NoError(t, err)
	g := in.next(t, "the waiter is told of its grant")
	assert.Equal(t, key, g.Key)
	assert.Equal(t, w.Owner, g.Owner, "ForceRelease hands the key to the first waiter")
	assert.Greater(t, g.Token, recA.Token)
	h := holder(t, p, key)
	assert.Equal(t, w.Owner, h.Owner, "the waiter holds the key")
	require.NoError(t, p.Release(ctx, key, w.Owner))
	quiet(t, ctx, p, in)
}

func (s *suite) inspectBadInput(t *testing.T) {
	p, ctx := s.p, s.ctx
	long := strings.Repeat("k", lock.MaxKeyLen+1)
	for _, key := range []string{"", long} {
		_, err := p.Inspect(ctx, key)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Inspect of a %d-byte key", len(key))
		_, err = p.ForceRelease(ctx, key)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "ForceRelease of a %d-byte key", len(key))
	}
	assert.ErrorIs(t, p.List(ctx, "x", nil), lock.ErrInvalidArgument, "List with a nil function")
}
