package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock/internal/testenv/servers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(servers.Main(m)) // stops the PostgreSQL the test started
}

// TestExample runs the example to its end on the tests' PostgreSQL (the
// test binary's own, or the one LOCK_POSTGRES_DSN names), which the example
// reads from LOCK_POSTGRES_DSN.
func TestExample(t *testing.T) {
	dsn := servers.PostgresDSN(t)
	require.Equal(t, dsn, os.Getenv(servers.EnvPostgresDSN), "the example reads %s", servers.EnvPostgresDSN)
	require.NoError(t, run())
}
