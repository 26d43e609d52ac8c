package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// heldSet is a set of holds under a fixture's prefix:
//   - "pool", a semaphore of 3 permits: 2 held by a (identity host-a:1) on
//     a 1.5s lease, 1 by b (identity host-b:2), and b waiting for 2 more
//     (the outcome comes on waiter);
//   - "doc", a read-write lock of at most 4 readers, read by a and b;
//   - "log", a read-write lock of at most 4 readers, written by a;
//   - "job", a plain lock held by a.
type heldSet struct {
	a, b     *lock.Client
	sem      *lock.Semaphore
	two, one *lock.Hold // pool's holds, of 2 and 1 permits
	job      *lock.Lock
	waiter   chan outcome[*lock.Hold] // b's wait for 2 more of pool
}

func newHeldSet(t *testing.T, f *fixture) *heldSet {
	ctx := context.Background()
	s := &heldSet{a: f.client(lock.WithIdentity("host-a:1")), b: f.client(lock.WithIdentity("host-b:2"))}
	release := func(h *lock.Hold) { t.Cleanup(func() { _ = h.Release(context.Background()) }) }
	var err error
	s.sem, err = s.a.Semaphore("pool", 3)
	require.NoError(t, err)
	s.two, err = s.sem.Acquire(ctx, 2, lock.Options{Lease: 1500 * time.Millisecond})
	require.NoError(t, err)
	release(s.two)
	semB, err := s.b.Semaphore("pool", 3)
	require.NoError(t, err)
	s.one, err = semB.Acquire(ctx, 1, lock.Options{Lease: 1500 * time.Millisecond})
	require.NoError(t, err)
	release(s.one)
	for _, c := range []*lock.Client{s.a, s.b} {
		doc, err := c.RWMutex("doc", 4)
		require.NoError(t, err)
		r, err := doc.RLock(ctx, lock.Options{})
		require.NoError(t, err)
		release(r)
	}
	logs, err := s.a.RWMutex("log", 4)
	require.NoError(t, err)
	w, err := logs.Lock(ctx, lock.Options{})
	require.NoError(t, err)
	release(w)
	s.job, err = s.a.Acquire(ctx, "job", lock.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.job.Release(context.Background()) })

	s.waiter = waitBehind(t, "pool", func(ctx context.Context) (*lock.Hold, error) {
		return semB.Acquire(ctx, 2, lock.Options{Wait: true})
	}, func() bool {
		st, err := s.sem.Inspect(ctx)
		return err == nil && st.Waiters == 1
	})
	return s
}

// owner returns the owner of h, as show lists it.
func owner(h *lock.Hold) string { return h.Locks()[0].Owner() }

// TestCounted: ls lists a semaphore and a read-write lock as one row each
// (kind, used/limit, holders, waiters); show prints its holders and its
// queue, and does not call it free while it is held; release refuses it
// whole, and frees one of its holds given the holder's owner (issue 30).
func TestCounted(t *testing.T) {
	forEachStore(t, testCounted)
}

func testCounted(t *testing.T, f *fixture) {
	s := newHeldSet(t, f)
	ctx := context.Background()

	t.Run("ls", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, stderr)
		rows := table(t, stdout) // with a KIND column
		require.Len(t, rows, 4, stdout)
		byName := map[string]map[string]string{}
		for _, r := range rows {
			byName[r["NAME"]] = r
		}
		pool := byName["pool"]
		assert.Equal(t, "2 holders", pool["OWNER"])
		assert.Equal(t, "-", pool["TOKEN"])
		assert.Equal(t, "-", pool["SINCE"])
		assert.Equal(t, "held", pool["STATE"])
		assert.Equal(t, "1", pool["WAITERS"])
		assert.Equal(t, "semaphore 3/3 permits", pool["KIND"])
		exp, err := time.ParseDuration(pool["EXPIRES"])
		require.NoError(t, err, "expires: %q", pool["EXPIRES"])
		assert.Greater(t, exp, time.Duration(0))

		assert.Equal(t, "2 holders", byName["doc"]["OWNER"])
		assert.Equal(t, "rwmutex 2/4 readers", byName["doc"]["KIND"])
		assert.Equal(t, "0", byName["doc"]["WAITERS"])
		assert.Equal(t, "1 holder", byName["log"]["OWNER"])
		assert.Equal(t, "rwmutex 4/4 writer", byName["log"]["KIND"])
		assert.Equal(t, "host-a:1", byName["job"]["OWNER"])
		assert.Equal(t, "lock", byName["job"]["KIND"], "a plain lock")
	})

	t.Run("ls -json", func(t *testing.T) {
		stdout, _, code := f.lockctl("-json", "ls")
		require.Equal(t, exitOK, code)
		var got []map[string]any
		decode(t, stdout, &got)
		require.Len(t, got, 4)
		pool := got[3]
		require.Equal(t, "pool", pool["name"])
		assert.Equal(t, "semaphore", pool["kind"])
		assert.Equal(t, "held", pool["state"])
		assert.Equal(t, json.Number("3"), pool["limit"])
		assert.Equal(t, json.Number("3"), pool["used"])
		assert.Equal(t, json.Number("1"), pool["waiters"])
		assert.Len(t, pool["holders"], 2)
		assert.Len(t, pool["queue"], 1)
		assert.NotContains(t, pool, "owner")
		assert.NotContains(t, got[1], "used", "a plain lock has no used")
	})

	t.Run("show", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("show", "pool")
		require.Equal(t, exitOK, code, stderr)
		assert.NotContains(t, stdout, "free")
		got := fields(stdout)
		assert.Equal(t, "pool", got["name"])
		assert.Equal(t, s.a.Key("pool"), got["key"])
		assert.Equal(t, "semaphore (3 permits)", got["kind"])
		assert.Equal(t, "held", got["state"])
		assert.Equal(t, "3 of 3 permits held", got["used"])
		assert.Equal(t, "2", got["holders"])
		assert.Equal(t, "1", got["waiters"])

		holders, queue := showTables(t, stdout)
		require.Len(t, holders, 3, stdout) // its header and two holders
		assert.Equal(t, []string{"HOLDER", "IDENTITY", "WEIGHT", "TOKEN", "SINCE", "UNTIL", "TIME LEFT"}, holders[0])
		assert.Equal(t, []string{owner(s.two), "host-a:1", "2", strconv.FormatUint(s.two.Token(), 10)}, holders[1][:4])
		assert.Equal(t, []string{owner(s.one), "host-b:2", "1", strconv.FormatUint(s.one.Token(), 10)}, holders[2][:4])
		require.Len(t, queue, 2, stdout)
		assert.Equal(t, []string{"QUEUED", "IDENTITY", "WEIGHT"}, queue[0])
		assert.Equal(t, []string{"host-b:2", "2"}, queue[1][1:])
		assert.Contains(t, queue[1][0], "host-b:2/")

		stdout, stderr, code = f.lockctl("show", "log")
		require.Equal(t, exitOK, code, stderr)
		got = fields(stdout)
		assert.Equal(t, "read-write lock (at most 4 readers)", got["kind"])
		assert.Equal(t, "a writer", got["used"])
		holders, _ = showTables(t, stdout)
		require.Len(t, holders, 2, stdout)
		assert.Equal(t, "KIND", holders[0][2])
		assert.Equal(t, []string{"host-a:1", "writer", "4"}, holders[1][1:4])
	})

	t.Run("show -json", func(t *testing.T) {
		stdout, _, code := f.lockctl("-json", "show", "pool")
		require.Equal(t, exitOK, code)
		var got struct {
			State   string     `json:"state"`
			Kind    string     `json:"kind"`
			Limit   int        `json:"limit"`
			Used    int        `json:"used"`
			Waiters int        `json:"waiters"`
			Holders []holdJSON `json:"holders"`
			Queue   []holdJSON `json:"queue"`
		}
		decode(t, stdout, &got)
		assert.Equal(t, "held", got.State)
		assert.Equal(t, "semaphore", got.Kind)
		assert.Equal(t, 3, got.Limit)
		assert.Equal(t, 3, got.Used)
		assert.Equal(t, 1, got.Waiters)
		require.Len(t, got.Holders, 2)
		h := got.Holders[0]
		assert.Equal(t, owner(s.two), h.Owner)
		assert.Equal(t, "host-a:1", h.Identity)
		assert.Equal(t, "permit", h.Kind)
		assert.Equal(t, 2, h.Weight)
		assert.Equal(t, s.two.Token(), h.Token)
		for _, v := range []string{h.Since, h.Until} {
			_, err := time.Parse(time.RFC3339Nano, v)
			assert.NoError(t, err, "%q should be RFC 3339", v)
		}
		require.Len(t, got.Queue, 1)
		assert.Equal(t, holdJSON{Owner: got.Queue[0].Owner, Identity: "host-b:2", Kind: "permit", Weight: 2}, got.Queue[0])
	})

	t.Run("release whole", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-yes", "release", "pool")
		assert.Equal(t, exitError, code)
		assert.Empty(t, stdout)
		assert.Contains(t, stderr, `"pool" is a semaphore (3 permits), not a lock`)
		assert.Contains(t, stderr, "release NAME OWNER")
		assert.NotContains(t, stderr, "forced release")
		st, err := s.sem.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, st.Used, "nothing should be released")
	})

	t.Run("release hold refused", func(t *testing.T) {
		_, stderr, code := f.lockctl("release", "pool", owner(s.one))
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, stderr, "-yes")

		_, stderr, code = f.lockctl("-yes", "release", "pool", "nobody/1~n3")
		assert.Equal(t, exitError, code)
		assert.Contains(t, stderr, `has no holder "nobody/1~n3"`)

		_, stderr, code = f.lockctl("-yes", "release", "job", owner(s.one))
		assert.Equal(t, exitError, code)
		assert.Contains(t, stderr, `"job" is a lock, not a semaphore or a read-write lock`)

		_, stderr, code = f.lockctl("-yes", "release", "nothing", owner(s.one))
		assert.Equal(t, exitError, code)
		assert.Contains(t, stderr, `no semaphore or read-write lock "nothing"`)

		st, err := s.sem.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, st.Used, "nothing should be released")
		assert.NoError(t, s.job.Err(), "the lock is held still")
	})

	t.Run("release hold", func(t *testing.T) {
		// The hold of 2: the waiter's 2 then fit beside the hold of 1.
		stdout, stderr, code := f.lockctl("-yes", "release", "pool", owner(s.two))
		require.Equal(t, exitOK, code, stderr)
		assert.Contains(t, stdout, "released the hold of "+owner(s.two)+` on "pool" (key `+s.a.Key("pool")+"), a semaphore (3 permits)")
		assert.Contains(t, stdout, "weight 2, token "+strconv.FormatUint(s.two.Token(), 10))
		assert.Contains(t, stderr, "level=WARN", "the forced release is logged")
		assert.Contains(t, stderr, "forced release of a hold")

		r := within10s(t, s.waiter, "the waiter did not get its permits within 10s of the forced release")
		s.waiter <- r // for the cleanup to release it
		require.NoError(t, r.err, "the waiter should get its permits")
		assert.Greater(t, r.got.Token(), s.two.Token(), "the new grant's token is newer")

		within10s(t, s.two.Done(), "the holder was not told within 10s that its hold was lost")
		assert.ErrorIs(t, s.two.Err(), lock.ErrLost)
		assert.NoError(t, s.one.Err(), "the other hold is held still")
	})

	t.Run("release hold -json", func(t *testing.T) {
		stdout, stderr, code := f.lockctl("-json", "-yes", "release", "pool", owner(s.one))
		require.Equal(t, exitOK, code, stderr)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, true, got["released"])
		assert.Equal(t, owner(s.one), got["owner"])
		assert.Equal(t, "permit", got["kind"])
		assert.Equal(t, "pool", got["of"])
		assert.Equal(t, json.Number("1"), got["weight"])
		assert.Equal(t, json.Number(strconv.FormatUint(s.one.Token(), 10)), got["token"])
	})
}

// showTables returns the holders' and the queue's tables that show prints
// for a semaphore or a read-write lock, each a header and its rows, split
// on runs of two spaces or more; nil when show printed none.
func showTables(t *testing.T, out string) (holders, queue [][]string) {
	t.Helper()
	for _, block := range strings.Split(out, "\n\n")[1:] {
		var rows [][]string
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			var cells []string
			for _, c := range strings.Split(line, "  ") {
				if c = strings.TrimSpace(c); c != "" {
					cells = append(cells, c)
				}
			}
			rows = append(rows, cells)
		}
		switch rows[0][0] {
		case "HOLDER":
			holders = rows
		case "QUEUED":
			queue = rows
		default:
			t.Fatalf("a table of show's that is neither the holders' nor the queue's: %q", block)
		}
	}
	return holders, queue
}

// TestRoleShownAsRole (issue 31, item 7): an election's role is shown as
// one in ls (KIND), show and -json, not as a plain lock ("lock").
func TestRoleShownAsRole(t *testing.T) {
	forEachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		c, err := lock.NewClient(f.provider(), lock.WithPrefix(f.prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		term, err := c.Campaign(ctx, "scheduler", lock.ElectionOptions{})
		require.NoError(t, err)
		defer func() { _ = term.Resign(ctx) }()

		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, stderr)
		rows := table(t, stdout)
		require.Len(t, rows, 1, stdout)
		assert.Equal(t, "election role", rows[0]["KIND"])

		stdout, _, code = f.lockctl("show", "scheduler")
		require.Equal(t, exitOK, code)
		assert.Equal(t, "election role", fields(stdout)["kind"])

		stdout, _, code = f.lockctl("-json", "show", "scheduler")
		require.Equal(t, exitOK, code)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, "role", got["kind"])
	})
}

// TestStateOfAWaitedForName: a semaphore or read-write lock that holds
// waiters alone is in use (no lock can take its name: issue 38), and ls,
// show and -json say "waited for", not "free".
func TestStateOfAWaitedForName(t *testing.T) {
	s := lock.Status{Name: "pool", Key: "lock:{pool}", Kind: "semaphore", Limit: 3, Waiters: 2,
		Queue: []lock.Status{{Owner: "o~n3", Kind: "permit", Weight: 2}, {Owner: "p~n3", Kind: "permit", Weight: 1}}}
	assert.Equal(t, "waited for", state(s))
	assert.Equal(t, "waited for", toJSON(s, true).State)
	assert.Equal(t, "free", state(lock.Status{Name: "job", Key: "lock:{job}"}), "a name nobody uses")
}
