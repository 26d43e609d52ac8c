package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/postgres"
)

// The child processes of TestElectionStoppedLeaders: the test binary run
// again with electionChildEnv set to the child's name runs electionWriter
// instead of the test.
const (
	electionChildEnv  = "LOCK_PG_ELECTION_CHILD"
	electionPrefixEnv = "LOCK_PG_ELECTION_PREFIX"
	electionRoleEnv   = "LOCK_PG_ELECTION_ROLE"
	electionLeaseEnv  = "LOCK_PG_ELECTION_LEASE"
)

// TestElectionStoppedLeaders runs three processes that Lead one role on
// PostgreSQL and, while they lead, make a fenced write (postgres.Fence, with
// the term's number, and an insert into a log table, in one transaction)
// every 10 ms, without looking at their context in between, as a leader
// that does not know it was paused would. Round after round (20, lease
// 500 ms), the test stops the leader (SIGSTOP), waits until another process
// leads and has written, and continues it two leases after it stopped:
//   - every write the stopped leader starts after it continues is refused
//     with lock.ErrStaleToken, and its term ends;
//   - the writes that passed the fence ran in the order of their terms (the
//     log's terms never go down);
//   - each round's new term is greater than the stopped one;
//   - each process's Lead campaigns again after its losses, without a
//     restart: every process leads more than one term.
//
// The writers' sessions have idle_in_transaction_session_timeout set to a
// lease: a leader stopped inside its transaction holds the fence row, which
// the next leader's write would wait for until the stopped one continued;
// the server ends that session instead, and the transaction is rolled back.
func TestElectionStoppedLeaders(t *testing.T) {
	if name := os.Getenv(electionChildEnv); name != "" {
		os.Exit(electionWriter(t, name))
	}
	testenv.SkipShort(t, "a fault test of ~20 s (leaders stopped and continued)")
	const (
		procs  = 3
		rounds = 20
		lease  = 500 * time.Millisecond
	)
	prefix := testPrefix(t)
	pool := newPool(t)
	ctx := ctxTimeout(t, 100*time.Second)
	fences, writes := prefix+"fences", prefix+"election_writes"
	require.NoError(t, postgres.Fence{Table: fences}.CreateTable(ctx, pool))
	_, err := pool.Exec(ctx, `CREATE TABLE `+writes+` (seq bigserial PRIMARY KEY, term bigint NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+fences+`, `+writes)
		assert.NoError(t, err)
	})
	obs := newClient(t, newProvider(t, prefix))
	role := uniqueName(t)

	var b faults.WriteBoard
	children := make([]*faults.Child, procs)
	for i := range children {
		children[i] = faults.StartChild(t, "^TestElectionStoppedLeaders$", "ELECTION",
			electionChildEnv+"=writer-"+strconv.Itoa(i),
			electionPrefixEnv+"="+prefix,
			electionRoleEnv+"="+role,
			electionLeaseEnv+"="+lease.String())
		go b.Follow(i, children[i].Lines)
	}
	leaderOf := func() (int, uint64) {
		st, err := obs.Inspect(ctx, role)
		require.NoError(t, err)
		for i := range procs {
			if st.Identity == "writer-"+strconv.Itoa(i) {
				return i, st.Token
			}
		}
		return -1, 0
	}
	var last uint64
	var stale, staleRefused, failedAfter, inFlight int
	for r := range rounds {
		var i int
		var term uint64
		require.Eventually(t, func() bool {
			i, term = leaderOf()
			return i >= 0 && b.Wrote(term)
		}, 10*time.Second, time.Millisecond, "round %d: a process leads and has written", r)
		assert.Greater(t, term, last, "round %d: the terms increase", r)
		last = term
		require.NoError(t, children[i].Cmd.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		var next uint64
		require.Eventually(t, func() bool {
			j, tn := leaderOf()
			next = tn
			return j >= 0 && j != i && tn > term && b.Wrote(tn)
		}, 10*time.Second, time.Millisecond, "round %d: another process leads and writes while writer-%d is stopped", r, i)
		time.Sleep(time.Until(stopped.Add(2 * lease)))
		resumed := time.Now()
		require.NoError(t, children[i].Cmd.Process.Signal(syscall.SIGCONT))
		// The stopped leader's term ends (its function returns) at its
		// next refused write: started after it continued, or in flight
		// when it was stopped (then not counted here: it ran before the
		// new leader's writes, or was rolled back).
		require.Eventually(t, func() bool { return b.Ended(term) }, 10*time.Second, time.Millisecond,
			"round %d: writer-%d's term %d ends after it continued", r, i, term)
		passed, refused, failed := b.ResumedWrites(term, resumed)
		if passed+refused == 0 {
			inFlight++
		}
		stale += passed + refused
		staleRefused += refused
		failedAfter += failed
		assert.Zero(t, passed, "round %d: %d of writer-%d's writes with term %d started after it continued passed the fence (term %d had written; %d were refused)",
			r, passed, i, term, next, refused)
	}
	for _, c := range children {
		c.Send("quit")
	}
	quitCtx := ctxTimeout(t, 20*time.Second)
	for _, c := range children {
		assert.NoError(t, c.Wait(quitCtx), "the child failed:\n%s", c.Out())
	}
	rows, err := pool.Query(ctx, `SELECT term FROM `+writes+` ORDER BY seq`)
	require.NoError(t, err)
	terms, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	for k := 1; k < len(terms); k++ {
		if !assert.GreaterOrEqual(t, terms[k], terms[k-1], "the fence let term %d write after term %d (write %d of %d)", terms[k], terms[k-1], k, len(terms)) {
			break
		}
	}
	elected := b.ElectedBy()
	for i := range procs {
		assert.GreaterOrEqual(t, elected[i], 2, "writer-%d led %d terms: it did not campaign again after its losses", i, elected[i])
	}
	t.Logf("postgres: election stopped leaders: rounds=%d fenced_writes_passed=%d writes_after_resume=%d refused=%d failed_otherwise=%d rounds_ending_on_a_write_in_flight=%d terms_led_per_process=%v",
		rounds, len(terms), stale, staleRefused, failedAfter, inFlight, elected)
}

// electionWriter is a child of TestElectionStoppedLeaders: it Leads the role
// (identity name) and, while it leads, makes a fenced write every 10 ms,
// reporting "ELECTION elected term=T", "ELECTION write term=T
// result=ok|stale|error start=<Unix ns>" and "ELECTION ended term=T" on
// stdout (read by a faults.WriteBoard). A refused write ends the term; so
// does a write that passed once the term's context has ended. After another
// error (its session ended by the server while it was stopped) the writes
// go on, up to 100 in a row. A line on its stdin ("quit"), or its end, ends
// its Lead. It returns the process's exit status.
func electionWriter(t testing.TB, name string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	lease, err := time.ParseDuration(os.Getenv(electionLeaseEnv))
	if err != nil {
		return fail(err)
	}
	prefix, role := os.Getenv(electionPrefixEnv), os.Getenv(electionRoleEnv)
	ctx, quit := context.WithCancel(context.Background())
	defer quit()
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // "quit", or EOF
		quit()
	}()
	lockPool, err := pgxpool.New(ctx, dsn(t)) // the parent's server, named in the environment
	if err != nil {
		return fail(err)
	}
	defer lockPool.Close()
	cfg, err := pgxpool.ParseConfig(dsn(t))
	if err != nil {
		return fail(err)
	}
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(lease.Milliseconds(), 10)
	data, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer data.Close()
	p, err := postgres.NewProvider(ctx, lockPool, postgres.WithTablePrefix(prefix))
	if err != nil {
		return fail(err)
	}
	c, err := lock.NewClient(p, lock.WithIdentity(name), lock.WithPollInterval(50*time.Millisecond))
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	fence := postgres.Fence{Table: prefix + "fences"}
	insert := `INSERT INTO ` + prefix + `election_writes (term) VALUES ($1)`
	err = c.Lead(ctx, role, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		for failed := 0; ; {
			start := time.Now()
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := pgx.BeginFunc(wctx, data, func(tx pgx.Tx) error {
				if err := fence.Advance(wctx, tx, role, l.Token()); err != nil {
					return err
				}
				_, err := tx.Exec(wctx, insert, int64(l.Token()))
				return err
			})
			cancel()
			result := "ok"
			switch {
			case errors.Is(err, lock.ErrStaleToken):
				result = "stale"
			case err != nil:
				result = "error"
				failed++
			default:
				failed = 0
			}
			fmt.Printf("ELECTION write term=%d result=%s start=%d\n", l.Token(), result, start.UnixNano())
			switch {
			case result == "stale", failed >= 100:
				return err
			case err == nil && ctx.Err() != nil:
				return context.Cause(ctx)
			}
			time.Sleep(10 * time.Millisecond) // not watching ctx: a leader that may be paused anywhere
		}
	}, lock.LeadOptions{
		ElectionOptions: lock.ElectionOptions{Lease: lease},
		Pause:           50 * time.Millisecond,
		OnElected:       func(t *lock.Term) { fmt.Printf("ELECTION elected term=%d\n", t.Token()) },
		OnStopped:       func(t *lock.Term, _ error) { fmt.Printf("ELECTION ended term=%d\n", t.Token()) },
	})
	if !errors.Is(err, context.Canceled) {
		return fail(fmt.Errorf("Lead returned %w", err))
	}
	return 0
}
