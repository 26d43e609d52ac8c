package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dsn is the server the tests use: LOCK_POSTGRES_DSN, or the local one.
func dsn() string {
	if d := os.Getenv("LOCK_POSTGRES_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// requirePostgres reports whether a missing server must fail the test
// instead of skipping it: in CI, or when LOCK_REQUIRE_POSTGRES is set.
func requirePostgres() bool {
	return os.Getenv("CI") != "" || os.Getenv("LOCK_REQUIRE_POSTGRES") != ""
}

// needServer skips the test when the server does not answer, or fails it
// in CI.
func needServer(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn())
	if err != nil {
		if requirePostgres() {
			t.Fatalf("PostgreSQL at %s is required (CI or LOCK_REQUIRE_POSTGRES set): %v", dsn(), err)
		}
		t.Skipf("no PostgreSQL at %s: %v (set LOCK_POSTGRES_DSN)", dsn(), err)
	}
	_ = conn.Close(ctx)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
		pool, err := pgxpool.New(ctx, dsn())
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
	pool, err := pgxpool.New(ctx, dsn())
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

// newClient returns a Client on p, closed at the end of the test.
func newClient(t testing.TB, p lock.Provider, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(p, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// uniqueName returns a lock name no other test uses.
func uniqueName(t testing.TB) string {
	return strings.ReplaceAll(t.Name(), "/", ":") + ":" + randomHex(4)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
