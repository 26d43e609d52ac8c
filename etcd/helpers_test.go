package etcd_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(memberEnv); spec != "" {
		os.Exit(runMember(spec)) // a member of the fault test's cluster
	}
	if spec := os.Getenv(clientEnv); spec != "" {
		os.Exit(runClient(spec)) // a client process of the fault test
	}
	code := servers.Main(m).Run() // stops the Redis the benchmarks started
	shared.stop()
	stopBenchClusters()
	if code == 0 {
		if err := goleak.Find(leakIgnores...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakIgnores are goroutines of etcd's own that outlive a closed member:
// besides opencensus's worker, the HTTP connections between the members of
// a cluster in this process (the benchmarks' 3 members), which their Close
// leaves open at both ends. The provider speaks gRPC, not net/http.
var leakIgnores = []goleak.Option{
	goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
}

// The test environment's helpers (internal/testenv of the root module),
// under the short names the tests use.
var (
	uniqueName    = testenv.Name      // a lock name no other test uses
	randomHex     = testenv.RandomHex // n random bytes in hex
	newOwner      = testenv.NewOwner  // a new owner
	ctxTimeout    = testenv.Context   // a context that ends after d, or with the test
	newLockClient = testenv.NewClient // a lock.Client closed with the test
	notices       = testenv.Notices   // the channel of the notices of an inbox, until the test ends
	freePort      = faults.FreePort   // a loopback port nobody listened on a moment ago
)

// member is an etcd member running in this process.
type member struct {
	e        *embed.Etcd
	endpoint string // its client URL
}

// memberSpec says how to start one etcd member: in this process (start),
// or in a child process of its own (see faults_test.go), from the same
// spec.
type memberSpec struct {
	Name       string
	Dir        string
	ClientPort int
	PeerPort   int    // where it listens for its peers
	PeerURL    string // what it tells its peers: a proxy's address in the fault tests; its own by default
	Cluster    string // the initial cluster, name=peerURL,...; itself alone by default
	TickMs     uint
	ElectionMs uint
	Fsync      bool
	Logs       bool // errors on stderr (a child process's, kept in a file); none otherwise
}

// start starts the member and waits until it is ready.
func (s memberSpec) start() (*embed.Etcd, error) {
	curl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", s.ClientPort))
	lpurl, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", s.PeerPort))
	apurl := lpurl
	if s.PeerURL != "" {
		apurl, _ = url.Parse(s.PeerURL)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = s.Name, s.Dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*lpurl}, []url.URL{*apurl}
	cfg.InitialCluster = s.Cluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(s.Name)
	}
	cfg.InitialClusterToken = "lock-test"
	cfg.TickMs, cfg.ElectionMs = s.TickMs, s.ElectionMs
	cfg.UnsafeNoFsync = !s.Fsync
	cfg.LogLevel = "error"
	if !s.Logs {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member %s in %s not ready within 60s", s.Name, s.Dir)
	}
}

// startMember starts a one-member cluster in this process, with its data in
// dir, on free loopback ports: a 10ms heartbeat and a 100ms election
// timeout, so that its minimum lease is 1s, and no fsync (the tests'
// data is thrown away).
func startMember(dir string) (*member, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	e, err := memberSpec{Name: "m0", Dir: dir, ClientPort: cp, PeerPort: pp, TickMs: 10, ElectionMs: 100}.start()
	if err != nil {
		return nil, err
	}
	return &member{e: e, endpoint: fmt.Sprintf("http://127.0.0.1:%d", cp)}, nil
}

// shared is the member the package's tests share, started by the first
// test that needs it and stopped after the last.
var shared sharedMember

type sharedMember struct {
	once sync.Once
	m    *member
	dir  string
	err  error
}

func (s *sharedMember) stop() {
	if s.m != nil {
		s.m.e.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// endpoint returns the client URL of the shared member, starting it first.
func endpoint(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "lock-etcd-test-")
		if shared.err == nil {
			shared.m, shared.err = startMember(shared.dir)
		}
	})
	require.NoError(t, shared.err, "starting an etcd member in the test process")
	return shared.m.endpoint
}

// newClient returns an etcd client of its own (another process, as far
// as the server can tell) on endpoints, closed at the end of the test.
func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newProvider returns a provider with namespace ns on a client of its own
// to the shared member, closed (before its client) at the end of the test.
func newProvider(t testing.TB, ns string, opts ...etcd.Option) *etcd.Provider {
	t.Helper()
	cli := newClient(t, endpoint(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := etcd.NewProvider(ctx, cli, append([]etcd.Option{etcd.WithNamespace(ns)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// testNamespace returns a namespace of the test's own.
func testNamespace() string { return "lock-t" + randomHex(4) + "/" }
