package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// etcdMember is the etcd member of the tests: one member, in the test
// process (go.etcd.io/etcd/server/v3/embed, as the etcd module's tests
// run theirs), started by the first test that needs it and stopped by
// TestMain.
var etcdMember struct {
	once     sync.Once
	e        *embed.Etcd
	dir      string
	endpoint string // host:port, as -etcd takes it
	err      error
}

// etcdEndpoint returns the test member's client address, starting it
// first.
func etcdEndpoint(t *testing.T) string {
	t.Helper()
	etcdMember.once.Do(func() {
		etcdMember.dir, etcdMember.err = os.MkdirTemp("", "lockctl-etcd-")
		if etcdMember.err == nil {
			etcdMember.e, etcdMember.endpoint, etcdMember.err = startEtcd(etcdMember.dir)
		}
	})
	require.NoError(t, etcdMember.err, "starting an etcd member in the test process")
	return etcdMember.endpoint
}

func stopEtcd() {
	if etcdMember.e != nil {
		etcdMember.e.Close()
	}
	if etcdMember.dir != "" {
		_ = os.RemoveAll(etcdMember.dir)
	}
}

// startEtcd starts a one-member cluster with its data in dir, on free
// loopback ports: a 50ms heartbeat and a 500ms election timeout (so a
// minimum lease of 1s), no fsync, no logs.
func startEtcd(dir string) (*embed.Etcd, string, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	client := "127.0.0.1:" + strconv.Itoa(ports[0])
	curl, _ := url.Parse("http://" + client)
	purl, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ports[1]))
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "m0", dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, client, nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("etcd member in %s not ready within 60s", dir)
	}
}

// newEtcdClient returns an etcd client of the test member, closed at the
// end of the test.
func newEtcdClient(t *testing.T, endpoint string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newEtcdFixture returns a fixture of the test member, under a namespace of
// the test's own (given to lockctl with -namespace), whose keys are deleted
// at the end of the test.
func newEtcdFixture(t *testing.T) *fixture {
	ep := etcdEndpoint(t)
	ns := "lockctl-test/" + randomHex(6) + "/"
	cli := newEtcdClient(t, ep)
	ctx := context.Background()
	f := &fixture{t: t, prefix: "lockctl-test:" + randomHex(6) + ":", flags: []string{"-etcd", ep, "-namespace", ns},
		where: fmt.Sprintf("in etcd under the namespace %q", ns), ttlStep: time.Second,
		hint: "lockctl -etcd <endpoints> -namespace <namespace> -prefix <prefix> ls"}
	f.provider = func() lock.Provider {
		c := newEtcdClient(t, ep)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		p, err := etcd.NewProvider(pctx, c, etcd.WithNamespace(ns))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() }) // before its etcd client's Close
		return p
	}
	record := func(key string) string { return ns + "r/" + key } // where the provider keeps a record
	f.corrupt = func(key, value string) {
		_, err := cli.Put(ctx, record(key), value)
		require.NoError(t, err)
	}
	f.raw = func(key string) string {
		resp, err := cli.Get(ctx, record(key))
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, "a value at %q", record(key))
		return string(resp.Kvs[0].Value)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Delete(ctx, ns, clientv3.WithPrefix()); err != nil {
			t.Errorf("deleting the keys under %q: %v", ns, err)
		}
	})
	return f
}

// TestEmptyListOnEtcdNamesNamespace runs ls on etcd under another namespace
// than the services': it finds nothing, and says to give lockctl the
// namespace they pass to etcd.WithNamespace, with -namespace (issue 31: it
// named -prefix alone, which does not reach another namespace's locks).
func TestEmptyListOnEtcdNamesNamespace(t *testing.T) {
	f := newEtcdFixture(t)
	c := f.client()
	l, err := c.Acquire(context.Background(), "held-elsewhere", lock.Options{})
	require.NoError(t, err)
	defer l.Release(context.Background())

	other := "lockctl-test/" + randomHex(6) + "/"
	stdout, stderr, code := runArgs("-etcd", etcdEndpoint(t), "-namespace", other, "-prefix", f.prefix, "ls")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, fmt.Sprintf("in etcd under the namespace %q", other), "where it looked")
	assert.Contains(t, stdout, "etcd.WithNamespace", "the option the services pass")
	assert.Contains(t, stdout, "-namespace <namespace>", "the flag that gives lockctl their namespace")

	stdout, stderr, code = f.lockctl("ls") // the services' namespace
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "held-elsewhere", "the lock is listed under the services' namespace")
}
