package postgres_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
	"github.com/seed05627090/lock/postgres"
)

// TestHistoryDroppedConnections runs locktest's Workload (locks, semaphore
// holds, an election and its Observe, writes through postgres.Fence; one
// Client stalled, one dead), paced, with every Client's connections to
// PostgreSQL going through a proxy that cuts them all, twice (queries and
// LISTENs alike), and checks the history of every operation with the
// linearizability checker (issue 40). The fenced resource's connections
// do not go through the proxy.
func TestHistoryDroppedConnections(t *testing.T) {
	testenv.SkipShort(t, "a fault test: cuts every connection of the run to PostgreSQL, twice")
	prefix := testPrefix(t)
	cfg, err := pgxpool.ParseConfig(dsn(t))
	require.NoError(t, err)
	proxy, err := faults.NewProxy(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	w := locktest.Workload{
		New: func(t testing.TB) lock.Provider {
			cfg, err := pgxpool.ParseConfig(dsn(t))
			require.NoError(t, err)
			p, err := strconv.Atoi(port)
			require.NoError(t, err)
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			prov, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(prefix))
			require.NoError(t, err)
			return prov
		},
		Fence:  newSQLFence(t, prefix),
		Faults: true,
		Rounds: 1000, // bounded by Stop
		Pace:   100 * time.Millisecond,
		Lease:  time.Second,
		Prefix: "history:",
	}
	r := w.Start(t)
	grants := func(n int64, least time.Duration) {
		want, start := r.Grants()+n, time.Now()
		for end := start.Add(20 * time.Second); (r.Grants() < want || time.Since(start) < least) && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	grants(10, time.Second)
	for range 2 {
		t.Logf("fault: cut %d connections to PostgreSQL", proxy.Cut())
		grants(10, 2*time.Second)
	}
	locktest.CheckHistory(t, r.Stop())
}
