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
	"github.com/seed05627090/lock/internal/testenv"
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
// election timeout (so a minimum lease of 1s); its clients' providers ask
// their watches for progress every second.
const (
	faultTick     = 50
	faultElection = 500 * time.Millisecond
	faultProgress = time.Second
)

// cluster is 3 etcd members, each in a child process of its own, so that
// one can be SIGKILLed or SIGSTOPped; each member's peers reach it through
// a proxy in this process (see peerNet), so that its peer traffic can be
// cut.
type cluster struct {
	t         *testing.T
	specs     []memberSpec
	procs     []*exec.Cmd // nil while down
	stdins    []io.WriteCloser
	net       *peerNet
	endpoints []string
	ids       []uint64 // member IDs, by index
	admin     *clientv3.Client
}

// startCluster starts the 3 members and waits until they serve. A member
// that does not start (its ports, free a moment before, were taken in
// between: by another process, or as the local port of a connection) is
// given other ports: the whole cluster is started again, at most 3 times.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := launchCluster(t)
	for try := 2; err != nil && try <= 3; try++ {
		t.Logf("etcd cluster, start %d: %v", try-1, err)
		c, err = launchCluster(t)
	}
	require.NoError(t, err)
	c.admin = newFaultClient(t, c.endpoints...)
	c.ids = make([]uint64, len(c.specs))
	hex := make([]string, len(c.specs))
	for i, ep := range c.endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.admin.Status(ctx, ep)
		cancel()
		require.NoError(t, err)
		c.ids[i] = st.Header.MemberId
		hex[i] = strconv.FormatUint(st.Header.MemberId, 16) // as etcd writes X-Server-From
	}
	c.net.setIDs(hex)
	return c
}

// launchCluster starts the 3 members' processes on ports of their own and
// waits until each says it is ready; on an error it stops those it started.
func launchCluster(t *testing.T) (*cluster, error) {
	const n = 3
	c := &cluster{t: t, procs: make([]*exec.Cmd, n), stdins: make([]io.WriteCloser, n), net: newPeerNet()}
	var peers []string
	for i := range n {
		cp, err := freePort()
		if err != nil {
			c.stop()
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			c.stop()
			return nil, err
		}
		px, err := c.net.add(i, "127.0.0.1:"+strconv.Itoa(pp))
		if err != nil {
			c.stop()
			return nil, err
		}
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
	var err error
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		c.stop()
		return nil, err
	}
	t.Cleanup(c.stop)
	return c, nil
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
			return fmt.Errorf("member %d did not start: %s", i, logTail(c.specs[i].Dir+".log"))
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("member %d not ready within 60s", i)
	}
	c.procs[i], c.stdins[i] = cmd, in
	return nil
}

// logTail returns the last lines of a member's log, which is gone with the
// test's temporary directory.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
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
	c.net.close()
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
	mu      sync.Mutex
	tokens  map[uint64]string      // token -> lock: a token granted twice is a repeat
	repeats int                    // tokens granted twice
	spans   map[string][]span      // by lock: when each holder held it
	grants  map[string][]time.Time // by lock: when each grant started
	writes  map[string][]fenced    // by lock: the fenced writes to its resource
	errs    map[string]int         // Do's outcomes other than success, by kind
}

type span struct {
	token      uint64
	start, end time.Time
	lost       bool // it ended because its holder was told of a loss
	void       bool // its context had ended before it began: it held nothing
}

// fenced is a fenced write to a lock's resource and what became of it.
type fenced struct {
	outcome string // accepted, refused, or unknown (another error: it may have committed)
	token   uint64
	late    bool   // made after its holder was told of its loss
	rev     int64  // accepted: the write's revision
	mark    uint64 // refused: the fence's mark
}

func newHistory() *history {
	return &history{tokens: map[uint64]string{}, spans: map[string][]span{}, grants: map[string][]time.Time{},
		writes: map[string][]fenced{}, errs: map[string]int{}}
}

// event is what a holder reports to the test, one JSON line each from a
// client process: a grant (when its holder starts), a span (when it ends),
// a fenced write (accepted, refused or unknown), a Do that failed.
type event struct {
	Kind  string `json:"k"` // grant, span, accepted, refused, unknown, error
	Lock  string `json:"l,omitempty"`
	Token uint64 `json:"t,omitempty"`
	Start int64  `json:"s,omitempty"` // Unix ns, by the machine's clock, which the processes share
	End   int64  `json:"e,omitempty"`
	Lost  bool   `json:"lost,omitempty"` // a span that ended with a loss
	Void  bool   `json:"void,omitempty"` // a span whose context had ended before it began
	Late  bool   `json:"late,omitempty"` // a write made after its holder's loss
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

// hold is the holder's work: three fenced writes to the lock's resource
// (see writeThrice), until done or its context ends (the lock lost). The
// span ends when the context ended (lock.Client ends it before the lock can
// be granted to another) or when hold returns, whichever is first. A holder
// told of a loss then writes once more, within 4s, as one that did not heed
// the loss would: the fence must refuse that write if a later holder wrote
// first, and only then.
func hold(ctx context.Context, cli *clientv3.Client, ns, name string, report func(event)) error {
	l, _ := lock.FromContext(ctx)
	token, start := l.Token(), time.Now()
	void := ctx.Err() != nil // lost before fn ran: the Client told it at once
	var ended atomic.Int64
	stop := context.AfterFunc(ctx, func() { ended.Store(time.Now().UnixNano()) })
	report(event{Kind: "grant", Lock: name, Token: token, Start: start.UnixNano()})
	err := writeThrice(ctx, cli, ns, name, token, report)
	stop()
	end := time.Now().UnixNano()
	if e := ended.Load(); e != 0 && e < end {
		end = e
	}
	lost := errors.Is(context.Cause(ctx), lock.ErrLost)
	report(event{Kind: "span", Lock: name, Token: token, Start: start.UnixNano(), End: end, Lost: lost, Void: void})
	if lost {
		time.Sleep(rand.N(4 * time.Second))
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = fencedWrite(wctx, cli, ns, name, token, true, report)
		cancel()
	}
	return err
}

// writeThrice makes three fenced writes of token, 10ms apart, each given
// up after a second (a write forwarded to a leader that died waits for
// etcd's request timeout, 6s here), until the first error or ctx ends.
func writeThrice(ctx context.Context, cli *clientv3.Client, ns, name string, token uint64, report func(event)) error {
	for range 3 {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		err := fencedWrite(wctx, cli, ns, name, token, false, report)
		cancel()
		if err != nil || !etcd.Sleep(ctx, 10*time.Millisecond) {
			return err
		}
	}
	return nil
}

// fencedWrite writes token to the resource of lock name through etcd.Fence
// and reports the outcome: accepted (with the write's revision), refused
// (with the fence's mark), or unknown (any other error: it may have
// committed). late says that the holder was told of its loss before.
func fencedWrite(ctx context.Context, cli *clientv3.Client, ns, name string, token uint64, late bool, report func(event)) error {
	fence, data := ns+"res/"+name+"/fence", ns+"res/"+name+"/data"
	res, err := etcd.Fence(ctx, cli, fence, token, clientv3.OpPut(data, strconv.FormatUint(token, 10)), clientv3.OpGet(fence))
	ev := event{Kind: "unknown", Lock: name, Token: token, Late: late}
	var stale *lock.StaleTokenError
	switch {
	case err == nil:
		ev.Kind, ev.Rev = "accepted", res[1].GetResponseRange().Kvs[0].ModRevision
	case errors.As(err, &stale):
		ev.Kind, ev.Mark = "refused", stale.Mark
	}
	report(ev)
	return err
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
	p, err := etcd.NewProvider(pctx, cli, etcd.WithNamespace(s.NS), etcd.WithProgressInterval(faultProgress),
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
					func(ctx context.Context) error { return hold(ctx, cli, s.NS, name, rep.report) })
				if err != nil && ctx.Err() == nil {
					rep.report(event{Kind: "error", Err: errKind(err)})
					etcd.Sleep(ctx, 20*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return 0
}

// add records an event reported by a holder.
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
		h.spans[ev.Lock] = append(h.spans[ev.Lock], span{ev.Token, time.Unix(0, ev.Start), time.Unix(0, ev.End), ev.Lost, ev.Void})
	case "accepted", "refused", "unknown":
		h.writes[ev.Lock] = append(h.writes[ev.Lock], fenced{outcome: ev.Kind, token: ev.Token, late: ev.Late, rev: ev.Rev, mark: ev.Mark})
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

// checkSpans asserts that no two holders held a lock at once, and returns,
// for each holder told of a loss whose lock was granted again, how long
// before that grant it was told (its margin), and the number of void
// spans: holders whose function began with its context already ended (the
// Client found the lock lost before it ran: they held nothing, and are
// left out).
func (h *history) checkSpans(t *testing.T) (overlaps int, margins []time.Duration, void int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, all := range h.spans {
		var spans []span
		for _, s := range all {
			if s.void {
				void++
				t.Logf("lock %s: token %d's function began at %v with its context ended", name, s.token, s.start.Format("15:04:05.000"))
				continue
			}
			spans = append(spans, s)
		}
		slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
		for i := 1; i < len(spans); i++ {
			if spans[i].start.Before(spans[i-1].end) {
				overlaps++
				t.Errorf("lock %s: token %d held it from %v (until %v, lost %v) while token %d held it from %v until %v (lost %v)",
					name, spans[i].token, spans[i].start.Format("15:04:05.000"), spans[i].end.Format("15:04:05.000"), spans[i].lost,
					spans[i-1].token, spans[i-1].start.Format("15:04:05.000"), spans[i-1].end.Format("15:04:05.000"), spans[i-1].lost)
			}
			if spans[i-1].lost {
				margins = append(margins, spans[i].start.Sub(spans[i-1].end))
			}
		}
	}
	slices.Sort(margins)
	return overlaps, margins, void
}

// fenceCounts are the fenced writes by outcome, and how checkFences judged
// them.
type fenceCounts struct {
	accepted, refused, unknown int
	late                       int // made after the holder was told of its loss
	staleRefused               int // refused, and stale
	badAccepts, badRefusals    int // stale but accepted; refused but not stale
}

// checkFences judges every fenced write on the history's evidence, not on
// the fence's word: an accepted write was stale (and should have been
// refused) when a greater token had been accepted at a lower revision; a
// refused write was stale when the mark it was refused for is greater than
// its token and is the token of a write that was accepted or may have
// committed (its refusal read that mark, so that write came first). Every
// refusal must be stale, and every stale write refused.
func (h *history) checkFences(t *testing.T) (n fenceCounts) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, writes := range h.writes {
		written := map[uint64]bool{} // tokens of writes that were accepted or may have committed
		var accepted []fenced
		for _, w := range writes {
			if w.late {
				n.late++
			}
			switch w.outcome {
			case "accepted":
				accepted = append(accepted, w)
				written[w.token] = true
			case "unknown":
				n.unknown++
				written[w.token] = true
			}
		}
		n.accepted += len(accepted)
		slices.SortFunc(accepted, func(a, b fenced) int { return int(a.rev - b.rev) })
		var greatest uint64
		for _, w := range accepted {
			if w.token < greatest {
				n.badAccepts++
				t.Errorf("lock %s: token %d's write accepted (revision %d) after token %d's", name, w.token, w.rev, greatest)
			}
			greatest = max(greatest, w.token)
		}
		for _, w := range writes {
			if w.outcome != "refused" {
				continue
			}
			n.refused++
			if w.mark > w.token && written[w.mark] {
				n.staleRefused++
				continue
			}
			n.badRefusals++
			t.Errorf("lock %s: token %d's write refused for mark %d, which no greater token wrote", name, w.token, w.mark)
		}
	}
	return n
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
// restarted; the leader SIGSTOPped for 3 election timeouts; the leader's
// outbound peer traffic cut for 3 election timeouts (it still receives;
// its client port stays up); the leader cut off from its peers both ways
// for 3 election timeouts, or until a holder on it is told of its loss
// (see split); a follower SIGKILLed and restarted. 10 faults (50 with
// LOCK_LONG_FAULTS=1). The workload: 4 client processes (the test binary
// again, each with an etcd client, a provider and a lock.Client of its own;
// see runClient) x 2 goroutines, taking 3 locks at random, each holder
// making 3 fenced writes (etcd.Fence) to its lock's resource, and one more
// after a loss (see hold), and reporting each grant, hold and write to this
// process, which checks them (on the machine's clock, which the processes
// share). It asserts no two holders of a lock at once, no token granted
// twice, every fenced write refused that was stale and no other (with at
// least one refused: split makes one), each lock granted again within 3
// election timeouts plus the lease plus 3s of each fault's start, and what
// split asserts of the minority side. A holder whose function began with its context
// already ended (the Client found its lock lost first) held nothing, and
// is counted apart (void).
func TestFaults(t *testing.T) {
	testenv.SkipShort(t, "a fault test: starts 3 etcd processes")
	n := 10
	if os.Getenv("LOCK_LONG_FAULTS") == "1" {
		n = 50
	}
	const (
		clients, workers = 4, 2
		lease            = 1500 * time.Millisecond // a 2s lease on etcd: half a second of margin
		stall            = 3 * faultElection
	)
	// The longest lease on etcd is 2s; 3s more is room for a loaded 2-core
	// machine (a CI run with the whole suite saw 4.6s after a cut-leader-out).
	// A lock left stuck until its waiters give up (MaxWait 10s) still fails.
	bound := 3*faultElection + 2*time.Second + 3*time.Second
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

	etcd.Sleep(ctx, time.Second) // the workload under way
	kinds := []string{"kill-leader", "stop-leader", "cut-leader-out", "partition-leader", "kill-follower"}
	var longest time.Duration
	var splits []splitResult
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
			etcd.Sleep(ctx, stall)
			require.NoError(t, c.spawn(m), "restarting member %d", m)
		case "stop-leader":
			c.signal(leader, syscall.SIGSTOP)
			etcd.Sleep(ctx, stall)
			c.signal(leader, syscall.SIGCONT)
		case "cut-leader-out":
			c.net.cutFrom(leader)
			etcd.Sleep(ctx, stall)
			c.net.heal()
		case "partition-leader":
			s := c.split(ctx, t, leader, ns, lease, stall, "split-"+strconv.Itoa(i), h)
			t.Logf("fault %d (%s): the cut-off holder told of its loss %v after the cut, %v before the majority's grant; the majority granted a free lock %v after the cut; the minority tried it %d times, granted 0",
				i, kind, s.told.Round(time.Millisecond), s.margin.Round(time.Millisecond), s.majority.Round(time.Millisecond), s.tries)
			splits = append(splits, s)
		}
		var took time.Duration
		require.Eventually(t, func() bool {
			var ok bool
			took, ok = h.regranted(locks, at)
			return ok
		}, 30*time.Second, 20*time.Millisecond, "fault %d (%s): every lock is granted again", i, kind)
		t.Logf("fault %d (%s, leader m%d): every lock granted again within %v", i, kind, leader, took.Round(time.Millisecond))
		assert.LessOrEqual(t, took, bound, "fault %d (%s): every lock granted again within 3 election timeouts + the lease + 3s", i, kind)
		longest = max(longest, took)
		etcd.Sleep(ctx, 500*time.Millisecond)
	}
	for _, stop := range stops {
		stop()
	}

	overlaps, margins, void := h.checkSpans(t)
	f := h.checkFences(t)
	assert.Positive(t, f.staleRefused, "stale writes were made, and refused")
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Zero(t, h.repeats, "no token granted twice")
	t.Logf("etcd faults: faults=%d grants=%d void=%d overlaps=%d repeated_tokens=%d longest_regrant=%v lost=%d loss_margin_min=%v loss_margin_median=%v %v"+
		" fenced_accepted=%d fenced_refused=%d refused_stale=%d fenced_unknown=%d late_writes=%d bad_accepts=%d bad_refusals=%d errors=%v",
		n, len(h.tokens), void, overlaps, h.repeats, longest.Round(time.Millisecond), len(margins), percentile(margins, 0), percentile(margins, 50), summarizeSplits(splits),
		f.accepted, f.refused, f.staleRefused, f.unknown, f.late, f.badAccepts, f.badRefusals, h.errs)
}

// percentile returns the p-th percentile of sorted ds, rounded to the
// millisecond; 0 when there are none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[(len(ds)-1)*p/100].Round(time.Millisecond)
}

// summarizeSplits sums up the partitions of the leader for the summary
// line.
func summarizeSplits(splits []splitResult) string {
	var told, majority, tries time.Duration
	margin := time.Duration(-1)
	for _, s := range splits {
		told, majority = max(told, s.told), max(majority, s.majority)
		if margin < 0 || s.margin < margin {
			margin = s.margin
		}
		tries += time.Duration(s.tries)
	}
	return fmt.Sprintf("partitions=%d cut_off_told_max=%v cut_off_margin_min=%v majority_grant_max=%v minority_tries=%d minority_grants=0",
		len(splits), told.Round(time.Millisecond), margin.Round(time.Millisecond), majority.Round(time.Millisecond), tries)
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
