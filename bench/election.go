package main

// The election table (-election): how long a role is without a running
// leader when its leader, in another process, dies (SIGKILL, at a random
// point of its renewal cycle) or resigns, until the function of a Lead
// waiting in this process runs. The leader is this program run again as a
// child (electionChildEnv set), on its own connection to the same Redis.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// electionChildEnv, when set, makes this program the leader of one round:
// "addr prefix role lease" (see electionChild).
const electionChildEnv = "LOCK_BENCH_ELECTION_LEADER"

// electionConfig is what the -election flags set.
type electionConfig struct {
	rounds int           // rounds of each kind
	lease  time.Duration // the leader's lease
	poll   time.Duration // the successor's Client's poll interval
}

// electionMain runs cfg.rounds rounds of each kind against the Redis at addr
// and writes the table to w.
func electionMain(ctx context.Context, w io.Writer, addr string, cfg electionConfig) error {
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	prefix := "bench:" + runID + ":"
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	c, err := lock.NewClient(lock.NewRedisProvider(rc), lock.WithPrefix(prefix), lock.WithPollInterval(cfg.poll))
	if err != nil {
		return err
	}
	defer c.Close()
	took := map[bool][]time.Duration{}
	for r := range 2 * cfg.rounds {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		kill := r%2 == 1
		d, err := electionRound(ctx, c, addr, prefix, "election:"+strconv.Itoa(r), cfg, kill)
		if err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		took[kill] = append(took[kill], d)
		fmt.Fprint(os.Stderr, ".")
	}
	fmt.Fprintln(os.Stderr)
	bound := cfg.lease + cfg.poll
	fmt.Fprintf(w, "Election: the leader in a child process (its own go-redis client), a Lead waiting in this one; lease %v, the successor's poll interval %v; %d rounds of each\n\n", cfg.lease, cfg.poll, cfg.rounds)
	fmt.Fprintln(w, "| from | to the successor's function running: p50 | p99 | max | max / (lease + poll) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, kill := range []bool{false, true} {
		from := "the leader's Resign (its start, in the child)"
		if kill {
			from = "SIGKILL of the leader, at a random point of its renewal cycle"
		}
		ds := slices.Sorted(slices.Values(took[kill]))
		at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f |\n", from, fmtDur(at(0.5)), fmtDur(at(0.99)), fmtDur(ds[len(ds)-1]), float64(ds[len(ds)-1])/float64(bound))
	}
	return nil
}

// electionRound starts a leader of role in a child process, a Lead of role
// on c behind it, then kills the leader or has it resign, and returns how
// long after that the Lead's function started.
func electionRound(ctx context.Context, c *lock.Client, addr, prefix, role string, cfg electionConfig, kill bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	leader, err := startLeader(ctx, addr, prefix, role, cfg.lease)
	if err != nil {
		return 0, err
	}
	defer leader.stop()
	ran := make(chan time.Time, 1)
	lctx, stopLead := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() {
		led <- c.Lead(lctx, role, func(ctx context.Context) error {
			ran <- time.Now()
			<-ctx.Done()
			return nil
		}, lock.LeadOptions{})
	}()
	defer func() {
		stopLead()
		<-led
	}()
	if err := waitQueued(ctx, c, role); err != nil {
		return 0, err
	}
	var from time.Time
	if kill {
		time.Sleep(rand.N(cfg.lease / 3)) // anywhere in the renewal cycle
		if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return 0, err
		}
		from = time.Now()
	} else if from, err = leader.resign(ctx); err != nil {
		return 0, err
	}
	select {
	case at := <-ran:
		return at.Sub(from), nil // wall clocks of one machine, for a Resign
	case <-time.After(3 * (cfg.lease + cfg.poll)):
		return 0, fmt.Errorf("no successor ran within %v", 3*(cfg.lease+cfg.poll))
	}
}

// waitQueued waits until one candidate waits for role.
func waitQueued(ctx context.Context, c *lock.Client, role string) error {
	for {
		st, err := c.Inspect(ctx, role)
		if err == nil && st.Waiters == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the successor does not wait for the role: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// leaderProcess is a child process that leads one role.
type leaderProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startLeader runs this program as the leader of role and waits until it
// reports its term.
func startLeader(ctx context.Context, addr, prefix, role string, lease time.Duration) (*leaderProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), electionChildEnv+"="+strings.Join([]string{addr, prefix, role, lease.String()}, " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &leaderProcess{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	if _, err := p.next(ctx, "elected"); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// next reads the child's next line, which must start with word, and returns
// the rest.
func (p *leaderProcess) next(ctx context.Context, word string) (string, error) {
	line := make(chan string, 1)
	go func() {
		if p.lines.Scan() {
			line <- p.lines.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		rest, found := strings.CutPrefix(l, word+" ")
		if !ok || !found {
			return "", fmt.Errorf("the leader process said %q, want %q", l, word)
		}
		return rest, nil
	case <-ctx.Done():
		return "", fmt.Errorf("the leader process did not say %q: %w", word, ctx.Err())
	}
}

// resign tells the child to resign and returns when its Resign began.
func (p *leaderProcess) resign(ctx context.Context) (time.Time, error) {
	if _, err := io.WriteString(p.stdin, "resign\n"); err != nil {
		return time.Time{}, err
	}
	rest, err := p.next(ctx, "resigned")
	if err != nil {
		return time.Time{}, err
	}
	ns, errText, _ := strings.Cut(rest, " ")
	if errText != "<nil>" {
		return time.Time{}, fmt.Errorf("the leader's Resign: %s", errText)
	}
	at, err := strconv.ParseInt(ns, 10, 64)
	return time.Unix(0, at), err
}

// stop kills the child, if it still runs, and waits for it.
func (p *leaderProcess) stop() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// electionChild is the leader of one round: it campaigns for the role named
// in electionChildEnv, says "elected TERM", and leads until it is killed or
// reads "resign" on stdin; then it says "resigned <Unix ns when Resign was
// called> <Resign's error>" and exits.
func electionChild() int {
	f := strings.Fields(os.Getenv(electionChildEnv))
	if len(f) != 4 {
		fmt.Fprintln(os.Stderr, "bench leader: want \"addr prefix role lease\" in", electionChildEnv)
		return 2
	}
	lease, err := time.ParseDuration(f[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench leader:", err)
		return 2
	}
	rc := redis.NewClient(&redis.Options{Addr: f[0]})
	defer rc.Close()
	c, err := lock.NewClient(lock.NewRedisProvider(rc), lock.WithPrefix(f[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench leader:", err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := c.Campaign(ctx, f[2], lock.ElectionOptions{Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench leader:", err)
		return 1
	}
	fmt.Printf("elected %d\n", term.Token())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "resign" {
		return 0 // the parent is gone
	}
	at := time.Now().UnixNano()
	err = term.Resign(ctx)
	errText := "<nil>"
	if err != nil {
		errText = strings.ReplaceAll(err.Error(), " ", "_")
	}
	fmt.Printf("resigned %d %s\n", at, errText)
	if errors.Is(err, lock.ErrLost) {
		return 1
	}
	return 0
}

// fmtDur shows a duration in ms, to a tenth, or in us below a millisecond.
func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f us", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
