package lock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The memory provider's own behaviour, beside the conformance suite.
// (Its footprint is in footprint_test.go.)

// TestMemoryProviderLen checks that the memory provider keeps nothing behind.
func TestMemoryProviderLen(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	m := lock.NewMemoryProvider()
	o := newOwner()
	for i := range 10 {
		mustAcquire(t, m, fmt.Sprint("k", i), o, time.Minute)
	}
	require.Equal(t, 10, lock.MemoryLen(m))
	for i := range 5 {
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o))
	}
	for i := 5; i < 10; i++ {
		require.NoError(t, m.Finish(ctx, fmt.Sprint("k", i), o, time.Minute))
		require.NoError(t, m.Release(ctx, fmt.Sprint("k", i), o), "the owner can delete its ended record")
	}
	assert.Zero(t, lock.MemoryLen(m), "no record is left after every key was released")

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
	assert.Zero(t, lock.MemoryLen(m), "no record is left after concurrent acquire/release")
}

// TestMemoryProviderFakeClock expires records by moving a fake clock.
func TestMemoryProviderFakeClock(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	clock := testenv.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	m := lock.NewMemoryProvider(lock.MemoryClock(clock))
	a, o := newOwner(), newOwner()

	mustAcquire(t, m, "k", a, time.Minute)
	clock.Advance(59 * time.Second)
	h := holder(t, m, "k")
	assert.Equal(t, a, h.Owner, "the record lives until its TTL has passed")
	assert.Equal(t, time.Second, h.TTL, "the TTL is measured by the provider's clock")
	clock.Advance(time.Second)
	assert.Zero(t, lock.MemoryLen(m), "the record expires when the clock reaches its deadline")
	mustAcquire(t, m, "k", o, time.Minute)
	assert.ErrorIs(t, m.Release(ctx, "k", a), lock.ErrLost, "the expired owner holds nothing")

	require.NoError(t, m.Finish(ctx, "k", o, 10*time.Second))
	clock.Advance(9 * time.Second)
	rec, err := m.Acquire(ctx, "k", a, time.Minute)
	require.NoError(t, err)
	assert.True(t, rec.GracePeriod, "the grace period lasts its TTL")
	clock.Advance(time.Second)
	rec = mustAcquire(t, m, "k", a, time.Minute)
	assert.False(t, rec.GracePeriod, "the key is free after the grace period")

	require.NoError(t, m.Renew(ctx, "k", a, 30*24*time.Hour))
	clock.Advance(29 * 24 * time.Hour)
	assert.Equal(t, a, holder(t, m, "k").Owner, "a 30-day TTL outlives 29 days")
	clock.Advance(24 * time.Hour)
	assert.Zero(t, lock.MemoryLen(m), "a 30-day TTL expires after 30 days")
}
