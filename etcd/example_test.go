package etcd_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// A lock.Client over etcd, to try the provider without an etcd server: an
// etcd member started in this process (go.etcd.io/etcd/server/v3/embed),
// listening on loopback only, with its data in a temporary directory. In
// production, give clientv3.Config the endpoints of your cluster's members
// instead (see the README's Use).
func ExampleNewProvider() {
	dir, err := os.MkdirTemp("", "lock-etcd-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir) // last: after the member has stopped

	// One member, alone in its cluster. Port 0 takes a free port; the
	// member is reached at the address it listens on.
	loopback, _ := url.Parse("http://127.0.0.1:0")
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "example", dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*loopback}, []url.URL{*loopback}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*loopback}, []url.URL{*loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true // its data is thrown away
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	member, err := embed.StartEtcd(cfg)
	if err != nil {
		panic(err)
	}
	defer member.Close() // stops the member and its listeners
	select {
	case <-member.Server.ReadyNotify():
	case err := <-member.Err():
		panic(err)
	case <-time.After(30 * time.Second):
		panic("etcd member not ready within 30s")
	}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{member.Clients[0].Addr().String()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	ctx := context.Background()
	p, err := etcd.NewProvider(ctx, cli)
	if err != nil {
		panic(err)
	}
	defer p.Close() // after c.Close: revokes the provider's session lease

	c, err := lock.NewClient(p)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	err = c.Do(ctx, "nightly-report", lock.Options{}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		fmt.Println("holding", l.Key(), "with a fencing token:", l.Token() > 0)
		return nil
	})
	fmt.Println("Do returned:", err)
	// Output:
	// holding lock:{nightly-report} with a fencing token: true
	// Do returned: <nil>
}
