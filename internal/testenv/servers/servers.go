// Package servers gives the lock library's tests their servers. A test
// binary (the root package's, and those of faults, locktest and the modules)
// starts at most one redis-server (RedisAddr, Redis) and one PostgreSQL
// (PostgresDSN) of its own, on first use, on free loopback ports, and stops
// them when its tests end (Main); it writes into a server it did not start
// only when an environment variable names that server. The package also says
// which redis-server binary the tests that start servers of their own run
// (RedisServer: internal/faults), and starts those processes so that they do
// not outlive the test binary (Start).
//
// The environment:
//   - LOCK_REDIS_SERVER: the Redis server binary every test that starts one
//     runs, a path or a name looked up on PATH: redis-server by default;
//     valkey-server runs the tests on Valkey.
//   - LOCK_REDIS_ADDR: a Redis (host:port) the tests use instead of starting
//     one; it must answer, and the tests write into it.
//   - LOCK_POSTGRES_DSN: a PostgreSQL the tests use instead of starting one.
//   - CI, LOCK_REQUIRE_REDIS, LOCK_REQUIRE_POSTGRES: a missing binary fails
//     the test instead of skipping it; CI requires both servers.
//
// A test binary whose tests use RedisAddr, Redis or PostgresDSN runs them
// through Main. The package does not import the lock package, so that the
// root package's internal tests use it too; internal/testenv holds the rest
// of the tests' environment. The helpers take a testing.TB and end the test
// when they cannot work. It runs on Unix systems; only on Linux do the
// servers end with a test binary that ends without Main's Run.
package servers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The environment variables the tests read.
const (
	EnvRedisServer     = "LOCK_REDIS_SERVER"
	EnvRedisAddr       = "LOCK_REDIS_ADDR"
	EnvRequireRedis    = "LOCK_REQUIRE_REDIS"
	EnvPostgresDSN     = "LOCK_POSTGRES_DSN"
	EnvRequirePostgres = "LOCK_REQUIRE_POSTGRES"
)

// RequireRedis reports whether a missing Redis server binary must fail a
// test instead of skipping it: in CI, or when LOCK_REQUIRE_REDIS is set.
func RequireRedis() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequireRedis) != ""
}

// RequirePostgres reports whether missing PostgreSQL binaries must fail a
// test instead of skipping it: in CI, or when LOCK_REQUIRE_POSTGRES is set.
func RequirePostgres() bool {
	return os.Getenv("CI") != "" || os.Getenv(EnvRequirePostgres) != ""
}

// Main returns m with a Run that runs the tests and then, whatever their
// outcome, stops the servers this binary started and removes their
// directory. Before the tests it removes what the servers of a test binary
// that ended without that left behind (a panic, a kill at go test's
// timeout: its servers ended with it, see Start). Every TestMain of a
// package whose tests use RedisAddr, Redis or PostgresDSN calls it:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(servers.Main(m)) }
//
// or code := servers.Main(m).Run() before checks of its own. A test that
// would start a server in a binary whose TestMain does not fails.
func Main(m *testing.M) M { return M{m} }

// M is a testing.M whose Run stops the servers: see Main.
type M struct{ m *testing.M }

// Run runs the tests, stops the servers and returns m.Run's exit code.
func (x M) Run() int {
	mainRuns.Store(true)
	sweep()
	code := x.m.Run()
	stopAll()
	return code
}

// mainRuns is set once Main's Run has begun: only then may a server start,
// as only then is it sure to be stopped.
var mainRuns atomic.Bool

// missing is the error of a server that cannot start for want of what the
// machine lacks (a binary, a user): the test skips, unless the server is
// required. It says what to install.
type missing string

func (m missing) Error() string { return string(m) }

// end ends the test for err: a skip when err is a missing binary (or user)
// and the server is not required, a failure otherwise.
func end(t testing.TB, required bool, requireEnv string, err error) {
	t.Helper()
	var m missing
	switch {
	case !errors.As(err, &m):
		t.Fatal(err)
	case required:
		t.Fatalf("%v (a server is required: CI or %s is set)", err, requireEnv)
	default:
		t.Skip(err)
	}
}

// private is a server of this binary's own, started at most once: the
// first call of get starts it, and every call returns what that start got.
type private struct {
	mu   sync.Mutex
	done bool
	addr string // host:port or a DSN
	err  error
	proc *Proc
	// stopAll stops proc with sig, and after grace with SIGKILL.
	sig   syscall.Signal
	grace time.Duration
}

// get returns the server's address, starting it on the first call.
func (s *private) get(t testing.TB, start func() (string, *Proc, error)) (string, error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		if !mainRuns.Load() {
			t.Fatal("servers: this test binary's TestMain must run its tests through servers.Main, which stops the servers they start")
		}
		s.done = true
		s.addr, s.proc, s.err = start()
	}
	return s.addr, s.err
}

var (
	redisServer    = private{sig: syscall.SIGKILL} // it has nothing to save
	postgresServer = private{sig: syscall.SIGINT, grace: 30 * time.Second}
)

// stopAll stops the servers this binary started, removes their directory
// and releases it.
func stopAll() {
	for _, s := range []*private{&redisServer, &postgresServer} {
		s.mu.Lock()
		if s.proc != nil {
			s.proc.Stop(s.sig, s.grace)
			s.proc = nil
		}
		s.mu.Unlock()
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.path != "" {
		if err := os.RemoveAll(dir.path); err != nil {
			fmt.Fprintf(os.Stderr, "servers: %v\n", err)
		}
		_ = dir.lock.Close()
		dir.path = ""
	}
}

// dir is the directory of this binary's servers, made on first use:
// lock-test-servers-* in the temporary directory, with a subdirectory for
// each server. It holds a file, owner.lock, that the binary keeps locked
// (flock) for as long as it runs; sweep removes the directories whose
// owner.lock nobody holds.
var dir struct {
	mu   sync.Mutex
	path string
	lock *os.File
}

const (
	dirPattern = "lock-test-servers-*"
	ownerLock  = "owner.lock"
)

// serverDir returns a new directory for the server called name, in this
// binary's directory.
func serverDir(name string) (string, error) {
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.path == "" {
		p, f, err := makeOwnedDir()
		if err != nil {
			return "", err
		}
		dir.path, dir.lock = p, f
	}
	d := filepath.Join(dir.path, name)
	return d, os.Mkdir(d, 0o700)
}

// makeOwnedDir makes this binary's directory and locks its owner.lock. The
// lock file gets its name only once it is locked, so that sweep never finds
// it unlocked while its owner lives.
func makeOwnedDir() (string, *os.File, error) {
	p, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return "", nil, err
	}
	// Others may enter it (PostgreSQL runs as another user under root), not
	// list it.
	if err := os.Chmod(p, 0o711); err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp(p, "locking-")
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(p, ownerLock))
	}
	if err != nil {
		if f != nil {
			_ = f.Close()
		}
		_ = os.RemoveAll(p)
		return "", nil, err
	}
	return p, f, nil
}

// sweep removes the directories that test binaries which ended without
// stopping their servers left: those whose owner.lock it can lock. It
// reports what it could not remove, and goes on.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, ownerLock))
		if err != nil {
			continue // not yet named: its owner is making it
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if err := os.RemoveAll(d); err != nil {
				fmt.Fprintf(os.Stderr, "servers: removing what an earlier test binary left: %v\n", err)
			}
		}
		_ = f.Close()
	}
}

// Proc is a server process that Start started.
type Proc struct {
	Cmd    *exec.Cmd
	log    *BoundedBuffer // its output, when Start captured it
	exited chan struct{}
}

// Start starts cmd, a server process of a test, so that it does not outlive
// this process: on Linux the process gets signal sig when this process ends,
// whatever ends it (a panic, a kill at go test's timeout). When neither
// cmd.Stdout nor cmd.Stderr is set, the first 256 KiB of its output are kept
// for Log. cmd.SysProcAttr, when set, is kept (but for the signal). After
// an error nothing runs.
func Start(cmd *exec.Cmd, sig syscall.Signal) (*Proc, error) {
	p := &Proc{Cmd: cmd, exited: make(chan struct{})}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		p.log = &BoundedBuffer{Max: 256 << 10}
		cmd.Stdout, cmd.Stderr = p.log, p.log
	}
	dieWithParent(cmd, sig)
	if cmd.WaitDelay == 0 {
		// Children of the server (PostgreSQL's sessions) that outlive it
		// keep its output open: Wait gives up on them after this.
		cmd.WaitDelay = 5 * time.Second
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal is sent when the thread that started the
		// process ends, not this process: this goroutine keeps its thread
		// (locked, so that the runtime neither lends nor ends it) until the
		// server has exited; the runtime ends the thread after.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Exited returns a channel that is closed once the process has exited and
// been waited for.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Log returns what the process printed, when Start kept it.
func (p *Proc) Log() string {
	if p.log == nil {
		return ""
	}
	return p.log.String()
}

// Stop sends the process sig and waits until it has exited; after grace it
// kills it (SIGKILL) and waits for that. It does nothing to a process that
// has exited.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}
