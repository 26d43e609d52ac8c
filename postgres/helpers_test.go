package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(servers.Main(m)) // stops the PostgreSQL the tests started
}

// The test environment's helpers (internal/testenv of the root module,
// which this module may import: Go's internal rule goes by import path), under
// the short names the tests use.
var (
	dsn        = servers.PostgresDSN // LOCK_POSTGRES_DSN, or a server of the test binary's own
	randomHex  = testenv.RandomHex   // n random bytes in hex
	uniqueName = testenv.Name        // a lock name no other test uses
	ctxTimeout = testenv.Context     // a context that ends after d, or with the test
	newClient  = testenv.NewClient   // a Client closed with the test
	notices    = testenv.Notices     // the channel of the notices of an inbox, until the test ends
)

// needServer skips the test when there is no server (no PostgreSQL
// binaries, and no LOCK_POSTGRES_DSN), or fails it in CI and when
// LOCK_REQUIRE_POSTGRES is set.
func needServer(t testing.TB) {
	t.Helper()
	dsn(t)
}

// testPrefix returns a table prefix of the test's own, whose objects are
// dropped at the end of the test, after everything else of it is closed.
// It skips the test when there is no server (fails it in CI).
func testPrefix(t testing.TB) string {
	t.Helper()
	needServer(t)
	prefix := "lock_t" + randomHex(4) + "_"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, dsn(t))
		if err != nil {
			t.Errorf("dropping %s*: %v", prefix, err)
			return
		}
		defer pool.Close()
		p, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(prefix))
		if err == nil {
			err = p.Drop(ctx)
		}
		if err != nil {
			t.Errorf("dropping %s*: %v", prefix, err)
		}
	})
	return prefix
}

// newPool returns a pool of its own (another process, as far as the
// server can tell), closed at the end of the test.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newProvider returns a provider with the given prefix on a new pool.
func newProvider(t testing.TB, prefix string, opts ...postgres.Option) *postgres.Provider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := postgres.NewProvider(ctx, newPool(t), append([]postgres.Option{postgres.WithTablePrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return p
}
