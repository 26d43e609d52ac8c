package lock_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

// The helpers of the root package's tests, in one place: the backends every
// behaviour runs against, events, and providers that fail as a network or a
// server would. The servers (internal/testenv/servers), names, contexts and
// Clients come from the test environment (internal/testenv), shared with
// faults, locktest and the modules.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(servers.Main(m)) // stops the Redis the tests started
}

// The test environment's helpers, under the short names the tests use.
var (
	realRedis   = servers.Redis       // the tests' Redis; skips, or fails in CI, without it
	redisAddr   = servers.RedisAddr   // its address
	uniqueName  = testenv.Name        // a name no other test uses
	ctxTimeout  = testenv.Context     // a context that ends after d, or with the test
	newClient   = testenv.NewClient   // a Client closed with the test
	newOwner    = testenv.NewOwner    // a new lock owner
	mustAcquire = testenv.MustAcquire // a provider grant, or the test fails
	holder      = testenv.Holder      // the record that holds a key
	assertTTL   = testenv.AssertTTL   // a TTL, less what a slow machine takes
)

// backend makes the providers of one kind. Each call of replica returns a new
// provider over the same storage, with its own connections, standing in for
// another process.
type backend struct {
	name    string
	replica func(t testing.TB) lock.Provider
	// raw reads and writes the stored value of a key (for corrupt-record
	// tests); nil for the memory backend.
	raw redis.UniversalClient
}

// backends returns memory, miniredis and real Redis backends.
func backends(t *testing.T) []backend {
	t.Helper()
	mem := lock.NewMemoryProvider()
	mr := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = mini.Close() })
	bs := []backend{
		{name: "memory", replica: func(testing.TB) lock.Provider { return mem }},
		{name: "miniredis", raw: mini, replica: func(t testing.TB) lock.Provider {
			rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = rc.Close() })
			return lock.NewRedisProvider(rc)
		}},
	}
	real := realRedis(t)
	// Leave nothing in the shared Redis: every key a test writes contains its
	// name (see uniqueName), fencing counters and grace periods included;
	// this run's keys only: another run's are live.
	servers.DeleteAtEnd(t, real, testenv.Pattern(t))
	bs = append(bs, backend{name: "redis", raw: real, replica: func(t testing.TB) lock.Provider {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
		t.Cleanup(func() { _ = rc.Close() })
		return lock.NewRedisProvider(rc)
	}})
	return bs
}

// eachBackend runs fn as a subtest against every backend.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// replicas returns n clients, each on its own provider over b's storage.
func replicas(t *testing.T, b backend, n int, opts ...lock.ClientOption) []*lock.Client {
	cs := make([]*lock.Client, n)
	for i := range cs {
		cs[i] = newClient(t, b.replica(t), opts...)
	}
	return cs
}

// canExpire reports whether b's records expire in real time. The miniredis
// backend is started without ClockTTL(true), so its TTLs never run out; a test
// that needs expiry skips the rest of itself there.
func canExpire(t *testing.T, b backend) bool {
	t.Helper()
	if b.name == "miniredis" {
		t.Log("miniredis TTLs do not run out in real time (helpers_test.go does not call ClockTTL(true)); expiry not checked")
		return false
	}
	return true
}

// rawKey and fenceKey return the Redis keys of the record and the fencing
// counter of key.
func rawKey(key string) string {
	r, _, _, _ := lock.RedisKeys(key)
	return r
}

func fenceKey(key string) string {
	_, f, _, _ := lock.RedisKeys(key)
	return f
}

// queueKey returns the Redis key of key's wait queue.
func queueKey(key string) string {
	_, _, q, _ := lock.RedisKeys(key)
	return q
}

// globEscape escapes s for a Redis glob pattern (KEYS, SCAN).
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// deleteRecord removes l's record behind its back.
func deleteRecord(t testing.TB, b backend, l *lock.Lock) {
	t.Helper()
	if b.raw != nil {
		require.NoError(t, b.raw.Del(context.Background(), rawKey(l.Key())).Err())
		return
	}
	require.NoError(t, b.replica(t).Release(context.Background(), l.Key(), l.Owner()))
}

// recorder collects events. It leaves out EventRenewed, whose number
// depends on timing, unless renewals is set.
type recorder struct {
	ch       chan lock.Event
	renewals bool
}

func (r *recorder) option() lock.ClientOption {
	return lock.WithEvents(func(e lock.Event) {
		if e.Kind != lock.EventRenewed || r.renewals {
			r.ch <- e
		}
	})
}

// kinds returns the kinds of the events recorded so far.
func (r *recorder) kinds() []lock.EventKind {
	var ks []lock.EventKind
	for {
		select {
		case e := <-r.ch:
			ks = append(ks, e.Kind)
		default:
			return ks
		}
	}
}

func newRecorder() *recorder { return &recorder{ch: make(chan lock.Event, 1024)} }

// acquireAndRelease starts c's Acquire of the lock called name with opts,
// which releases the lock as soon as it has it: the channel gets the first
// error, or nil.
func acquireAndRelease(ctx context.Context, c *lock.Client, name string, opts lock.Options) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, name, opts)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	return got
}

// awaitWaiters waits up to 10 s until c's Inspect counts n waiters for the
// lock called name; msg says who they are.
func awaitWaiters(t *testing.T, c *lock.Client, name string, n int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := c.Inspect(context.Background(), name)
		return err == nil && st.Waiters == n
	}, 10*time.Second, time.Millisecond, msg)
}

// waitEvent waits for an event of kind, dropping others.
func waitEvent(t testing.TB, r *recorder, kind lock.EventKind) lock.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-r.ch:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %v event within 10s", kind)
		}
	}
}

// drain returns the events recorded so far.
func drain(r *recorder) []lock.Event {
	var es []lock.Event
	for {
		select {
		case e := <-r.ch:
			es = append(es, e)
		default:
			return es
		}
	}
}

// eventKinds returns the kinds of es.
func eventKinds(es []lock.Event) []lock.EventKind {
	ks := make([]lock.EventKind, len(es))
	for i, e := range es {
		ks[i] = e.Kind
	}
	return ks
}

// assertClosed checks that ch is closed within a second.
func assertClosed(t testing.TB, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Error(msg)
	}
}

// syncBuffer is a bytes.Buffer safe for the log's concurrent writes. With
// a max, it keeps the first max bytes written (at least) and drops the rest.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.max > 0 && b.buf.Len() >= b.max {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the lines of the buffer that contain s.
func (b *syncBuffer) lines(s string) []string {
	var found []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}

// sectionProbe watches a critical section: how many handlers are inside now, the
// most that ever were at once, and how many entered in all; and how many of
// the calls made by together failed.
type sectionProbe struct {
	inside, most, entered, failed atomic.Int32
}

// section is the handlers' body in the tests of concurrent calls: inside for
// 30 ms and, with hold, until the other n-1 calls have failed, so that
// exactly one of them can succeed however the goroutines are scheduled.
func (p *sectionProbe) section(hold bool, n int) {
	defer p.enter()()
	time.Sleep(30 * time.Millisecond)
	if hold {
		waitUntil(func() bool { return p.failed.Load() >= int32(n-1) }, 2*time.Second)
	}
}

// together makes n calls of call at once and returns their errors when all
// have returned, counting the failed calls in p.failed.
func (p *sectionProbe) together(n int, call func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if errs[i] = call(i); errs[i] != nil {
				p.failed.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// enter records a handler entering; call the returned function when it leaves.
func (p *sectionProbe) enter() (leave func()) {
	p.entered.Add(1)
	n := p.inside.Add(1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { p.inside.Add(-1) }
}

// waitUntil polls cond until it holds or d has passed, and reports whether
// it held. Handlers use it to hold a lock until the test has seen what it needs
// (a rendezvous), so that no result depends on how goroutines are scheduled.
func waitUntil(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// mustHold takes name on c through the imperative API (a holder "elsewhere")
// and releases it at the end of the test.
func mustHold(t *testing.T, c *lock.Client, name string) *lock.Lock {
	t.Helper()
	l, err := c.Acquire(ctxTimeout(t, 5*time.Second), name, lock.Options{})
	require.NoError(t, err, "the holder must get the free lock %q", name)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// --- providers that fail as a network or a server would ---

// hookedProvider is the tests' one fake provider (see testenv.Hooked).
type hookedProvider = testenv.Hooked

// flakyRenewals returns a provider over p whose renewals fail, as with the
// server unreachable, while fail is set.
func flakyRenewals(p lock.Provider, fail *atomic.Bool) *hookedProvider {
	return &hookedProvider{Provider: p, OnRenew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
		if fail.Load() {
			return errors.New("connection refused")
		}
		return p.Renew(ctx, key, owner, ttl)
	}}
}

// downProvider returns a provider over p whose Acquire and Queue fail with
// errDown while mode is "fail", and never answer (until the context ends)
// while it is "hang"; while it is "hang-queue", Queue alone never answers.
// Otherwise (mode "" or never set) they are p's.
func downProvider(p lock.Provider, mode *atomic.Value) *hookedProvider {
	down := func(ctx context.Context, queue bool) error {
		switch mode.Load() {
		case "fail":
			return errDown
		case "hang-queue":
			if !queue {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		case "hang":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	return &hookedProvider{
		Provider: p,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if err := down(ctx, false); err != nil {
				return lock.Record{}, err
			}
			return p.Acquire(ctx, key, owner, ttl)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			if err := down(ctx, true); err != nil {
				return lock.Record{}, err
			}
			return p.Queue(ctx, key, w)
		},
	}
}

var errDown = errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")

// mwDownProvider returns a provider over p whose server is down: Acquire and
// Queue fail after 100 ms with errMwDown, Release and Leave hang until their
// context ends (a dial that never completes), and Listen fails with
// errMwDown. Every other method is p's; a nil p has none, which is enough for
// calls that never acquire.
func mwDownProvider(p lock.Provider) *hookedProvider {
	acquire := func(ctx context.Context, _, _ string, _ time.Duration) (lock.Record, error) {
		select {
		case <-time.After(100 * time.Millisecond):
			return lock.Record{}, errMwDown
		case <-ctx.Done():
			return lock.Record{}, ctx.Err()
		}
	}
	return &hookedProvider{
		Provider:  p,
		OnAcquire: acquire,
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			return acquire(ctx, key, w.Owner, w.TTL)
		},
		OnRelease: func(ctx context.Context, _, _ string) error {
			<-ctx.Done()
			return ctx.Err()
		},
		OnLeave: func(ctx context.Context, _ string, _ lock.Wait) error {
			<-ctx.Done()
			return ctx.Err()
		},
		OnListen: func(context.Context, string, func(lock.Notice)) (func(), error) {
			return nil, errMwDown
		},
	}
}

var errMwDown = errors.New("provider down: dial tcp 10.20.30.40:6379: i/o timeout")
