package postgres_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestNothingKeptPerName: a lock per resource, 100,000 acquire+release
// cycles on distinct names (and waits that queued), leaves no row in the
// provider's tables: tokens come from one sequence (issue 17).
func TestNothingKeptPerName(t *testing.T) {
	testenv.SkipShort(t, "a footprint test: 100,000 acquire+release cycles (~90 s)")
	prefix := testPrefix(t)
	c := newClient(t, newProvider(t, prefix))
	ctx := ctxTimeout(t, 5*time.Minute)
	const n = 100_000
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				l, err := c.Acquire(ctx, "order:"+strconv.FormatInt(i, 10), lock.Options{})
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Waits that queued behind a holder and were handed the lock.
	for i := range 50 {
		name := "queued:" + strconv.Itoa(i)
		h, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: time.Minute})
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		for {
			st, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			if st.Waiters > 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		require.NoError(t, h.Release(ctx))
		require.NoError(t, <-got)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	pool := newPool(t)
	for _, table := range []string{"records", "queue"} {
		var rows int64
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*) FROM "+pgx.Identifier{prefix + table}.Sanitize()).Scan(&rows))
		assert.Zero(t, rows, "rows left in %s%s after %d names", prefix, table, n)
	}
}
