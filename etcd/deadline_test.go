package etcd_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/faults"
)

// TestDeadlines runs faults.Deadlines on etcd: every call returns by its
// context's deadline (or MaxWait) whatever the member behind a proxy does:
// refuses, never answers, answers late, drops the connection (issue 38
// item 1).
func TestDeadlines(t *testing.T) {
	u, err := url.Parse(endpoint(t))
	require.NoError(t, err)
	p, err := faults.NewProxy(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	ns := testNamespace()
	faults.Deadlines(t, p, func(t *testing.T) *lock.Client {
		cli := newClient(t, u.String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ep, err := etcd.NewProvider(ctx, cli, etcd.WithNamespace(ns))
		require.NoError(t, err)
		t.Cleanup(func() { _ = ep.Close() })
		return newLockClient(t, ep)
	})
}
