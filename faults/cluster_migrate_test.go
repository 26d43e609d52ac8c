package faults_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestClusterSlotMigration moves the hash slot of a lock to another node
// (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE of its keys, SETSLOT NODE)
// while six goroutines of three Clients take it in turn. The lock's fencing
// counter is a key of the same slot, so it moves with it: the tokens,
// recorded under the lock in grant order, strictly increase across the
// move, the lock never has two holders, and it is granted on the new node
// afterwards (issue 17). Errors while the slot moves are allowed (a script
// whose keys are split between the nodes gets TRYAGAIN) and counted.
func TestClusterSlotMigration(t *testing.T) {
	addrs := startCluster(t)
	ctx := ctxTimeout(t, 60*time.Second)
	cc := newClusterRedis(t, addrs)
	const name = "migrate"
	key := keyOf(name)
	_, fence, _, err := lock.RedisKeys(key)
	require.NoError(t, err)
	slot, src, dst := slotMove(t, ctx, cc, addrs, key)
	var (
		mu       sync.Mutex
		tokens   []uint64
		holders  atomic.Int32
		overlaps atomic.Int64
		errs     atomic.Int64
		after    atomic.Int64 // grants once the slot is on dst
		moved    atomic.Bool
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for range 3 {
		c := newClusterLockClient(t, addrs, lock.WithPollInterval(50*time.Millisecond))
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 5 * time.Second, Lease: 2 * time.Second})
					if err != nil {
						errs.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if holders.Add(1) > 1 {
						overlaps.Add(1)
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					if moved.Load() {
						after.Add(1)
					}
					time.Sleep(time.Millisecond)
					holders.Add(-1)
					if err := l.Release(ctx); err != nil {
						errs.Add(1)
					}
				}
			}()
		}
	}

	time.Sleep(500 * time.Millisecond)
	fault(t, "move the lock's slot to another node")
	migrated := moveSlot(t, ctx, addrs, slot, src, dst, 20*time.Millisecond) // traffic meanwhile, with the slot split
	moved.Store(true)
	t.Logf("slot %d moved from %s to %s (%d keys migrated)", slot, src, dst, migrated)

	deadline := time.Now().Add(20 * time.Second)
	for after.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	backwards := 0
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			backwards++
			t.Logf("token %d after %d (grant %d)", tokens[i], tokens[i-1], i)
		}
	}
	t.Logf("%d grants (%d after the move), %d errors, %d overlaps, %d tokens not above the one before", len(tokens), after.Load(), errs.Load(), overlaps.Load(), backwards)
	expect(t, overlaps.Load() == 0, "%d overlapping holds", overlaps.Load())
	expect(t, backwards == 0, "%d tokens were not above the token before", backwards)
	expect(t, after.Load() >= 20, "only %d grants after the move", after.Load())
	n, err := newRedis(t, dst).Exists(ctx, fence).Result()
	require.NoError(t, err)
	expect(t, n == 1, "the fencing counter %q is not on the node the slot moved to", fence)
	stats.grants.Add(int64(len(tokens)))
}
