package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server started by the harness on a free loopback port.
type server struct {
	addr string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

// startServer runs bin on a free loopback port without persistence and waits
// until it answers PING.
func startServer(ctx context.Context, bin string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan error, 1)}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no")
	s.cmd.Stdout = &s.out
	s.cmd.Stderr = &s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (install Redis or pass -addr): %w", bin, err)
	}
	go func() { s.done <- s.cmd.Wait() }()

	rc := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rc.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.done:
			return nil, fmt.Errorf("%s exited: %v\n%s", bin, werr, s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("%s did not answer PING at %s: %v\n%s", bin, s.addr, err, s.out.String())
		}
	}
}

// stop terminates the server and waits for it to exit.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverStats are the server's counters that a run reads before and after.
type serverStats struct {
	// calls is the total of INFO commandstats calls, including the commands
	// that Lua scripts run, but not connection set-up (HELLO, CLIENT ...) or
	// INFO itself, so that the harness and new pool connections do not count.
	calls int64
	// cpu is the server process's user and system CPU time.
	cpu time.Duration
}

func readServerStats(ctx context.Context, rc *redis.Client) (serverStats, error) {
	info, err := rc.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return serverStats{}, err
	}
	var st serverStats
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return serverStats{}, fmt.Errorf("parse %q: %w", line, err)
			}
			st.cpu += time.Duration(secs * float64(time.Second))
		}
	}
	calls, err := commandCalls(info)
	if err != nil {
		return serverStats{}, err
	}
	for _, n := range calls {
		st.calls += n
	}
	return st, nil
}

// commandCalls returns the calls of each command in the text of INFO
// commandstats, the commands that Lua scripts ran among them, but not
// INFO, HELLO and CLIENT (connection set-up), so that the harness and new
// pool connections do not count.
func commandCalls(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		if name == "info" || name == "hello" || strings.HasPrefix(name, "client|") {
			continue
		}
		n, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		var err error
		if calls[name], err = strconv.ParseInt(n, 10, 64); err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
	}
	return calls, nil
}

// serverVersion returns redis_version from INFO server.
func serverVersion(ctx context.Context, rc *redis.Client) (string, error) {
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("no redis_version in INFO server")
}
