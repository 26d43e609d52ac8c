package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
	"github.com/seed05627090/lock/postgres"
)

// TestConformance runs the provider conformance suite. Each provider New
// returns has a pool of its own, standing in for another process.
func TestConformance(t *testing.T) {
	prefix := testPrefix(t)
	locktest.Run(t, locktest.Backend{
		New:     func(t testing.TB) lock.Provider { return newProvider(t, prefix) },
		Fence:   func(t testing.TB) locktest.Fence { return newSQLFence(t, prefix) },
		Expires: true,
		// PostgreSQL cannot tell whether anyone listens on a channel.
		SkipsUnlistened: false,
		// Two Listens on one inbox are two LISTENs on one channel.
		ExclusiveInbox: false,
		Remote:         true,
	})
}

// sqlFence is the fenced resource of the history check on PostgreSQL: a
// table of values, each written in the transaction that advances its
// postgres.Fence.
type sqlFence struct {
	pool   *pgxpool.Pool
	fence  postgres.Fence
	values string
}

// newSQLFence makes the tables of a sqlFence under prefix, dropped at the
// end of the test.
func newSQLFence(t testing.TB, prefix string) locktest.Fence {
	t.Helper()
	f := sqlFence{pool: newPool(t), fence: postgres.Fence{Table: prefix + "fences"}, values: prefix + "fenced"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, f.fence.CreateTable(ctx, f.pool))
	_, err := f.pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+f.values+" (name text PRIMARY KEY, value text NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := f.pool.Exec(ctx, "DROP TABLE IF EXISTS "+f.values+", "+prefix+"fences")
		require.NoError(t, err)
	})
	return f
}

func (f sqlFence) Write(ctx context.Context, name string, token uint64, value string) error {
	return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if err := f.fence.Advance(ctx, tx, name, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+f.values+" (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value", name, value)
		return err
	})
}

func (f sqlFence) Read(ctx context.Context, name string) (string, error) {
	var v string
	err := f.pool.QueryRow(ctx, "SELECT value FROM "+f.values+" WHERE name = $1", name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return v, err
}
