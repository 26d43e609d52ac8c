//go:build go1.24

package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// Issue 31, item 4: a program that uses the PostgreSQL provider runs under
// Go's FIPS 140-3 mode (GODEBUG=fips140=only). The provider hashes long
// inbox names with SHA-256, which the mode approves; the driver (pgx) must
// not need more with the test server's trust authentication.

// TestFIPS140Only runs itself again in a test binary with
// GODEBUG=fips140=only, and there takes a lock and hands it to a waiter
// whose inbox name is long enough to be hashed into its channel's name.
func TestFIPS140Only(t *testing.T) {
	if !testenv.FIPS140Only(t) {
		return
	}
	ctx := ctxTimeout(t, 20*time.Second)
	p := newProvider(t, testPrefix(t))
	// A prefix of 69 bytes: the inbox's name ("<prefix>inbox:<id>") is too
	// long for a channel name, and hashed.
	c := newClient(t, p, lock.WithPrefix("fips-"+randomHex(32)+":"))
	_, second := testenv.HandOn(t, ctx, c, uniqueName(t))
	require.NoError(t, second.Release(ctx))
}
