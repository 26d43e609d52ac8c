package etcd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/internal/faults"
)

// memberEnv, in a child process's environment, holds the memberSpec of the
// member the process runs instead of the tests (see TestMain).
const memberEnv = "LOCK_ETCD_MEMBER"

// runMember runs the member of spec until the parent closes its stdin or
// sends SIGTERM, and returns the exit code. It says "ready" on stdout once
// the member serves.
func runMember(spec string) int {
	var s memberSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "member spec:", err)
		return 2
	}
	e, err := s.start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "member start:", err)
		return 1
	}
	fmt.Println("ready")
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-sigs:
	case <-eof:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "member:", err)
	}
	e.Close()
	return 0
}

// The fault tests' cluster: 3 members, a 50ms heartbeat and a 500ms
// election timeout (so a minimum lease of 1s).
const (
	faultTick     = 50
	faultElection = 500 * time.Millisecond
)

// cluster is 3 etcd members, each in a child process of its own, so that
// one can be SIGKILLed or SIGSTOPped; each member's peers reach it through
// a proxy in this process, so that its peer traffic can be held.
type cluster struct {
	t         *testing.T
	specs     []memberSpec
	procs     []*exec.Cmd // nil while down
	stdins    []io.WriteCloser
	proxies   []*faults.Proxy // before each member's peer port
	endpoints []string
	ids       []uint64 // member IDs, by index
	admin     *clientv3.Client
}

// startCluster starts the 3 members and waits until they serve.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	const n = 3
	c := &cluster{t: t, procs: make([]*exec.Cmd, n), stdins: make([]io.WriteCloser, n)}
	t.Cleanup(c.stop)
	var peers []string
	for i := range n {
		cp, err := freePort()
		require.NoError(t, err)
		pp, err := freePort()
		require.NoError(t, err)
		px, err := faults.NewProxy("127.0.0.1:" + strconv.Itoa(pp))
		require.NoError(t, err)
		c.proxies = append(c.proxies, px)
		name := "m" + strconv.Itoa(i)
		c.specs = append(c.specs, memberSpec{
			Name: name, Dir: filepath.Join(t.TempDir(), name), ClientPort: cp, PeerPort: pp,
			PeerURL: "http://" + px.Addr(), TickMs: faultTick, ElectionMs: uint(faultElection / time.Millisecond), Logs: true,
		})
		c.endpoints = append(c.endpoints, "http://127.0.0.1:"+strconv.Itoa(cp))
		peers = append(peers, name+"=http://"+px.Addr())
	}
	for i := range c.specs {
		c.specs[i].Cluster = strings.Join(peers, ",")
	}
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- c.spawn(i) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	c.admin = newFaultClient(t, c.endpoints...)
	c.ids = make([]uint64, n)
	for i, ep := range c.endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.admin.Status(ctx, ep)
		cancel()
		require.NoError(t, err)
		c.ids[i] = st.Header.MemberId
	}
	return c
}

// newFaultClient is an etcd client whose gRPC keepalive finds a dead or
// stopped member within about 2s, so that calls move to another one.
func newFaultClient(t testing.TB, endpoints ...string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// spawn starts member i's process and waits until it says it is ready.
func (c *cluster) spawn(i int) error {
	spec, _ := json.Marshal(c.specs[i])
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memberEnv+"="+string(spec))
	log, err := os.OpenFile(c.specs[i].Dir+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line) == "ready"
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("member %d did not start (see %s.log)", i, c.specs[i].Dir)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("member %d not ready within 60s", i)
	}
	c.procs[i], c.stdins[i] = cmd, in
	return nil
}

// kill SIGKILLs member i and waits for its process.
func (c *cluster) kill(i int) {
	if p := c.procs[i]; p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
		_ = c.stdins[i].Close()
		c.procs[i] = nil
	}
}

func (c *cluster) signal(i int, sig syscall.Signal) {
	if p := c.procs[i]; p != nil {
		_ = p.Process.Signal(sig)
	}
}

func (c *cluster) stop() {
	for i := range c.procs {
		c.signal(i, syscall.SIGCONT)
		c.kill(i)
	}
	for _, px := range c.proxies {
		_ = px.Close()
	}
}

// leader returns the index of the member that the members up say leads,
// waiting up to 20s for one.
func (c *cluster) leader() (int, error) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, ep := range c.endpoints {
			if c.procs[i] == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			st, err := c.admin.Status(ctx, ep)
			cancel()
			if err != nil || st.Leader == 0 {
				continue
			}
			if j := slices.Index(c.ids, st.Leader); j >= 0 && c.procs[j] != nil {
				return j, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, errors.New("no leader within 20s")
}

// history is what the workload saw, checked at the end.
type history struct {
	mu       sync.Mutex
	tokens   map[uint64]string      // token -> lock: a token granted twice is a repeat
	repeats  int                    // tokens granted twice
	spans    map[string][]span      // by lock: when each holder held it
	grants   map[string][]time.Time // by lock: when each grant started
	accepted map[string][]fenced    // by lock: writes the fence let through
	rejected map[string][]fenced    // by lock: writes it refused, with the mark
	errs     map[string]int         // Do's outcomes other than success, by kind
}

type span struct {
	token      uint64
	start, end time.Time
}

type fenced struct {
	token, mark uint64
	rev         int64 // the revision of an accepted write
}

func newHistory() *history {
	return &history{tokens: map[uint64]string{}, spans: map[string][]span{}, grants: map[string][]time.Time{},
		accepted: map[string][]fenced{}, rejected: map[string][]fenced{}, errs: map[string]int{}}
}

// event is what a client process reports to the test, one JSON line each:
// a grant (when its holder starts), a span (when it ends), a fenced write
// accepted or refused, a Do that failed.
type event struct {
	Kind  string `json:"k"` // grant, span, accepted, refused, error
	Lock  string `json:"l,omitempty"`
	Token uint64 `json:"t,omitempty"`
	Start int64  `json:"s,omitempty"` // Unix ns, by the machine's clock, which the processes share
	End   int64  `json:"e,omitempty"`
	Rev   int64  `json:"r,omitempty"`
	Mark  uint64 `json:"m,omitempty"`
	Err   string `json:"x,omitempty"`
}

// reporter writes a client process's events to its stdout.
type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *reporter) report(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(ev)
}

// hold is the holder's work: three fenced writes to the lock's resource,
// 10ms apart, each given up after a second (a write forwarded to a leader
// that died waits for etcd's request timeout, 6s here), until done or its
// context ends (the lock lost). The span ends when the context ended
// (lock.Client ends it before the lock can be granted to another) or when
// hold returns, whichever is first.
func hold(ctx context.Context, cli *clientv3.Client, ns, name string, rep *reporter) error {
	l, _ := lock.FromContext(ctx)
	token, start := l.Token(), time.Now()
	var ended atomic.Int64
	stop := context.AfterFunc(ctx, func() { ended.Store(time.Now().UnixNano()) })
	rep.report(event{Kind: "grant", Lock: name, Token: token, Start: start.UnixNano()})
	defer func() {
		stop()
		end := time.Now().UnixNano()
		if e := ended.Load(); e != 0 && e < end {
			end = e
		}
		rep.report(event{Kind: "span", Lock: name, Token: token, Start: start.UnixNano(), End: end})
	}()
	fence, data := ns+"res/"+name+"/fence", ns+"res/"+name+"/data"
	for range 3 {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := etcd.Fence(wctx, cli, fence, token, clientv3.OpPut(data, strconv.FormatUint(token, 10)), clientv3.OpGet(fence))
		cancel()
		var stale *lock.StaleTokenError
		switch {
		case err == nil:
			rep.report(event{Kind: "accepted", Lock: name, Token: token, Rev: res[1].GetResponseRange().Kvs[0].ModRevision})
		case errors.As(err, &stale):
			rep.report(event{Kind: "refused", Lock: name, Token: token, Mark: stale.Mark})
		}
		if err != nil || !sleep(ctx, 10*time.Millisecond) {
			return err
		}
	}
	return nil
}

// clientSpec says what a client process does (see runClient).
type clientSpec struct {
	Endpoints []string
	NS        string
	Locks     []string
	Identity  string
	Workers   int
	Lease     time.Duration
}

// clientEnv, in a child process's environment, holds the clientSpec of the
// workload the process runs instead of the tests (see TestMain).
const clientEnv = "LOCK_ETCD_CLIENT"

// runClient runs the fault test's workload in this process, on a
// lock.Client of its own, until its stdin closes: spec.Workers goroutines,
// each taking a lock of spec.Locks at random and holding it (see hold),
// reporting every event on stdout. It returns the exit code.
func runClient(spec string) int {
	var s clientSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "client spec:", err)
		return 2
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: s.Endpoints, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := etcd.NewProvider(pctx, cli, etcd.WithNamespace(s.NS), etcd.WithProgressInterval(time.Second),
		etcd.WithRequestTimeout(time.Second))
	pcancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "provider:", err)
		return 1
	}
	defer p.Close()
	lc, err := lock.NewClient(p, lock.WithIdentity(s.Identity))
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock client:", err)
		return 1
	}
	defer lc.Close()
	rep := &reporter{enc: json.NewEncoder(os.Stdout)}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the test ends the workload by closing stdin
		cancel()
	}()
	var wg sync.WaitGroup
	for range s.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				name := s.Locks[rand.IntN(len(s.Locks))]
				err := lc.Do(ctx, name, lock.Options{Wait: true, MaxWait: 10 * time.Second, Lease: s.Lease},
					func(ctx context.Context) error { return hold(ctx, cli, s.NS, name, rep) })
				if err != nil && ctx.Err() == nil {
					rep.report(event{Kind: "error", Err: errKind(err)})
					sleep(ctx, 20*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return 0
}

// add records an event reported by a client process.
func (h *history) add(ev event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case "grant":
		if _, dup := h.tokens[ev.Token]; dup {
			h.repeats++
		}
		h.tokens[ev.Token] = ev.Lock
		at := time.Unix(0, ev.Start)
		g := h.grants[ev.Lock]
		i, _ := slices.BinarySearchFunc(g, at, func(a, b time.Time) int { return a.Compare(b) })
		h.grants[ev.Lock] = slices.Insert(g, i, at)
	case "span":
		h.spans[ev.Lock] = append(h.spans[ev.Lock], span{ev.Token, time.Unix(0, ev.Start), time.Unix(0, ev.End)})
	case "accepted":
		h.accepted[ev.Lock] = append(h.accepted[ev.Lock], fenced{token: ev.Token, rev: ev.Rev})
	case "refused":
		h.rejected[ev.Lock] = append(h.rejected[ev.Lock], fenced{token: ev.Token, mark: ev.Mark})
	case "error":
		h.errs[ev.Err]++
	}
}

// spawnClient starts a client process of spec, whose events go to h until
// it ends; stop closes its stdin (the workload ends, the Client releases
// what it holds) and waits for it.
func spawnClient(t *testing.T, spec clientSpec, h *history) (stop func()) {
	t.Helper()
	b, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	read := make(chan struct{})
	go func() {
		defer close(read)
		dec := json.NewDecoder(out)
		for {
			var ev event
			if err := dec.Decode(&ev); err != nil {
				return
			}
			h.add(ev)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = in.Close()
			done := make(chan struct{})
			go func() { <-read; _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// check asserts what must hold whatever the faults: no two holders of a
// lock at once, no token granted twice, the fence's writes in token order,
// and each refused write refused for a token that was granted later and
// written.
func (h *history) check(t *testing.T) (overlaps, badAccepts, badRejects int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, spans := range h.spans {
		slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
		for i := 1; i < len(spans); i++ {
			if spans[i].start.Before(spans[i-1].end) {
				overlaps++
				t.Errorf("lock %s: token %d granted at %v while token %d held it until %v",
					name, spans[i].token, spans[i].start.Format("15:04:05.000"), spans[i-1].token, spans[i-1].end.Format("15:04:05.000"))
			}
		}
	}
	for name, acc := range h.accepted {
		slices.SortFunc(acc, func(a, b fenced) int { return int(a.rev - b.rev) })
		written := map[uint64]bool{}
		for i, w := range acc {
			written[w.token] = true
			if i > 0 && w.token < acc[i-1].token {
				badAccepts++
				t.Errorf("lock %s: the fence let token %d write (revision %d) after token %d", name, w.token, w.rev, acc[i-1].token)
			}
		}
		for _, r := range h.rejected[name] {
			if r.mark <= r.token || !written[r.mark] {
				badRejects++
				t.Errorf("lock %s: token %d refused for mark %d, which no later holder wrote", name, r.token, r.mark)
			}
		}
	}
	return overlaps, badAccepts, badRejects
}

// regranted returns how long after at each lock was next granted, the
// longest of them; ok is false when a lock was not granted since.
func (h *history) regranted(locks []string, at time.Time) (longest time.Duration, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range locks {
		i, _ := slices.BinarySearchFunc(h.grants[name], at, func(a, b time.Time) int { return a.Compare(b) })
		if i == len(h.grants[name]) {
			return 0, false
		}
		longest = max(longest, h.grants[name][i].Sub(at))
	}
	return longest, true
}

// TestFaults runs a locking workload on a 3-member cluster while its
// members fail, one fault at a time, rotating: the leader SIGKILLed and
// restarted, the leader SIGSTOPped for 3 election timeouts, the leader's
// outbound peer traffic held for 3 election timeouts (its peers' streams
// from it paused at its proxy; its client port stays up), a follower
// SIGKILLed and restarted. 10 faults (50 with LOCK_LONG_FAULTS=1). The
// workload: 4 client processes (the test binary again, each with an etcd
// client, a provider and a lock.Client of its own; see runClient) x 2
// goroutines, taking 3 locks at random, each holder making 3 fenced writes
// (etcd.Fence) to its lock's resource, and reporting each grant, hold and
// write to this process, which checks them (on the machine's clock, which
// the processes share). It asserts
// no two holders of a lock at once, no token granted twice, the fence's
// accepted writes in token order and its refusals justified, and each lock
// granted again within 3 election timeouts plus the lease plus 1s of each
// fault's start.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the fault test starts 3 etcd processes")
	}
	n := 10
	if os.Getenv("LOCK_LONG_FAULTS") == "1" {
		n = 50
	}
	const (
		clients, workers = 4, 2
		lease            = 1500 * time.Millisecond // a 2s lease on etcd: half a second of margin
		stall            = 3 * faultElection
	)
	bound := 3*faultElection + 2*time.Second + time.Second // the longest lease on etcd is 2s
	c := startCluster(t)
	ns := testNamespace()
	locks := []string{"a", "b", "c"}
	h := newHistory()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stops []func()
	for i := range clients {
		stops = append(stops, spawnClient(t, clientSpec{Endpoints: c.endpoints, NS: ns, Locks: locks,
			Identity: "client-" + strconv.Itoa(i), Workers: workers, Lease: lease}, h))
	}

	sleep(ctx, time.Second) // the workload under way
	kinds := []string{"kill-leader", "stop-leader", "hold-leader-peers", "kill-follower"}
	var longest time.Duration
	for i := range n {
		kind := kinds[i%len(kinds)]
		leader, err := c.leader()
		require.NoError(t, err)
		at := time.Now()
		switch kind {
		case "kill-leader", "kill-follower":
			m := leader
			if kind == "kill-follower" {
				m = (leader + 1 + rand.IntN(2)) % 3
			}
			c.kill(m)
			sleep(ctx, stall)
			require.NoError(t, c.spawn(m), "restarting member %d", m)
		case "stop-leader":
			c.signal(leader, syscall.SIGSTOP)
			sleep(ctx, stall)
			c.signal(leader, syscall.SIGCONT)
		case "hold-leader-peers":
			c.proxies[leader].Pause()
			sleep(ctx, stall)
			c.proxies[leader].Resume()
		}
		var took time.Duration
		require.Eventually(t, func() bool {
			var ok bool
			took, ok = h.regranted(locks, at)
			return ok
		}, 30*time.Second, 20*time.Millisecond, "fault %d (%s): every lock is granted again", i, kind)
		t.Logf("fault %d (%s, leader m%d): every lock granted again within %v", i, kind, leader, took.Round(time.Millisecond))
		assert.LessOrEqual(t, took, bound, "fault %d (%s): every lock granted again within 3 election timeouts + the lease + 1s", i, kind)
		longest = max(longest, took)
		sleep(ctx, 500*time.Millisecond)
	}
	for _, stop := range stops {
		stop()
	}

	overlaps, badAccepts, badRejects := h.check(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	acc, rej := 0, 0
	for name := range h.accepted {
		acc += len(h.accepted[name])
		rej += len(h.rejected[name])
	}
	assert.Zero(t, h.repeats, "no token granted twice")
	t.Logf("etcd faults: faults=%d grants=%d fenced_accepted=%d fenced_refused=%d overlaps=%d repeated_tokens=%d bad_accepts=%d bad_refusals=%d longest_regrant=%v errors=%v",
		n, len(h.tokens), acc, rej, overlaps, h.repeats, badAccepts, badRejects, longest.Round(time.Millisecond), h.errs)
}

// errKind names an error of Do for the summary.
func errKind(err error) string {
	switch {
	case errors.Is(err, lock.ErrLost):
		return "lost"
	case errors.Is(err, lock.ErrTimeout):
		return "timeout"
	case errors.Is(err, lock.ErrNotAcquired):
		return "not-acquired"
	case strings.Contains(err.Error(), "request timed out"):
		return "etcd-request-timed-out"
	case strings.Contains(err.Error(), "no leader"), strings.Contains(err.Error(), "leader changed"):
		return "etcd-no-leader"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return "other: " + msg
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
