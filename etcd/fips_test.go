//go:build go1.24

package etcd_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/testenv"
)

// Issue 31, item 4: a program that uses the etcd provider runs under Go's
// FIPS 140-3 mode (GODEBUG=fips140=only). etcd's server does not (it
// makes member IDs with SHA-1): the member runs in the test's first
// process, outside the mode, and the process in the mode is a client.

// fipsEndpointEnv tells the process that TestFIPS140Only runs in
// FIPS 140-3 mode the endpoint of the member of the first.
const fipsEndpointEnv = "LOCK_TEST_FIPS_ETCD_ENDPOINT"

// TestFIPS140Only runs itself again in a test binary with
// GODEBUG=fips140=only, and there takes a lock on the shared member of the
// first process, and hands it to a waiter.
func TestFIPS140Only(t *testing.T) {
	ep := os.Getenv(fipsEndpointEnv)
	if ep == "" {
		ep = endpoint(t)
	}
	if !testenv.FIPS140Only(t, fipsEndpointEnv+"="+ep) {
		return
	}
	ctx := ctxTimeout(t, 30*time.Second)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := etcd.NewProvider(pctx, newClient(t, ep), etcd.WithNamespace(testNamespace()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	_, second := testenv.HandOn(t, ctx, testenv.NewClient(t, p), uniqueName(t))
	require.NoError(t, second.Release(ctx))
}
