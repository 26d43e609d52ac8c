package faults_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
)

// roleEnv names the role of a child process: the test binary re-executed with
// -test.run=^TestHelperProcess$ and this variable set runs that role instead
// of the tests.
const roleEnv = "FAULTS_ROLE"

// stats are the figures of the summary line that TestMain prints.
var stats struct {
	grants      atomic.Int64 // locks granted, in this process and in children
	processes   atomic.Int64 // child processes started
	faults      atomic.Int64 // faults injected
	violations  atomic.Int64 // failed checks of a property of the library
	lostUpdates atomic.Int64 // updates lost under a lock
}

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		// A child: run TestHelperProcess only, without the leak check (the
		// parent may kill it at any point) and without a summary.
		os.Exit(m.Run())
	}
	testenv.SkipShortMain("faults", "the fault suite (~5 minutes: servers killed, partitioned, failed over; Sentinel and Cluster)")
	// go-redis logs every failed dial; the tests fail dials on purpose.
	redis.SetLogger(quietLogger{})
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	figures("grants=%d processes=%d faults=%d violations=%d lost_updates=%d",
		stats.grants.Load(), stats.processes.Load(), stats.faults.Load(),
		stats.violations.Load(), stats.lostUpdates.Load())
	os.Exit(code)
}

// figures prints a line of figures, "faults: " and the formatted text, and
// appends it to the file that LOCK_FAULTS_SUMMARY names, when it is set: go
// test shows a passing package's output only with -v, and CI prints that
// file after the README's test command.
func figures(format string, args ...any) {
	line := fmt.Sprintf("faults: "+format+"\n", args...)
	fmt.Print(line)
	if name := os.Getenv("LOCK_FAULTS_SUMMARY"); name != "" {
		f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.WriteString(line)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "faults: write the summary to %s: %v\n", name, err)
		}
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// expect checks a property of the library: when ok is false it counts a
// violation and fails the test with the message.
func expect(t testing.TB, ok bool, format string, args ...any) bool {
	t.Helper()
	if !ok {
		stats.violations.Add(1)
		t.Errorf("violation: "+format, args...)
	}
	return ok
}

// fault counts one injected fault.
func fault(t testing.TB, what string) {
	t.Helper()
	stats.faults.Add(1)
	t.Logf("fault: %s", what)
}

// universalOptions are the options of the tests' go-redis clients of addrs
// (Simple, Cluster or Failover, with MasterName, make them). With
// ContextTimeoutEnabled the context's deadline bounds the socket reads and
// writes, so that a call on a dead connection ends with its context.
func universalOptions(addrs ...string) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	}
}

// newRedis returns a go-redis client of addr (universalOptions, then opts),
// closed at the end of the test.
func newRedis(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := universalOptions(addr).Simple()
	for _, fn := range opts {
		fn(o)
	}
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// newClient returns a lock Client on a Redis provider over rc, closed at the
// end of the test.
func newClient(t testing.TB, rc redis.UniversalClient, opts ...lock.ClientOption) *lock.Client {
	t.Helper()
	return testenv.NewClient(t, lock.NewRedisProvider(rc), opts...)
}

// ctxTimeout is the test environment's: a context that ends after d, or with
// the test.
var ctxTimeout = testenv.Context

// recordKey is where the Redis provider stores the record of key.
func recordKey(key string) string {
	r, _, _, _ := lock.RedisKeys(key)
	return r
}

// keyOf is the key of the lock called name under the default prefix.
func keyOf(name string) string { return lock.DefaultPrefix + "{" + name + "}" }

// record reads the record of key straight from Redis: its value ("" when
// there is none) and its TTL.
func record(t testing.TB, direct *redis.Client, key string) (string, time.Duration) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	v, err := direct.Get(ctx, recordKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", 0
	}
	require.NoError(t, err, "read the record of %q", key)
	ttl, err := direct.PTTL(ctx, recordKey(key)).Result()
	require.NoError(t, err)
	return v, ttl
}

// recordOwner returns the owner in a stored record value, "" for none.
func recordOwner(v string) string {
	owner, _, _ := strings.Cut(v, ",")
	return owner
}

// startChild starts the test binary as a child in role, with the given
// extra environment (internal/faults's Child: its report lines begin with
// "FAULTS"), and kills it at the end of the test if it is still running.
func startChild(t testing.TB, role string, env ...string) *faults.Child {
	t.Helper()
	stats.processes.Add(1)
	return faults.StartChild(t, "^TestHelperProcess$", "FAULTS", append([]string{roleEnv + "=" + role}, env...)...)
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "parse %q", s)
	return n
}

func atou(t testing.TB, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "parse %q", s)
	return n
}

// TestHelperProcess is the entry point of the child processes: it runs the
// role named by FAULTS_ROLE, and is skipped in a normal run.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(roleEnv)
	if role == "" {
		t.Skip("runs only as a child process of the fault tests")
	}
	fn, ok := roles[role]
	if !ok {
		t.Fatalf("unknown role %q", role)
	}
	fn(t)
}

// roles are the child processes' parts, by name.
var roles = map[string]func(t *testing.T){
	"counter": roleCounter,
	"holder":  roleHolder,
	"leader":  roleLeader,
	"waiter":  roleWaiter,
}

// report writes one report line to the parent.
func report(format string, args ...any) {
	fmt.Printf("FAULTS "+format+"\n", args...)
}

// childEnv reads a variable the parent set for a child.
func childEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("child: %s is not set", name)
	}
	return v
}

// childRedis returns what the parent gives every role: a go-redis client of
// the Redis server at FAULTS_REDIS, and the name of the lock, FAULTS_LOCK.
func childRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	return newRedis(t, childEnv(t, "FAULTS_REDIS")), childEnv(t, "FAULTS_LOCK")
}

// childDuration reads a duration the parent set for a child.
func childDuration(t testing.TB, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(childEnv(t, name))
	require.NoError(t, err, "parse %s", name)
	return d
}

// childInt reads a number the parent set for a child.
func childInt(t testing.TB, name string) int {
	t.Helper()
	return int(atoi(t, childEnv(t, name)))
}

// readLine reads one command line from stdin.
func readLine(r *bufio.Reader) string {
	s, _ := r.ReadString('\n')
	return strings.TrimSpace(s)
}

var stdin = sync.OnceValue(func() *bufio.Reader { return bufio.NewReader(os.Stdin) })

// onContended returns a channel that receives when a Client made with the
// returned option finds a lock held (its EventContended), and that option.
// The channel holds one event; the ones that come while it is full are
// dropped.
func onContended() (<-chan struct{}, lock.ClientOption) {
	contended := make(chan struct{}, 1)
	return contended, lock.WithEvents(func(e lock.Event) {
		if e.Kind == lock.EventContended {
			select {
			case contended <- struct{}{}:
			default:
			}
		}
	})
}

// awaitContended waits until contended receives (the waiter whose Acquire
// done receives has found the lock held, see onContended), and fails the
// test if that Acquire ends first or ctx does.
func awaitContended(t testing.TB, ctx context.Context, contended <-chan struct{}, done <-chan testenv.Acquired) {
	t.Helper()
	select {
	case <-contended:
	case r := <-done:
		t.Fatalf("the waiter ended before the release: %v", r.Err)
	case <-ctx.Done():
		t.Fatal("the waiter never found the lock held")
	}
}

// releaseToWaiter releases l and checks that the waiter whose Acquire done
// receives, which polls too seldom to find the lock free by itself, has it
// within 2 s of the release, woken by what wakes says (the release's
// announcement), with a greater token. It releases the waiter's lock and
// returns how long after the release the waiter had it.
func releaseToWaiter(t testing.TB, ctx context.Context, l *lock.Lock, done <-chan testenv.Acquired, wakes string) time.Duration {
	t.Helper()
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	r := <-done
	require.NoError(t, r.Err, "the waiter's acquisition")
	stats.grants.Add(1)
	took := r.At.Sub(released)
	expect(t, took < 2*time.Second, "the waiter took %v after the release: %s did not wake it", took, wakes)
	expect(t, r.Lock.Token() > l.Token(), "token %d after %d", r.Lock.Token(), l.Token())
	require.NoError(t, r.Lock.Release(ctx))
	return took
}

// checkHandedOver has holder take the lock called name and waiter wait for
// it, then checks that the release hands it to the waiter at once: waiter
// polls every 10 s, so only the handoff can wake it that soon. contended
// receives when the waiter has found the lock held (see onContended).
func checkHandedOver(t *testing.T, ctx context.Context, holder, waiter *lock.Client, name string, contended <-chan struct{}) {
	t.Helper()
	l, err := holder.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	stats.grants.Add(1)
	done := testenv.AcquireLater(ctx, waiter, name, lock.Options{Wait: true, MaxDuration: 20 * time.Second})
	// The waiter reports the contention once it has queued; from then on
	// only the handoff, or its 10 s poll, grants it the lock.
	awaitContended(t, ctx, contended, done)
	time.Sleep(100 * time.Millisecond)
	took := releaseToWaiter(t, ctx, l, done, "the announcement")
	t.Logf("waiter acquired %v after the release (poll interval 10s)", took.Round(time.Millisecond))
}

// exclusionRun has goroutines goroutines on each of clients take the lock
// called name in turn (Wait, MaxDuration maxHold, a 1ms critical section)
// for as long as more says, and checks that no call failed, that at most one
// of them was in the section at a time, and that each grant's token was
// above the previous grant's. It returns how many sections ran.
func exclusionRun(t *testing.T, ctx context.Context, clients []*lock.Client, goroutines int, name string, maxHold time.Duration, more func() bool) int64 {
	t.Helper()
	var inSection, maxIn, sections, badTokens atomic.Int64
	var lastToken atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)*goroutines)
	for _, c := range clients {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for more() {
					l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxDuration: maxHold})
					if err != nil {
						errs <- err
						return
					}
					n := inSection.Add(1)
					for m := maxIn.Load(); n > m && !maxIn.CompareAndSwap(m, n); m = maxIn.Load() {
					}
					if prev := lastToken.Swap(l.Token()); l.Token() <= prev {
						badTokens.Add(1)
					}
					time.Sleep(time.Millisecond)
					inSection.Add(-1)
					sections.Add(1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		expect(t, false, "mutual exclusion run: %v", err)
	}
	stats.grants.Add(sections.Load())
	expect(t, badTokens.Load() == 0, "%d grants had a token not above the previous grant's", badTokens.Load())
	expect(t, maxIn.Load() <= 1, "%d holders in the critical section at once", maxIn.Load())
	t.Logf("%d critical sections by %d goroutines on %d Clients; at most %d at once",
		sections.Load(), len(clients)*goroutines, len(clients), maxIn.Load())
	return sections.Load()
}
