package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

// Issue 7, item 3: a server error (OOM, READONLY...) reaches the caller as
// that error, wrapped with the lock's key; it is not reported as a corrupt
// record (the scripts used to turn every error of INCR on the fencing counter
// into ErrCorruptRecord).

// TestServerErrOOM fills a Redis with maxmemory 2mb and noeviction until
// writes fail with OOM, then acquires a free lock, with and without Wait and
// through Do: the error is Redis's OOM, names the lock's key, and is not a
// corrupt record. A lock held before memory filled up is neither lost nor
// reported corrupt when renewed and released.
func TestServerErrOOM(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 15*time.Second)
	direct := newRedis(t, srv.Addr)
	c := newClient(t, newRedis(t, srv.Addr))

	held, err := c.Acquire(ctx, "servererr-held", lock.Options{Lease: 10 * time.Second})
	require.NoError(t, err)

	require.NoError(t, direct.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, direct.ConfigSet(ctx, "maxmemory", "2mb").Err())
	fillUntilOOM(t, ctx, direct)
	fault(t, "Redis at maxmemory with noeviction: writes fail with OOM")

	for _, wait := range []bool{false, true} {
		name := "servererr-oom-" + strconv.FormatBool(wait)
		l, err := c.Acquire(ctx, name, lock.Options{Wait: wait, MaxDuration: 5 * time.Second})
		assert.Nil(t, l, "a lock granted with Redis out of memory")
		expectServerErr(t, err, c.Key(name), "OOM", fmt.Sprintf("Acquire (wait %v)", wait))

		err = c.Do(ctx, name, lock.Options{Wait: wait, MaxDuration: 5 * time.Second}, func(context.Context) error {
			t.Error("Do ran its function without the lock")
			return nil
		})
		expectServerErr(t, err, c.Key(name), "OOM", fmt.Sprintf("Do (wait %v)", wait))
	}

	if err := held.Extend(ctx, 10*time.Second); err != nil {
		expectServerErr(t, err, held.Key(), "OOM", "Extend of a lock held before OOM")
	}
	expect(t, held.Err() == nil, "a lock held before OOM was lost: %v", held.Err())
	err = held.Release(ctx)
	expect(t, !errors.Is(err, lock.ErrCorruptRecord) && !errors.Is(err, lock.ErrLost),
		"Release of a lock held before OOM: %v", err)
}

// TestServerErrReadonly makes the server a replica of a second one (as a
// failover does to a demoted primary) and acquires a lock on it: the error
// is Redis's READONLY, names the lock's key, and is not a corrupt record.
func TestServerErrReadonly(t *testing.T) {
	primary := faults.StartRedis(t)
	replica := faults.StartRedis(t)
	ctx := ctxTimeout(t, 15*time.Second)
	direct := newRedis(t, replica.Addr)
	host, port, ok := strings.Cut(primary.Addr, ":")
	require.True(t, ok)
	// Sync at once (the default waits 5s for more replicas).
	require.NoError(t, newRedis(t, primary.Addr).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	require.NoError(t, direct.Do(ctx, "REPLICAOF", host, port).Err())
	fault(t, "the server becomes a read-only replica")

	// Wait until the replica has synced and refuses writes with READONLY
	// (not LOADING or another transient reply).
	for {
		err := direct.Set(ctx, "servererr-probe", "1", 0).Err()
		if err != nil && strings.HasPrefix(err.Error(), "READONLY") {
			info, ierr := direct.Info(ctx, "replication").Result()
			if ierr == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the replica did not refuse writes with READONLY in time (last: %v)", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	c := newClient(t, newRedis(t, replica.Addr))
	for _, wait := range []bool{false, true} {
		name := "servererr-readonly-" + strconv.FormatBool(wait)
		start := time.Now()
		l, err := c.Acquire(ctx, name, lock.Options{Wait: wait, MaxDuration: 5 * time.Second})
		t.Logf("Acquire (wait %v) returned after %v", wait, time.Since(start).Round(time.Millisecond))
		assert.Nil(t, l, "a lock granted by a read-only replica")
		expectServerErr(t, err, c.Key(name), "READONLY", fmt.Sprintf("Acquire (wait %v)", wait))
	}
}

// fillUntilOOM writes values, 32 KiB and then smaller, until Redis refuses
// even a small write, a fencing counter's INCR, with OOM.
func fillUntilOOM(t *testing.T, ctx context.Context, rc *redis.Client) {
	t.Helper()
	i := 0
	for _, size := range []int{32 << 10, 1 << 10, 64, 8} {
		value := strings.Repeat("x", size)
		for ; i < 100000; i++ {
			err := rc.Set(ctx, "servererr-fill:"+strconv.Itoa(i), value, 0).Err()
			if err != nil {
				require.Contains(t, err.Error(), "OOM", "filling Redis failed otherwise than with OOM")
				break
			}
		}
	}
	// Memory in use moves a little (client buffers): put maxmemory well
	// below it, so that every write from here on is refused.
	info, err := rc.Info(ctx, "memory").Result()
	require.NoError(t, err)
	used := int64(0)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, err = strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
		}
	}
	require.Positive(t, used, "INFO memory has used_memory")
	require.NoError(t, rc.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*3/4, 10)).Err())
	err = rc.Incr(ctx, "servererr-probe").Err()
	require.Error(t, err, "INCR of a new key succeeds after %d writes, with maxmemory under the memory in use", i)
	require.Contains(t, err.Error(), "OOM")
}

// expectServerErr checks the error of an operation on the lock under key that
// Redis refused with a reply starting with code.
func expectServerErr(t *testing.T, err error, key, code, what string) {
	t.Helper()
	if !expect(t, err != nil, "%s succeeded; want Redis's %s error", what, code) {
		return
	}
	t.Logf("%s: %v", what, err)
	var rec *lock.RecordError
	expect(t, !errors.Is(err, lock.ErrCorruptRecord) && !errors.As(err, &rec),
		"%s: a server error reported as a corrupt record: %v", what, err)
	expect(t, !errors.Is(err, lock.ErrNotAcquired) && !errors.Is(err, lock.ErrLost),
		"%s: a server error reported as a lock state: %v", what, err)
	expect(t, strings.Contains(err.Error(), code), "%s: the error does not say %s: %v", what, code, err)
	expect(t, strings.Count(err.Error(), key) == 1, "%s: the error does not name the key %q once: %v", what, key, err)
	var rerr redis.Error
	if expect(t, errors.As(err, &rerr), "%s: errors.As(err, *redis.Error) fails: %T %v", what, err, err) {
		expect(t, strings.HasPrefix(rerr.Error(), code), "%s: the Redis error is %q, want %s", what, rerr.Error(), code)
	}
}
