package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/internal/testenv/servers"
)

// SentinelOptions configure StartSentinel. The zero value of each field means
// the default in its comment.
type SentinelOptions struct {
	// Replicas is the number of data nodes besides the master: 2.
	Replicas int
	// Sentinels is the number of sentinels: 3.
	Sentinels int
	// Quorum is how many sentinels must find the master down to start a
	// failover: a majority of Sentinels.
	Quorum int
	// DownAfter is how long a node must not answer before a sentinel finds
	// it down (down-after-milliseconds): 750ms.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout: 1.5s. A sentinel
	// does not start a failover of the same master within twice that after
	// the last one started (or after it voted for another's), and gives
	// up one whose promoted replica does not report itself master within
	// it: sentinels look at a promoted replica once a second.
	FailoverTimeout time.Duration
}

// MasterName is the name under which the sentinels of StartSentinel monitor
// their master.
const MasterName = "faults"

// Sentinel is a Redis Sentinel deployment of a test: data nodes (a master and
// its replicas, each a Redis of this package, without persistence) and the
// sentinels that watch them, all redis-server processes on loopback ports.
// Everything is stopped, by pid, when the test ends.
type Sentinel struct {
	// Addrs are the sentinels' addresses, to give go-redis's failover client.
	Addrs []string
	// Nodes are the data nodes; Nodes[0] was the master at the start.
	Nodes []*Redis

	t         testing.TB
	sentinels []*sentinelProc

	sentinelClients clients[*redis.SentinelClient]
	nodeClients     clients[*redis.Client]
}

// sentinelProc is one Redis server running in sentinel mode.
type sentinelProc struct {
	addr string
	proc *servers.Proc
}

// StartSentinel starts a master, its replicas and the sentinels that watch
// it, and returns once every sentinel knows every replica and every other
// sentinel, and the replicas have caught up, so that a failover can happen
// (see WaitStable). It skips or fails the test as RequireRedis does when
// there is no redis-server.
func StartSentinel(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	o = o.withDefaults()
	bin := RequireRedis(t)
	s := &Sentinel{
		t:               t,
		sentinelClients: clients[*redis.SentinelClient]{open: redis.NewSentinelClient},
		nodeClients:     clients[*redis.Client]{open: redis.NewClient},
	}
	t.Cleanup(s.sentinelClients.close)
	t.Cleanup(s.nodeClients.close)
	for range 1 + o.Replicas {
		s.Nodes = append(s.Nodes, StartRedis(t))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	master := s.Nodes[0].Addr
	for _, r := range s.Nodes {
		if err := s.configure(ctx, r); err != nil {
			t.Fatalf("configure %s: %v", r.Addr, err)
		}
	}
	for _, r := range s.Nodes[1:] {
		if err := s.replicate(ctx, r, master); err != nil {
			t.Fatalf("make %s a replica of %s: %v", r.Addr, master, err)
		}
	}
	if err := s.waitReplicas(ctx, master); err != nil {
		t.Fatalf("replicas of %s: %v", master, err)
	}
	var err error
	for range 5 {
		// Free ports found by listening may be taken before the sentinels
		// bind them: start the whole set again then.
		if s.sentinels, err = s.startSentinels(bin, o); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start sentinels: %v", err)
	}
	for _, p := range s.sentinels {
		s.Addrs = append(s.Addrs, p.addr)
		if err := s.shortenPeriods(ctx, p.addr); err != nil {
			t.Fatalf("sentinel %s: %v", p.addr, err)
		}
	}
	if err := s.WaitStable(ctx, master); err != nil {
		t.Fatalf("sentinels not ready: %v\n%s", err, s.Logs())
	}
	return s
}

func (o SentinelOptions) withDefaults() SentinelOptions {
	if o.Replicas == 0 {
		o.Replicas = 2
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.Quorum == 0 {
		o.Quorum = o.Sentinels/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = 750 * time.Millisecond
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 1500 * time.Millisecond
	}
	return o
}

// startSentinels starts the sentinels, each on a free loopback port with a
// config file of its own (sentinels rewrite it) that names the master, its
// replicas and the other sentinels, so that they need not discover each other
// (which takes seconds), and waits until each answers PING. On failure it
// stops those it started.
func (s *Sentinel) startSentinels(bin string, o SentinelOptions) ([]*sentinelProc, error) {
	ports := make([]int, o.Sentinels)
	for i := range ports {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	dir := s.t.TempDir()
	var procs []*sentinelProc
	for i, p := range ports {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		if err := os.WriteFile(conf, []byte(s.sentinelConfig(dir, ports, i, o)), 0o600); err != nil {
			return nil, err
		}
		proc, err := servers.Start(exec.Command(bin, conf, "--sentinel"), syscall.SIGKILL)
		if err != nil {
			return nil, err
		}
		sp := &sentinelProc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), proc: proc}
		s.t.Cleanup(sp.kill)
		procs = append(procs, sp)
	}
	for _, sp := range procs {
		if err := servers.WaitPing(sp.addr, sp.proc); err != nil {
			for _, sp := range procs {
				sp.kill()
			}
			return nil, err
		}
	}
	return procs, nil
}

// sentinelConfig is the config file of sentinel i of those on ports.
func (s *Sentinel) sentinelConfig(dir string, ports []int, i int, o SentinelOptions) string {
	host, port, _ := net.SplitHostPort(s.Nodes[0].Addr)
	lines := []string{
		"port " + strconv.Itoa(ports[i]),
		"bind 127.0.0.1",
		"daemonize no",
		`logfile ""`,
		"dir " + dir,
		"sentinel myid " + sentinelID(ports[i]),
		fmt.Sprintf("sentinel monitor %s %s %s %d", MasterName, host, port, o.Quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, o.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", MasterName, o.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", MasterName),
	}
	for _, r := range s.Nodes[1:] {
		h, p, _ := net.SplitHostPort(r.Addr)
		lines = append(lines, fmt.Sprintf("sentinel known-replica %s %s %s", MasterName, h, p))
	}
	for j, p := range ports {
		if j != i {
			lines = append(lines, fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s", MasterName, p, sentinelID(p)))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// shortenPeriods makes the sentinel at addr ping every node every 300 ms
// (1 s by default), ask the others whether the master is down every 100 ms
// and publish its hello every 200 ms (as Redis's own Sentinel tests do), so
// that a dead master is found soon after DownAfter and the sentinels agree
// quickly. A ping period as long as DownAfter would make a sentinel find a
// master down just after it switched to it (its first ping goes out one
// period after the switch); one shorter than 200 ms would make it find no
// replica good enough to promote (their INFO, asked for once a second
// during a failover, must be younger than five ping periods).
func (s *Sentinel) shortenPeriods(ctx context.Context, addr string) error {
	cmd := redis.NewCmd(ctx, "SENTINEL", "DEBUG", "ping-period", 300, "ask-period", 100, "publish-period", 200)
	_ = s.sentinelClient(addr).Process(ctx, cmd)
	return cmd.Err()
}

// sentinelID is the run id (40 hex digits) of the sentinel on port.
func sentinelID(port int) string { return fmt.Sprintf("%040x", port) }

func (p *sentinelProc) kill() { p.proc.Stop(syscall.SIGKILL, time.Minute) }

// Node returns the data node at addr, or nil.
func (s *Sentinel) Node(addr string) *Redis {
	for _, r := range s.Nodes {
		if r.Addr == addr {
			return r
		}
	}
	return nil
}

// Masters returns the master's address as each sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME), "" for a sentinel that did not answer.
// A sentinel reports the promoted replica as soon as the promotion is
// confirmed, before the failover ends.
func (s *Sentinel) Masters(ctx context.Context) []string {
	out := make([]string, len(s.Addrs))
	var wg sync.WaitGroup
	for i, addr := range s.Addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, err := s.sentinelClient(addr).GetMasterAddrByName(ctx, MasterName).Result(); err == nil && len(a) == 2 {
				out[i] = net.JoinHostPort(a[0], a[1])
			}
		}()
	}
	wg.Wait()
	return out
}

// WaitStable waits until the deployment can survive the loss of master: every
// sentinel reports master, sees it up and no failover under way, knows every
// other sentinel, and sees every other data node as a replica that is up; and
// master has every other data node as an online replica that has caught up
// with it (see checkReplicas).
func (s *Sentinel) WaitStable(ctx context.Context, master string) error {
	var last error
	for {
		if last = s.stable(ctx, master); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Sentinel) stable(ctx context.Context, master string) error {
	if err := s.checkReplicas(ctx, master); err != nil {
		return err
	}
	for _, addr := range s.Addrs {
		if err := s.checkSentinel(ctx, addr, master); err != nil {
			return fmt.Errorf("sentinel %s: %w", addr, err)
		}
	}
	return nil
}

func (s *Sentinel) checkSentinel(ctx context.Context, addr, master string) error {
	sc := s.sentinelClient(addr)
	m, err := sc.Master(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	if got := net.JoinHostPort(m["ip"], m["port"]); got != master {
		return fmt.Errorf("master is %s, want %s", got, master)
	}
	if m["flags"] != "master" {
		return fmt.Errorf("master flags %q", m["flags"])
	}
	if n, _ := strconv.Atoi(m["num-other-sentinels"]); n != len(s.Addrs)-1 {
		return fmt.Errorf("knows %d other sentinels, want %d", n, len(s.Addrs)-1)
	}
	reps, err := sc.Replicas(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	up := make(map[string]bool)
	for _, r := range reps {
		if r["flags"] == "slave" {
			up[net.JoinHostPort(r["ip"], r["port"])] = true
		}
	}
	for _, n := range s.Nodes {
		if n.Addr != master && !up[n.Addr] {
			return fmt.Errorf("replica %s not seen up: %v", n.Addr, reps)
		}
	}
	return nil
}

// checkReplicas checks that master has every other node as an online
// replica that has processed everything master had written before the
// check, a write of its own included. (After a full sync, a master holds
// the stream back until the replica's first acknowledgement, up to a second
// later: a replica can be "online" and a second behind.)
func (s *Sentinel) checkReplicas(ctx context.Context, master string) error {
	if err := s.nodeClient(master).Incr(ctx, "faults:probe").Err(); err != nil {
		return fmt.Errorf("write to %s: %w", master, err)
	}
	info, err := s.nodeClient(master).Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO of %s: %w", master, err)
	}
	if !strings.Contains(info, "role:master") {
		return fmt.Errorf("%s is not a master:\n%s", master, info)
	}
	offset := InfoField(info, "master_repl_offset")
	for _, n := range s.Nodes {
		if n.Addr == master {
			continue
		}
		_, port, _ := net.SplitHostPort(n.Addr)
		if !strings.Contains(info, ",port="+port+",state=online,") {
			return fmt.Errorf("%s has no online replica %s:\n%s", master, n.Addr, info)
		}
		rinfo, err := s.nodeClient(n.Addr).Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO of %s: %w", n.Addr, err)
		}
		if got := InfoField(rinfo, "slave_repl_offset"); got < offset {
			return fmt.Errorf("replica %s has processed %d bytes of the stream, %s had written %d", n.Addr, got, master, offset)
		}
	}
	return nil
}

// InfoField returns the integer field name of an INFO reply, -1 when it has
// none.
func InfoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func (s *Sentinel) waitReplicas(ctx context.Context, master string) error {
	for {
		err := s.checkReplicas(ctx, master)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Rejoin starts r again, empty, as a replica of master: a master that
// crashed comes back as a replica of the one promoted meanwhile. It is a
// replica from its start: a client that still knew it as the master would
// otherwise be granted locks by an empty master, in the moment before it
// replicates. (Left alone, it would come back as an empty master until the
// sentinels convert it, some seconds later: see docs/guarantees.md.)
func (s *Sentinel) Rejoin(ctx context.Context, r *Redis, master string) error {
	host, port, _ := net.SplitHostPort(master)
	if err := r.Start("--replicaof", host, port, "--masteruser", replUser, "--masterauth", replUser,
		"--repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	return s.configure(ctx, r) // for its own replicas, once promoted
}

// replUser is the ACL user (and password) replicas log in to their master
// with, so that CutReplication can keep them out.
const replUser = "faults-repl"

// configure prepares a node, before it replicates or is replicated: it syncs
// a new replica at once (Redis 7 otherwise waits five seconds,
// repl-diskless-sync-delay, for others), and its replicas log in as
// replUser.
func (s *Sentinel) configure(ctx context.Context, r *Redis) error {
	rc := s.nodeClient(r.Addr)
	if err := rc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return err
	}
	if err := rc.Do(ctx, "ACL", "SETUSER", replUser, "on", ">"+replUser, "+psync", "+replconf", "+ping").Err(); err != nil {
		return err
	}
	if err := rc.ConfigSet(ctx, "masteruser", replUser).Err(); err != nil {
		return err
	}
	return rc.ConfigSet(ctx, "masterauth", replUser).Err()
}

// CutReplication stops master from replicating while it goes on serving its
// clients, as a broken link to its replicas would: their connections are
// closed and they cannot log in again. Whatever master writes from then on
// is lost if it dies. A node that is started again (Rejoin) replicates
// normally.
func (s *Sentinel) CutReplication(ctx context.Context, master string) error {
	rc := s.nodeClient(master)
	if err := rc.Do(ctx, "ACL", "SETUSER", replUser, "off").Err(); err != nil {
		return err
	}
	return rc.ClientKillByFilter(ctx, "TYPE", "replica").Err()
}

func (s *Sentinel) replicate(ctx context.Context, r *Redis, master string) error {
	host, port, _ := net.SplitHostPort(master)
	return s.nodeClient(r.Addr).Do(ctx, "REPLICAOF", host, port).Err() // go-redis has SlaveOf only, deprecated
}

// Logs returns what the sentinels printed.
func (s *Sentinel) Logs() string {
	var b strings.Builder
	for _, p := range s.sentinels {
		fmt.Fprintf(&b, "--- sentinel %s:\n%s\n", p.addr, p.proc.Log())
	}
	return b.String()
}

// sentinelClient returns the client of the sentinel at addr, made once.
func (s *Sentinel) sentinelClient(addr string) *redis.SentinelClient {
	return s.sentinelClients.get(addr)
}

// nodeClient returns the client of the data node at addr, made once.
func (s *Sentinel) nodeClient(addr string) *redis.Client {
	return s.nodeClients.get(addr)
}

// clients are go-redis clients (of sentinels or of data nodes) by address,
// each made by open once, on first use, and closed by close. The zero
// clients with open set is ready; it is safe for concurrent use.
type clients[C interface{ Close() error }] struct {
	open func(*redis.Options) C
	mu   sync.Mutex
	m    map[string]C
}

// get returns the client of addr.
func (cs *clients[C]) get(addr string) C {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c, ok := cs.m[addr]
	if !ok {
		c = cs.open(adminOptions(addr))
		if cs.m == nil {
			cs.m = map[string]C{}
		}
		cs.m[addr] = c
	}
	return c
}

// close closes every client made.
func (cs *clients[C]) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.m {
		_ = c.Close()
	}
}

// ErrNoPromotion is returned by WaitPromotion when no sentinel reports a new
// master in time.
var ErrNoPromotion = errors.New("no replica promoted")

// WaitPromotion waits until some sentinel reports a master other than old,
// and returns it with the time it was first seen.
func (s *Sentinel) WaitPromotion(ctx context.Context, old string) (string, time.Time, error) {
	for {
		for _, m := range s.Masters(ctx) {
			if m != "" && m != old {
				return m, time.Now(), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", time.Time{}, fmt.Errorf("%w from %s: %v", ErrNoPromotion, old, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// WaitAgree waits until every sentinel reports master.
func (s *Sentinel) WaitAgree(ctx context.Context, master string) error {
	for {
		ms := s.Masters(ctx)
		agree := true
		for _, m := range ms {
			agree = agree && m == master
		}
		if agree {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: sentinels report %v, want %s", ctx.Err(), ms, master)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
