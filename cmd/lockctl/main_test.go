package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/postgres"
)

func TestMain(m *testing.M) {
	code := servers.Main(m).Run() // stops the Redis and PostgreSQL the tests started
	stopEtcd()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The test environment's helpers (internal/testenv of the root module,
// which this module may import: Go's internal rule goes by import path), under
// the short names the tests use.
var (
	realRedis   = servers.Redis       // the tests' Redis; skips, or fails in CI, without it
	redisAddr   = servers.RedisAddr   // its address
	postgresDSN = servers.PostgresDSN // the tests' PostgreSQL; skips, or fails in CI, without it
	randomHex   = testenv.RandomHex   // n random bytes in hex
)

// realPostgres returns a pool of the tests' PostgreSQL, closed at the end
// of the test. Without a server it skips the test, or fails it in CI and
// when LOCK_REQUIRE_POSTGRES is set.
func realPostgres(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := postgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(ctx), "the tests' PostgreSQL at %s", dsn)
	return pool
}

// fixture is a store (Redis, PostgreSQL or etcd) and a key prefix of it
// that one test owns: what the test leaves under the prefix is removed at
// its end.
type fixture struct {
	t      *testing.T
	prefix string   // the Clients' key prefix
	flags  []string // lockctl's flags that pick the store
	where  string   // what ls says of where it looked, when it finds nothing
	hint   string   // the command ls gives, when it finds nothing, to name the services' settings
	// ttlStep is what the store rounds a lease up to a multiple of (etcd's
	// whole seconds); 0 when it keeps leases as asked.
	ttlStep time.Duration
	// provider returns a provider with connections of its own, as another
	// process has, closed at the end of the test.
	provider func() lock.Provider
	// corrupt stores value, which is not a record, at key; raw reads the
	// value at key. Both nil for PostgreSQL, whose tables hold records only.
	corrupt func(key, value string)
	raw     func(key string) string
}

// stores are the stores lockctl reads, each with the function that makes a
// fixture of it.
var stores = []struct {
	name       string
	newFixture func(t *testing.T) *fixture
}{
	{"redis", newRedisFixture},
	{"postgres", newPostgresFixture},
	{"etcd", newEtcdFixture},
}

// forEachStore runs fn in a subtest for each store, with a fixture of it.
func forEachStore(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { fn(t, s.newFixture(t)) })
	}
}

// newRedisFixture returns a fixture of the real Redis, under a prefix of
// the test's own whose keys are deleted at the end of the test.
func newRedisFixture(t *testing.T) *fixture {
	rc := realRedis(t)
	ctx := context.Background()
	f := &fixture{t: t, prefix: "lockctl-test:" + randomHex(6) + ":", flags: []string{"-redis", "redis://" + redisAddr(t) + "/0"}, where: "in Redis",
		hint: "lockctl -prefix <prefix> ls"}
	f.provider = func() lock.Provider {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(t)})
		t.Cleanup(func() { _ = c.Close() })
		return lock.NewRedisProvider(c)
	}
	f.corrupt = func(key, value string) { require.NoError(t, rc.Set(ctx, key, value, 0).Err()) }
	f.raw = func(key string) string {
		v, err := rc.Get(ctx, key).Result()
		require.NoError(t, err)
		return v
	}
	keys := func(ctx context.Context) []string {
		var keys []string
		iter := rc.Scan(ctx, 0, f.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scan %q: %v", f.prefix, err)
		}
		return keys
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, k := range keys(ctx) {
			_ = rc.Del(ctx, k).Err()
		}
		if left := keys(ctx); len(left) > 0 {
			t.Errorf("keys left under %q: %q", f.prefix, left)
		}
	})
	return f
}

// newPostgresFixture returns a fixture of the real PostgreSQL, in tables of
// the test's own (made here, as a service's NewProvider makes them), which
// are dropped at the end of the test, after everything else of it closed.
func newPostgresFixture(t *testing.T) *fixture {
	pool := realPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := "lockctl_t" + randomHex(4) + "_"
	p, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(tables))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Drop(ctx); err != nil {
			t.Errorf("dropping %s*: %v", tables, err)
		}
	})
	f := &fixture{t: t, prefix: "lockctl-test:" + randomHex(6) + ":", flags: []string{"-postgres", postgresDSN(t), "-table-prefix", tables}, where: "in the tables ",
		hint: "lockctl -prefix <prefix> ls"}
	f.provider = func() lock.Provider {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, postgresDSN(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		p, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(tables))
		require.NoError(t, err)
		return p
	}
	return f
}

// client returns a lock Client of the fixture's prefix, with its own
// connections, closed at the end of the test.
func (f *fixture) client(opts ...lock.ClientOption) *lock.Client {
	c, err := lock.NewClient(f.provider(), append([]lock.ClientOption{lock.WithPrefix(f.prefix)}, opts...)...)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = c.Close() })
	return c
}

// args returns args after the flags that pick the fixture's store and prefix.
func (f *fixture) args(args ...string) []string {
	return append(append(slices.Clone(f.flags), "-prefix", f.prefix), args...)
}

// lockctl runs lockctl in-process on the fixture's store and prefix.
func (f *fixture) lockctl(args ...string) (stdout, stderr string, code int) {
	return runArgs(f.args(args...)...)
}

// runArgs runs lockctl in-process with args.
func runArgs(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// outcome is what an acquisition made in a goroutine came to: a lock or a
// hold (got), or an error.
type outcome[T any] struct {
	got T
	err error
}

// waitBehind starts acquire in a goroutine, on a context that ends within a
// minute, and returns once queued reports it waiting (the test fails if it
// is not within 10s; name is what it waits for). Its outcome comes on the
// channel returned, which holds one: a test that takes it out to check it
// puts it back. At the end of the test, before the clients made before the
// call close, the acquisition is cancelled and what it got is released.
func waitBehind[T interface{ Release(context.Context) error }](t *testing.T, name string, acquire func(context.Context) (T, error), queued func() bool) chan outcome[T] {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out := make(chan outcome[T], 1)
	go func() {
		got, err := acquire(ctx)
		out <- outcome[T]{got, err}
	}()
	t.Cleanup(func() {
		cancel()
		if r := <-out; r.err == nil {
			_ = r.got.Release(context.Background())
		}
	})
	require.Eventually(t, queued, 10*time.Second, 20*time.Millisecond, "the waiter should be queued for %q", name)
	return out
}

// scene is a set of locks under a fixture's prefix:
//   - "held", held by a (identity host-a:1) on a 900ms lease, with b waiting
//     for it (the outcome comes on waiter);
//   - "plain", held by b, which has no identity;
//   - "window", released by a into a one-minute grace period;
//   - "bad", a key holding a value that is not a record (Redis only).
type scene struct {
	a, b   *lock.Client
	held   *lock.Lock
	plain  *lock.Lock
	waiter chan outcome[*lock.Lock] // b's wait for "held"
}

func newScene(t *testing.T, f *fixture) *scene {
	ctx := context.Background()
	s := &scene{a: f.client(lock.WithIdentity("host-a:1")), b: f.client()}
	var err error
	s.held, err = s.a.Acquire(ctx, "held", lock.Options{Lease: 900 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.held.Release(context.Background()) })
	s.plain, err = s.b.Acquire(ctx, "plain", lock.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.plain.Release(context.Background()) })
	require.NoError(t, s.a.Do(ctx, "window", lock.Options{GracePeriod: time.Minute}, func(context.Context) error { return nil }))
	if f.corrupt != nil {
		f.corrupt(s.a.Key("bad"), "garbage")
	}

	s.waiter = waitBehind(t, "held", func(ctx context.Context) (*lock.Lock, error) {
		return s.b.Acquire(ctx, "held", lock.Options{Wait: true})
	}, func() bool {
		st, err := s.a.Inspect(ctx, "held")
		return err == nil && st.Waiters == 1
	})
	return s
}

// table parses the output of ls: one map per row, from column name to cell.
// KIND, the last column, is there when some entries are not plain locks.
func table(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	header := lines[0]
	cols := strings.Fields(header)
	want := []string{"NAME", "OWNER", "TOKEN", "SINCE", "EXPIRES", "STATE", "WAITERS"}
	if len(cols) == len(want)+1 {
		want = append(want, "KIND")
	}
	require.Equal(t, want, cols)
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, col := range cols {
			start := strings.Index(header, col)
			end := len(line)
			if i+1 < len(cols) {
				end = min(end, strings.Index(header, cols[i+1]))
			}
			row[col] = strings.TrimSpace(line[min(start, len(line)):end])
		}
		rows = append(rows, row)
	}
	return rows
}

// fields parses the "name: value" lines of show.
func fields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// decode parses JSON output into v, keeping numbers exact.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	require.NoError(t, dec.Decode(v), "output should be JSON: %s", out)
}

func token(l *lock.Lock) string { return strconv.FormatUint(l.Token(), 10) }

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "no command"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"show"}, "show needs a lock name"},
		{[]string{"release"}, "release needs a lock name"},
		{[]string{"show", "a", "b"}, "unexpected arguments"},
		{[]string{"ls", "x"}, "unexpected arguments"},
		{[]string{"-bogus", "ls"}, "flag provided but not defined: -bogus"},
		{[]string{"-limit", "0", "ls"}, "-limit 0 is not positive"},
		{[]string{"-timeout", "0s", "ls"}, "-timeout 0s is not positive"},
		{[]string{"-redis", "http://x", "ls"}, "invalid URL scheme"},
		{[]string{"-prefix", "a{}", "ls"}, "hash tag"},
		{[]string{"release", "x"}, "Add -yes"},
		{[]string{"release", "x", "owner-1"}, `would free the hold "owner-1" of "x"`},
		{[]string{"-yes", "release", "x", ""}, "the owner is empty"},
		{[]string{"release", "x", "y", "z"}, `unexpected arguments ["z"]`},
		{[]string{"-postgres", "", "ls"}, "-postgres needs a DSN"},
		{[]string{"-postgres", "postgres://127.0.0.1:1/x", "-redis", "redis://127.0.0.1:1", "ls"}, "give one of them"},
		{[]string{"-table-prefix", "jobs_", "ls"}, "-table-prefix goes with -postgres"},
		{[]string{"-postgres", "x=y z", "ls"}, "-postgres: cannot parse"},
		{[]string{"-postgres", "postgres://127.0.0.1:1/x", "-table-prefix", "Jobs", "ls"}, `-table-prefix "Jobs"`},
		{[]string{"-etcd", "", "ls"}, "-etcd needs endpoints"},
		{[]string{"-etcd", "127.0.0.1:1", "-redis", "redis://127.0.0.1:1", "ls"}, "-redis and -etcd: give one of them"},
		{[]string{"-etcd", "127.0.0.1:1", "-postgres", "postgres://127.0.0.1:1/x", "ls"}, "-postgres and -etcd: give one of them"},
		{[]string{"-namespace", "jobs/", "ls"}, "-namespace goes with -etcd"},
		{[]string{"-etcd", "127.0.0.1:1", "-namespace", "", "ls"}, "-namespace is empty"},
		{[]string{"-etcd", "127.0.0.1:1,,127.0.0.1:2", "ls"}, "an empty endpoint"},
		{[]string{"-etcd", "https://127.0.0.1:1", "ls"}, "TLS is not supported"},
	} {
		stdout, stderr, code := runArgs(tc.args...)
		assert.Equal(t, exitUsage, code, "lockctl %q should be a usage error", tc.args)
		assert.Contains(t, stderr, tc.want, "lockctl %q", tc.args)
		assert.Empty(t, stdout, "lockctl %q", tc.args)
	}

	stdout, stderr, code := runArgs("-h")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, stderr)
	for _, want := range []string{"ls", "show NAME", "release NAME", "release NAME OWNER", "-redis", "-postgres", "-table-prefix", "-etcd", "-namespace", "-prefix", "lock.WithPrefix", "-json", "-limit", "-timeout", "-yes"} {
		assert.Contains(t, stdout, want, "the usage should mention %s", want)
	}
}

func TestRedisURL(t *testing.T) {
	rc, err := newRedis("redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001")
	require.NoError(t, err)
	assert.IsType(t, &redis.ClusterClient{}, rc)
	_ = rc.Close()

	rc, err = newRedis("redis://127.0.0.1:6379/2")
	require.NoError(t, err)
	assert.IsType(t, &redis.Client{}, rc)
	_ = rc.Close()
}

func TestUnreachable(t *testing.T) {
	for _, store := range [][]string{{"-redis", "redis://127.0.0.1:1"}, {"-postgres", "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable"},
		{"-etcd", "127.0.0.1:1"}} {
		for _, cmd := range [][]string{{"ls"}, {"show", "x"}, {"-yes", "release", "x"}} {
			start := time.Now()
			stdout, stderr, code := runArgs(append(append(slices.Clone(store), "-timeout", "5s"), cmd...)...)
			assert.Equal(t, exitError, code, "lockctl %q %q on an unreachable server", store, cmd)
			assert.Contains(t, stderr, "lockctl: ", "lockctl %q", cmd)
			assert.Contains(t, stderr, "127.0.0.1:1", "the error should name the address")
			assert.NotContains(t, stderr, "secret", "the error should not show the password")
			assert.Empty(t, stdout)
			assert.Less(t, time.Since(start), 20*time.Second, "lockctl %q should end around its 5s timeout", cmd)
		}
	}
}

// TestTimeout runs lockctl against a server that accepts connections and
// never answers: -timeout ends it.
func TestTimeout(t *testing.T) {
	addr := servers.Silent(t)
	start := time.Now()
	_, stderr, code := runArgs("-redis", "redis://"+addr, "-timeout", "1s", "ls")
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr, "lockctl: ")
	assert.Less(t, time.Since(start), 15*time.Second, "a 1s -timeout should end the command")
}

func TestCommands(t *testing.T) {
	forEachStore(t, testCommands)
}

func testCommands(t *testing.T, f *fixture) {
	s := newScene(t, f)
	ctx := context.Background()

	t.Run("ls", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, "ls should succeed with a corrupt entry; stderr: %s", stderr)
		assert.Empty(t, stderr)
		rows := table(t, stdout)
		var names []string
		for _, r := range rows {
			names = append(names, r["NAME"])
		}
		if f.corrupt != nil {
			require.Equal(t, []string{"bad", "held", "plain", "window"}, names)
			bad := rows[0]
			assert.True(t, strings.HasPrefix(bad["STATE"], "corrupt: "), "bad: %q", bad["STATE"])
			assert.Contains(t, bad["STATE"], "garbage")
			rows = rows[1:]
		} else {
			require.Equal(t, []string{"held", "plain", "window"}, names)
		}
		held, plain, window := rows[0], rows[1], rows[2]

		assert.Equal(t, "held", held["STATE"])
		assert.Equal(t, "host-a:1", held["OWNER"], "the identity stands for the owner")
		assert.Equal(t, token(s.held), held["TOKEN"])
		assert.Equal(t, "1", held["WAITERS"])
		assert.True(t, strings.HasSuffix(held["SINCE"], "s ago"), "since: %q", held["SINCE"])
		exp, err := time.ParseDuration(held["EXPIRES"])
		require.NoError(t, err, "expires: %q", held["EXPIRES"])
		lease := 900 * time.Millisecond
		if f.ttlStep > 0 {
			lease = (lease + f.ttlStep - 1) / f.ttlStep * f.ttlStep // as the store keeps it
		}
		assert.True(t, exp > 0 && exp <= lease, "expires: %v", exp)

		assert.Equal(t, "held", plain["STATE"])
		assert.Equal(t, s.plain.Owner(), plain["OWNER"], "without an identity, the owner")
		assert.Equal(t, "0", plain["WAITERS"])

		assert.Equal(t, "grace period", window["STATE"])
	})

	t.Run("ls -json", func(t *testing.T) {
		stdout, _, code := f.lockctl("-json", "ls")
		require.Equal(t, exitOK, code)
		var got []map[string]any
		decode(t, stdout, &got)
		if f.corrupt != nil {
			require.Len(t, got, 4)
			bad := got[0]
			assert.Equal(t, "bad", bad["name"])
			assert.Equal(t, "corrupt", bad["state"])
			assert.Contains(t, bad["error"], "corrupt record")
			got = got[1:]
		}
		require.Len(t, got, 3)
		held, plain, window := got[0], got[1], got[2]

		assert.Equal(t, "held", held["name"])
		assert.Equal(t, s.a.Key("held"), held["key"])
		assert.Equal(t, "held", held["state"])
		assert.Equal(t, s.held.Owner(), held["owner"])
		assert.Equal(t, "host-a:1", held["identity"])
		assert.Equal(t, json.Number(token(s.held)), held["token"])
		assert.Equal(t, json.Number("1"), held["waiters"])
		assert.Equal(t, false, held["grace_period"])
		for _, k := range []string{"since", "until"} {
			_, err := time.Parse(time.RFC3339Nano, held[k].(string))
			assert.NoError(t, err, "%s should be RFC 3339", k)
		}

		assert.Equal(t, s.plain.Owner(), plain["owner"])
		assert.NotContains(t, plain, "identity")
		assert.Equal(t, json.Number("0"), plain["waiters"])

		assert.Equal(t, "window", window["name"])
		assert.Equal(t, "grace period", window["state"])
		assert.Equal(t, true, window["grace_period"])
	})

	t.Run("ls -limit", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-limit", "2", "ls")
		require.Equal(t, exitOK, code)
		assert.Len(t, table(t, stdout), 2)
		assert.Contains(t, stderr, "more than 2 locks; showing 2; use -limit")
	})

	t.Run("show", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("show", "held")
		require.Equal(t, exitOK, code, stderr)
		got := fields(stdout)
		assert.Equal(t, "held", got["name"])
		assert.Equal(t, s.a.Key("held"), got["key"])
		assert.Equal(t, "held", got["state"])
		assert.Equal(t, s.held.Owner(), got["owner"])
		assert.Equal(t, "host-a:1", got["identity"])
		assert.Equal(t, token(s.held), got["token"])
		assert.Equal(t, "1", got["waiters"])
		assert.Contains(t, got["since"], "ago")
		assert.NotEmpty(t, got["until"])
		assert.NotEmpty(t, got["time left"])
		assert.Equal(t, "lock", got["kind"], "a plain lock says its kind too (issue 38)")

		stdout, _, code = f.lockctl("show", "window")
		require.Equal(t, exitOK, code)
		assert.Equal(t, "grace period", fields(stdout)["state"])
	})

	t.Run("show -json", func(t *testing.T) {
		stdout, _, code := f.lockctl("show", "-json", "held") // a flag after the command
		require.Equal(t, exitOK, code)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, "held", got["state"])
		assert.Equal(t, s.held.Owner(), got["owner"])
		assert.Equal(t, "host-a:1", got["identity"])
		assert.Equal(t, json.Number(token(s.held)), got["token"])
		assert.Equal(t, json.Number("1"), got["waiters"])
		assert.Equal(t, false, got["grace_period"])
	})

	t.Run("show free", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("show", "nobody")
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, `lock "nobody"`)
		assert.Contains(t, stdout, "is free")

		stdout, _, code = f.lockctl("-json", "show", "nobody")
		require.Equal(t, exitOK, code)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, "free", got["state"])
		assert.NotContains(t, got, "owner")
	})

	t.Run("show corrupt", func(t *testing.T) {
		if f.corrupt == nil {
			t.Skip("the store holds records only")
		}
		stdout, stderr, code := f.lockctl("show", "bad")
		assert.Equal(t, exitError, code)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "corrupt record")
		assert.Contains(t, stderr, "garbage")
	})

	t.Run("release without -yes", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("release", "held")
		assert.Equal(t, exitUsage, code)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "-yes")
		st, err := s.a.Inspect(ctx, "held")
		require.NoError(t, err)
		assert.Equal(t, s.held.Owner(), st.Owner, "nothing should be released")
		assert.Equal(t, 1, st.Waiters)
	})

	t.Run("release corrupt", func(t *testing.T) {
		if f.corrupt == nil {
			t.Skip("the store holds records only")
		}
		_, stderr, code := f.lockctl("-yes", "release", "bad")
		assert.Equal(t, exitError, code)
		assert.Contains(t, stderr, "corrupt record")
		assert.Equal(t, "garbage", f.raw(s.a.Key("bad")), "a corrupt value is left as it is")
	})

	t.Run("release free", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-yes", "release", "nobody")
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "was free")
		assert.NotContains(t, stderr, "forced release", "nothing released, nothing logged")
	})

	t.Run("release -yes", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-yes", "release", "held")
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "released lock \"held\"")
		assert.Contains(t, stdout, s.held.Owner())
		assert.Contains(t, stdout, "token "+token(s.held))
		assert.Contains(t, stderr, "level=WARN", "the forced release is logged")
		assert.Contains(t, stderr, "forced release")

		r := within10s(t, s.waiter, "the waiter did not get the lock within 10s of the forced release")
		s.waiter <- r // for the cleanup to release it
		require.NoError(t, r.err, "the waiter should get the lock")
		assert.Greater(t, r.got.Token(), s.held.Token(), "the new grant's token is newer")

		within10s(t, s.held.Done(), "the holder was not told within 10s that its lock was lost")
		assert.ErrorIs(t, s.held.Err(), lock.ErrLost)
	})

	t.Run("release grace period", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-json", "-yes", "release", "window")
		require.Equal(t, exitOK, code, stderr)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, true, got["released"])
		assert.Equal(t, "grace period", got["state"], "the state it was found in")
		st, err := s.a.Inspect(ctx, "window")
		require.NoError(t, err)
		assert.True(t, st.Free(), "the grace period should be over")
	})
}

// TestBinary builds lockctl and runs it against the real Redis, the real
// PostgreSQL and an etcd member.
func TestBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build lockctl")
	bin := filepath.Join(t.TempDir(), "lockctl")
	build := exec.Command(gobin, "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	forEachStore(t, func(t *testing.T, f *fixture) { testBinary(t, f, bin) })
}

func testBinary(t *testing.T, f *fixture, bin string) {
	ctx := context.Background()
	lockctl := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, bin, f.args(args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("lockctl %q: %v", args, err)
		}
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}

	c := f.client(lock.WithIdentity("host-a:1"))
	held, err := c.Acquire(ctx, "job", lock.Options{Lease: 900 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Release(context.Background()) })

	stdout, stderr, code := lockctl("ls")
	require.Equal(t, exitOK, code, stderr)
	rows := table(t, stdout)
	require.Len(t, rows, 1)
	assert.Equal(t, "job", rows[0]["NAME"])
	assert.Equal(t, "held", rows[0]["STATE"])
	assert.Equal(t, "host-a:1", rows[0]["OWNER"])

	stdout, _, code = lockctl("-json", "ls")
	require.Equal(t, exitOK, code)
	var list []map[string]any
	decode(t, stdout, &list)
	require.Len(t, list, 1)
	assert.Equal(t, held.Owner(), list[0]["owner"])

	stdout, _, code = lockctl("show", "job")
	require.Equal(t, exitOK, code)
	assert.Equal(t, held.Owner(), fields(stdout)["owner"])

	_, stderr, code = lockctl("release", "job")
	assert.Equal(t, exitUsage, code, "release without -yes")
	assert.Contains(t, stderr, "-yes")

	stdout, stderr, code = lockctl("-json", "-yes", "release", "job")
	require.Equal(t, exitOK, code, stderr)
	var rel map[string]any
	decode(t, stdout, &rel)
	assert.Equal(t, true, rel["released"])
	assert.Equal(t, held.Owner(), rel["owner"])
	assert.Equal(t, json.Number(token(held)), rel["token"])
	assert.Contains(t, stderr, "forced release")

	stdout, stderr, code = lockctl("-yes", "release", "job")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "was free")

	stdout, _, code = lockctl("show", "job")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stdout, "is free")

	stdout, _, code = lockctl("ls")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stdout, "no locks")

	_, stderr, code = lockctl("show")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "needs a lock name")

	cmd := exec.CommandContext(ctx, bin, "-redis", "redis://127.0.0.1:1", "-timeout", "5s", "ls")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	err = cmd.Run()
	assert.Error(t, err)
	assert.Equal(t, exitError, cmd.ProcessState.ExitCode())
	assert.Contains(t, errOut.String(), "127.0.0.1:1")

	within10s(t, held.Done(), "the holder was not told within 10s that its lock was lost")
	assert.ErrorIs(t, held.Err(), lock.ErrLost)
}

// within10s returns what ch receives within 10 s, and fails the test with
// msg otherwise.
func within10s[T any](t *testing.T, ch <-chan T, msg string) T {
	t.Helper()
	var v T
	select {
	case v = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
	return v
}

// TestEmptyList checks what ls says when it finds no lock: the prefix it
// looked under, where, and how to give another one (issue 22).
func TestEmptyList(t *testing.T) {
	forEachStore(t, func(t *testing.T, f *fixture) {
		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, stderr)
		assert.Empty(t, stderr)
		assert.Contains(t, stdout, fmt.Sprintf("no locks under the prefix %q", f.prefix))
		assert.Contains(t, stdout, f.prefix+"{NAME}", "the keys it looked for")
		assert.Contains(t, stdout, "lock.WithPrefix")
		assert.Contains(t, stdout, f.hint, "how to give the services' settings")
		assert.Contains(t, stdout, f.where)

		stdout, stderr, code = f.lockctl("-json", "ls")
		require.Equal(t, exitOK, code, stderr)
		assert.Equal(t, "[]\n", stdout, "-json prints an empty array alone")
	})
}

// TestPostgresNoTables runs lockctl on a database without the provider's
// tables (a wrong -table-prefix): it fails, and creates nothing.
func TestPostgresNoTables(t *testing.T) {
	pool := realPostgres(t)
	ctx := context.Background()
	tables := "lockctl_none" + randomHex(4) + "_"
	for _, cmd := range [][]string{{"ls"}, {"show", "x"}, {"-yes", "release", "x"}} {
		stdout, stderr, code := runArgs(append([]string{"-postgres", postgresDSN(t), "-table-prefix", tables}, cmd...)...)
		assert.Equal(t, exitError, code, "lockctl %q", cmd)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, "no lock tables "+tables+"*")
		assert.Contains(t, stderr, "-table-prefix")
	}
	var made bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", tables+"records").Scan(&made))
	assert.False(t, made, "lockctl should create no table")
}

// TestDocsUseOnePrefix checks that the examples of lockctl, in its README and
// the repository's, use the prefix that the README's Redis example gives to
// lock.WithPrefix: an operator who copies them looks where the services
// keep their locks (issue 22).
func TestDocsUseOnePrefix(t *testing.T) {
	root, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	own, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`lock\.WithPrefix\("([^"]+)"\)`).FindSubmatch(root)
	require.NotNil(t, m, "README.md should give lock.WithPrefix a prefix in its Redis example")
	prefix := string(m[1])

	for name, text := range map[string]string{"README.md": string(root), "cmd/lockctl/README.md": string(own)} {
		var runs int
		for _, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "$ lockctl") {
				continue
			}
			runs++
			assert.Contains(t, line, "-prefix "+prefix+" ", "%s: %q should look under the services' prefix", name, line)
		}
		assert.NotZero(t, runs, "%s should show lockctl being run", name)
	}
	// The keys its outputs show are under that prefix too.
	for _, key := range regexp.MustCompile(`[\w:.-]*\{[\w-]+\}`).FindAllString(string(own), -1) {
		assert.True(t, strings.HasPrefix(key, prefix), "cmd/lockctl/README.md shows the key %q, not under %q", key, prefix)
	}
}
