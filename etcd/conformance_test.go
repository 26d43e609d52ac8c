package etcd_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/locktest"
)

// TestConformance runs the provider conformance suite against a member
// started in the test process. Each provider New returns has a client of
// its own, standing in for another process.
func TestConformance(t *testing.T) {
	ns := testNamespace()
	locktest.Run(t, locktest.Backend{
		New:             func(t testing.TB) lock.Provider { return newProvider(t, ns) },
		Fence:           func(t testing.TB) locktest.Fence { return etcdFence{newClient(t, endpoint(t)), ns} },
		Expires:         true,
		SkipsUnlistened: true,
		// Two Listens on one inbox are two watches of its messages.
		ExclusiveInbox: false,
		Remote:         true,
		TTLGranularity: etcd.TTLGranularity,
	})
}

// etcdFence is the fenced resource of the history check on etcd: a key of
// values under the namespace, each written in the transaction of
// etcd.Fence.
type etcdFence struct {
	cli *clientv3.Client
	ns  string
}

func (f etcdFence) Write(ctx context.Context, name string, token uint64, value string) error {
	_, err := etcd.Fence(ctx, f.cli, f.ns+"fence/"+name, token, clientv3.OpPut(f.ns+"value/"+name, value))
	return err
}

func (f etcdFence) Read(ctx context.Context, name string) (string, error) {
	resp, err := f.cli.Get(ctx, f.ns+"value/"+name)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Value), nil
}
