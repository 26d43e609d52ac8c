package postgres_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/postgres"
)

// TestDeadlines runs faults.Deadlines on PostgreSQL: every call returns by
// its context's deadline (or MaxWait) whatever the server behind a proxy
// does: refuses, never answers, answers late, drops the connection (issue
// 38 item 1).
func TestDeadlines(t *testing.T) {
	prefix := testPrefix(t)
	u, err := url.Parse(dsn(t))
	require.NoError(t, err, "the tests' DSN (LOCK_POSTGRES_DSN) must be a URL")
	target := u.Host
	if _, _, err := net.SplitHostPort(target); err != nil {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	p, err := faults.NewProxy(target)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	faults.Deadlines(t, p, func(t *testing.T) *lock.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(u.String())
		require.NoError(t, err)
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pp, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(prefix))
		require.NoError(t, err)
		return newClient(t, pp)
	})
}
