package servers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer returns the Redis server binary that the tests start: the one
// LOCK_REDIS_SERVER names (a path, or a name looked up on PATH), redis-server
// by default. Without it it skips the test, saying what to install, or fails
// it when RequireRedis says so.
func RedisServer(t testing.TB) string {
	t.Helper()
	bin, err := redisBinary()
	if err != nil {
		end(t, RequireRedis(), EnvRequireRedis, err)
	}
	return bin
}

// RedisCLI returns the path of redis-cli, which creates a Cluster. Without
// one it skips the test, or fails it when RequireRedis says so (in CI).
func RedisCLI(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		end(t, RequireRedis(), EnvRequireRedis, missing(fmt.Sprintf("no redis-cli to create a Cluster with: %v; install it (apt-get install redis-tools)", err)))
	}
	return p
}

// redisBinary finds the binary RedisServer returns.
func redisBinary() (string, error) {
	name := os.Getenv(EnvRedisServer)
	if name == "" {
		name = "redis-server"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", missing(fmt.Sprintf("no Redis server binary %s (%s, redis-server when unset): %v; "+
			"install it (apt-get install %s), or set %s to a Redis the tests may write into",
			name, EnvRedisServer, err, filepath.Base(name), EnvRedisAddr))
	}
	return p, nil
}

// RedisAddr returns the address of the tests' Redis: LOCK_REDIS_ADDR when it
// is set, or else this binary's own server, started by the first call (a
// RedisServer on a free loopback port, without persistence, stopped by
// Main's Run). Once started, its address is set in this process's
// environment as LOCK_REDIS_ADDR, so that the test binary run again as a
// child process (faults.StartChild, testenv.FIPS140Only) uses it too.
// Without a binary it skips the test, or fails it when RequireRedis says so;
// a server that does not start fails it, with its output.
func RedisAddr(t testing.TB) string {
	t.Helper()
	if a := os.Getenv(EnvRedisAddr); a != "" {
		return a
	}
	addr, err := redisServer.get(t, startPrivateRedis)
	if err != nil {
		end(t, RequireRedis(), EnvRequireRedis, err)
	}
	return addr
}

// Redis returns a client of the tests' Redis (RedisAddr), closed at the end
// of the test. It fails the test when the server does not answer PING.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	addr := RedisAddr(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("the tests' Redis at %s (%s) does not answer: %v", addr, EnvRedisAddr, err)
	}
	return rc
}

// startPrivateRedis starts this binary's own Redis.
func startPrivateRedis() (string, *Proc, error) {
	bin, err := redisBinary()
	if err != nil {
		return "", nil, err
	}
	d, err := serverDir("redis")
	if err != nil {
		return "", nil, err
	}
	// A free port found by listening may be taken by someone else before the
	// server binds it: try a few.
	for range 5 {
		var port int
		if port, err = FreePort(); err != nil {
			return "", nil, err
		}
		var p *Proc
		if p, err = StartRedis(bin, port, d); err == nil {
			addr := redisAddr(port)
			return addr, p, os.Setenv(EnvRedisAddr, addr)
		}
	}
	return "", nil, fmt.Errorf("start %s: %w", bin, err)
}

// StartRedis starts the Redis server binary bin on loopback port, in
// directory dir, without persistence, with the command-line arguments args
// after these defaults (which they override), as Start does (it gets
// SIGKILL when this process ends), and waits until it answers PING. After
// an error (the process exited, or did not answer within ten seconds, as
// when another process took the port) nothing runs.
func StartRedis(bin string, port int, dir string, args ...string) (*Proc, error) {
	cmd := exec.Command(bin, append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--loglevel", "warning",
	}, args...)...)
	p, err := Start(cmd, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	if err := WaitPing(redisAddr(port), p); err != nil {
		p.Stop(syscall.SIGKILL, 0) // when it did not answer in time
		return nil, err
	}
	return p, nil
}

func redisAddr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WaitPing waits up to ten seconds for the Redis server (or sentinel) that
// p runs to answer PING on addr. It fails, with what the process printed,
// when the process exits first or does not answer in time.
func WaitPing(addr string, p *Proc) error {
	what := filepath.Base(p.Cmd.Path)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("%s %s exited: %s", what, addr, strings.TrimSpace(p.Log()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s did not answer PING within 10s (%v): %s", what, addr, err, strings.TrimSpace(p.Log()))
		}
	}
}

// ping sends one PING in the inline protocol and wants +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// FreePort returns a loopback TCP port that nothing listened on a moment ago.
func FreePort() (int, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// DeleteAtEnd deletes the keys of rc that match pattern (a SCAN pattern) at
// the end of the test, giving up after 10 s.
func DeleteAtEnd(t testing.TB, rc redis.UniversalClient, pattern string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rc.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			_ = rc.Del(ctx, iter.Val()).Err()
		}
	})
}
