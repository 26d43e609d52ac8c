package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
	"github.com/seed05627090/lock/postgres"
)

// replicas returns n Clients, each on a provider with a pool of its own:
// n processes sharing one database.
func replicas(t *testing.T, prefix string, n int, opts ...lock.ClientOption) []*lock.Client {
	cs := make([]*lock.Client, n)
	for i := range cs {
		cs[i] = newClient(t, newProvider(t, prefix), opts...)
	}
	return cs
}

// Replicas that wait for one lock hold it one at a time: at most one holder
// at any instant, no update of an unprotected read-modify-write is lost,
// and each holder's token is greater than the last.
func TestReplicasMutualExclusion(t *testing.T) {
	prefix := testPrefix(t)
	locktest.ReplicasHoldInTurn(t, ctxTimeout(t, 2*time.Minute), replicas(t, prefix, 4), uniqueName(t), 3, 15)
}

// A waiter is woken by the grant NOTIFY sends when the holder releases, long
// before it would look again on its own (a 10s poll interval, a holder's
// lease of 30s).
func TestWaiterWokenByNotify(t *testing.T) {
	prefix := testPrefix(t)
	admin := newProvider(t, prefix)
	holder := newClient(t, newProvider(t, prefix))
	waiter := newClient(t, newProvider(t, prefix), lock.WithPollInterval(10*time.Second))
	locktest.WaiterWokenByGrant(t, ctxTimeout(t, time.Minute), admin, holder, waiter, uniqueName(t))
}

// A lock run with a GracePeriod stays closed to another replica, waiting or
// not, until the period ends.
func TestGracePeriodAcrossReplicas(t *testing.T) {
	prefix := testPrefix(t)
	cs := replicas(t, prefix, 2)
	ctx := ctxTimeout(t, time.Minute)
	name := uniqueName(t)
	ran := 0
	fn := func(context.Context) error { ran++; return nil }

	require.NoError(t, cs[0].Do(ctx, name, lock.Options{GracePeriod: 10 * time.Second}, fn))
	err := cs[1].Do(ctx, name, lock.Options{}, fn)
	assert.ErrorIs(t, err, lock.ErrGracePeriod, "another replica finds the grace period")
	err = cs[1].Do(ctx, name, lock.Options{Wait: true, MaxWait: 5 * time.Second}, fn)
	assert.ErrorIs(t, err, lock.ErrGracePeriod, "a waiting replica finds the grace period too")
	assert.Equal(t, 1, ran, "only the first run ran")
}

// A holder whose lock is force-released is told at its next renewal: its
// function's context is cancelled with a cause that matches ErrLost.
func TestForceReleaseTellsHolder(t *testing.T) {
	prefix := testPrefix(t)
	admin := newProvider(t, prefix)
	c := newClient(t, newProvider(t, prefix))
	ctx := ctxTimeout(t, time.Minute)
	name := uniqueName(t)
	const lease = 1500 * time.Millisecond

	started := make(chan struct{})
	lost := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, name, lock.Options{Lease: lease}, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			lost <- context.Cause(ctx)
			return context.Cause(ctx)
		})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the lock was not acquired within 10s")
	}
	rec, err := admin.ForceRelease(ctx, c.Key(name))
	require.NoError(t, err)
	assert.NotEmpty(t, rec.Owner, "ForceRelease returns the holder's record")
	forced := time.Now()
	select {
	case cause := <-lost:
		assert.ErrorIs(t, cause, lock.ErrLost, "the holder's context ends with a loss")
		// The next renewal comes within a third of a lease; a busy machine
		// may take longer, but not this long.
		assert.Less(t, time.Since(forced), lease+5*time.Second, "the loss is found within about a lease")
	case <-time.After(lease + 10*time.Second):
		require.FailNow(t, "the holder was not told of the loss")
	}
	assert.ErrorIs(t, <-done, lock.ErrLost, "Do reports the loss")
}

// A Listen connection killed by the server is opened again, listens again,
// and delivers a Notice without Key; grants reach it afterwards.
func TestListenReconnects(t *testing.T) {
	prefix := testPrefix(t)
	app := "lock-listen-" + randomHex(4)
	p := newProvider(t, prefix, postgres.WithListenApplicationName(app))
	admin := newPool(t)
	ctx := ctxTimeout(t, time.Minute)
	inbox := "inbox:" + uniqueName(t)

	grants := notices(t, ctx, p, inbox)

	backend := func() (pid int32) {
		_ = admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app).Scan(&pid)
		return pid
	}
	pid := backend()
	require.NotZero(t, pid, "the Listen connection is seen with its application_name")
	var killed bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed))
	require.True(t, killed)

	select {
	case g := <-grants:
		assert.Equal(t, lock.Notice{}, g, "a reconnect delivers a Notice without Key")
	case <-time.After(20 * time.Second):
		require.FailNow(t, "no Notice within 20s of the connection's end")
	}
	assert.Eventually(t, func() bool { n := backend(); return n != 0 && n != pid }, 10*time.Second, 10*time.Millisecond,
		"a new Listen connection replaces the killed one")

	key, a := uniqueName(t), "o-holder"
	rec, err := p.Acquire(ctx, key, a, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, a, rec.Owner)
	w := lock.Wait{Owner: "o-waiter", TTL: 10 * time.Second, Inbox: inbox}
	rec, err = p.Queue(ctx, key, w)
	require.NoError(t, err)
	require.True(t, rec.Queued)
	require.NoError(t, p.Release(ctx, key, a))
	select {
	case g := <-grants:
		assert.Equal(t, lock.Notice{Key: key, Owner: w.Owner, Token: g.Token, TTL: w.TTL}, g, "grants reach the new connection")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no grant within 10s after the reconnect")
	}
	require.NoError(t, p.Release(ctx, key, w.Owner))
}

// A payload that is not a grant is ignored; the grants that follow it are
// delivered.
func TestListenIgnoresForeignPayloads(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	admin := newPool(t)
	ctx := ctxTimeout(t, time.Minute)
	inbox := "inbox:" + randomHex(8) // short: the channel is the inbox

	grants := notices(t, ctx, p, inbox)
	for _, payload := range []string{"garbage", `{"o":"x"}`, `{"k":"k","o":"x"}`, `{"k":"k1"}`} {
		_, err := admin.Exec(ctx, "SELECT pg_notify($1, $2)", inbox, payload)
		require.NoError(t, err)
	}
	select {
	case g := <-grants:
		assert.Equal(t, lock.Notice{Key: "k1"}, g, "the payloads before were not grants")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the grace-period notice did not arrive")
	}
}

// Inspect and List read the records and queues that the other methods
// leave; List matches its prefix byte for byte (no LIKE pattern).
func TestInspectAndList(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	ctx := ctxTimeout(t, time.Minute)
	base := uniqueName(t)

	keys := []string{base + "%_a", base + "%_b", base + "%x", base + "x_a", base + "%_é"}
	for _, k := range keys {
		_, err := p.Acquire(ctx, k, "o-1", 10*time.Second)
		require.NoError(t, err)
	}
	w := lock.Wait{Owner: "o-2", TTL: 10 * time.Second, Inbox: "inbox:" + randomHex(8)}
	rec, err := p.Queue(ctx, keys[0], w)
	require.NoError(t, err)
	require.True(t, rec.Queued)

	rec, err = p.Inspect(ctx, keys[0])
	require.NoError(t, err)
	assert.Equal(t, "o-1", rec.Owner)
	assert.Equal(t, 1, rec.Waiters)
	assert.False(t, rec.Since.IsZero())
	assert.Equal(t, rec.Since, rec.Since.Truncate(time.Millisecond), "Since is in milliseconds")

	seen := map[string]int{}
	require.NoError(t, p.List(ctx, base+"%_", func(key string, r lock.Record, err error) bool {
		assert.NoError(t, err)
		seen[key] = r.Waiters
		return true
	}))
	assert.Equal(t, map[string]int{keys[0]: 1, keys[1]: 0, keys[4]: 0}, seen, "the keys that start with the prefix, as bytes")

	var all []string
	require.NoError(t, p.List(ctx, base, func(key string, _ lock.Record, _ error) bool {
		all = append(all, key)
		return true
	}))
	assert.Len(t, all, len(keys))
	for _, k := range all {
		assert.True(t, strings.HasPrefix(k, base))
	}
	for _, k := range keys {
		require.NoError(t, p.Release(ctx, k, "o-1"))
	}
	require.NoError(t, p.Release(ctx, keys[0], w.Owner), "the waiter was handed the first key")
}

// List reads past a page of records.
func TestListManyPages(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	ctx := ctxTimeout(t, time.Minute)
	base := uniqueName(t) + "/"
	const n = 250
	for i := range n {
		_, err := p.Acquire(ctx, base+strings.Repeat("k", i%7)+string(rune('a'+i%26))+randomHex(2)+"-"+randomHex(2), "o-1", time.Minute)
		require.NoError(t, err)
	}
	count := 0
	require.NoError(t, p.List(ctx, base, func(string, lock.Record, error) bool { count++; return true }))
	assert.Equal(t, n, count)
	count = 0
	require.NoError(t, p.List(ctx, base, func(string, lock.Record, error) bool { count++; return count < 120 }))
	assert.Equal(t, 120, count, "List stops when fn returns false, in a later page too")
}

// Calls end with their context.
func TestCallsEndWithContext(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Acquire(ctx, uniqueName(t), "o-1", time.Second)
	assert.True(t, errors.Is(err, context.Canceled), "a cancelled context ends Acquire: %v", err)
	_, err = p.Listen(ctx, "inbox:"+randomHex(4), func(lock.Notice) {})
	assert.True(t, errors.Is(err, context.Canceled), "a cancelled context ends Listen: %v", err)
}

// NewProvider refuses a bad prefix and a nil pool.
func TestNewProviderBadInput(t *testing.T) {
	needServer(t)
	pool := newPool(t)
	ctx := ctxTimeout(t, 10*time.Second)
	for _, prefix := range []string{"", "1lock", "Lock_", "lock-", "lock\"", strings.Repeat("a", 41)} {
		_, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(prefix))
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "prefix %q", prefix)
	}
	_, err := postgres.NewProvider(ctx, nil)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "nil pool")
}
