// Package faults holds the helpers of the lock library's fault-injection
// tests (the faults directory of the repository, and the fault tests of the
// provider modules): a launcher for throwaway redis-server processes
// (Redis), a Sentinel deployment of them (Sentinel), a TCP proxy that can
// delay, pause and cut the traffic between a client and Redis (Proxy), the
// test binary run again as a child process (Child), and the board that
// judges the fenced writes of stopped leaders (WriteBoard). It is internal:
// not part of the library's API.
//
// The helpers start processes and listen on loopback addresses only. They are
// test helpers: they take a testing.TB and end the test when they cannot work.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed05627090/lock/internal/testenv"
)

// RequireRedis returns the path of redis-server. Without one it skips the
// test, or fails it in CI and when LOCK_REQUIRE_REDIS is set (the test
// environment's rule, testenv.RedisServer).
func RequireRedis(t testing.TB) string {
	t.Helper()
	return testenv.RedisServer(t)
}

// Redis is one redis-server process of a test, on a loopback port of its own,
// without persistence: a restart starts it empty. Kill and Start may be called
// in turn to crash and restart it on the same port. It is stopped when the
// test ends.
type Redis struct {
	// Addr is the server's address, 127.0.0.1:port; it stays the same across
	// restarts.
	Addr string

	t    testing.TB
	bin  string
	port int
	dir  string
	args []string // of StartRedis, given at every start

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *boundedBuffer
}

// StartRedis starts a redis-server on a free loopback port, with the extra
// command-line arguments args (given again at every restart by Start, after
// its defaults, which they override), and waits until it answers PING. It
// skips or fails the test as RequireRedis does when there is no
// redis-server, and stops the server at the end of the test.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: RequireRedis(t), dir: t.TempDir(), args: args}
	t.Cleanup(func() { _ = r.Kill() })
	var err error
	// A free port found by listening may be taken by someone else before the
	// server binds it: try a few.
	for range 5 {
		r.port, err = FreePort()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		if err = r.Start(); err == nil {
			return r
		}
	}
	t.Fatalf("start redis-server: %v", err)
	return nil
}

// Start starts the server on its port (again, after Kill), with StartRedis's
// arguments and then the extra command-line arguments, and waits until it
// answers PING. It returns an
// error when the server is already running or does not come up within ten
// seconds.
func (r *Redis) Start(extra ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return errors.New("redis-server is already running")
	}
	log := &boundedBuffer{max: 64 << 10}
	args := []string{
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", r.dir,
		"--loglevel", "warning",
	}
	args = append(append(args, r.args...), extra...)
	cmd := exec.Command(r.bin, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.cmd, r.exited, r.log = cmd, exited, log
	if err := waitPing("redis-server", r.Addr, exited, log); err != nil {
		_ = cmd.Process.Kill() // when it did not answer in time
		<-exited
		r.cmd = nil
		return err
	}
	return nil
}

// waitPing waits up to ten seconds for the server a process started on addr
// to answer PING. It fails, with what the process printed, when the process
// exits first or does not answer in time.
func waitPing(what, addr string, exited <-chan struct{}, log *boundedBuffer) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s %s exited: %s", what, addr, strings.TrimSpace(log.String()))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s did not answer PING within 10s (%v): %s", what, addr, err, strings.TrimSpace(log.String()))
		}
	}
}

// Kill kills the server with SIGKILL, as a crash would, and waits until it is
// gone: every connection to it is reset and everything it stored is lost. It
// does nothing when the server is not running.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	err := r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	return err
}

// Log returns what the running (or last) server printed.
func (r *Redis) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.log == nil {
		return ""
	}
	return r.log.String()
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

// boundedBuffer keeps the first max bytes written to it; it is safe for
// concurrent use.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
