package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/postgres"
)

// The fenced writes of postgres.Fence (pgx) and lock.SQLFence (database/sql,
// in the root module, which has no driver to test it with), on one table.

// fenceTx is a transaction of either API: Advance, then the writes.
type fenceTx interface {
	advance(name string, token uint64) error
	exec(query string, args ...any) error
	commit() error
	rollback()
}

// fenceAPI begins transactions of one API on a connection pool of its own
// (another process, as far as the server can tell).
type fenceAPI struct {
	name  string
	begin func(ctx context.Context, t testing.TB, table string) fenceTx
}

func fenceAPIs(t *testing.T) []fenceAPI {
	pool := newPool(t)
	db := sqlDB(t)
	return []fenceAPI{
		{"pgx", func(ctx context.Context, t testing.TB, table string) fenceTx {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			return &pgxFenceTx{ctx, tx, postgres.Fence{Table: table}}
		}},
		{"database/sql", func(ctx context.Context, t testing.TB, table string) fenceTx {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			return &sqlFenceTx{ctx, tx, lock.SQLFence{Table: table}}
		}},
	}
}

type pgxFenceTx struct {
	ctx   context.Context
	tx    pgx.Tx
	fence postgres.Fence
}

func (x *pgxFenceTx) advance(name string, token uint64) error {
	return x.fence.Advance(x.ctx, x.tx, name, token)
}

func (x *pgxFenceTx) exec(query string, args ...any) error {
	_, err := x.tx.Exec(x.ctx, query, args...)
	return err
}
func (x *pgxFenceTx) commit() error { return x.tx.Commit(x.ctx) }
func (x *pgxFenceTx) rollback()     { _ = x.tx.Rollback(x.ctx) }

type sqlFenceTx struct {
	ctx   context.Context
	tx    *sql.Tx
	fence lock.SQLFence
}

func (x *sqlFenceTx) advance(name string, token uint64) error {
	return x.fence.Advance(x.ctx, x.tx, name, token)
}

func (x *sqlFenceTx) exec(query string, args ...any) error {
	_, err := x.tx.ExecContext(x.ctx, query, args...)
	return err
}
func (x *sqlFenceTx) commit() error { return x.tx.Commit() }
func (x *sqlFenceTx) rollback()     { _ = x.tx.Rollback() }

// sqlDB returns a database/sql handle on the pgx driver, closed at the end
// of the test.
func sqlDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// fenceTables makes, for the test, a fence table (with lock.SQLFence's
// CreateTable) and a resource table (data: id, value, and the token that
// wrote it; log: the writes in the order they ran), dropped at its end.
func fenceTables(t *testing.T) (fences, data, log string) {
	t.Helper()
	needServer(t)
	p := "lock_tf" + randomHex(4) + "_"
	fences, data, log = p+"fences", p+"data", p+"log"
	ctx := ctxTimeout(t, 30*time.Second)
	pool := newPool(t)
	require.NoError(t, lock.SQLFence{Table: fences}.CreateTable(ctx, sqlDB(t)))
	_, err := pool.Exec(ctx, `CREATE TABLE `+data+` (id int PRIMARY KEY, value text NOT NULL, token bigint NOT NULL);
		INSERT INTO `+data+` VALUES (1, '', 0);
		CREATE TABLE `+log+` (seq bigserial PRIMARY KEY, token bigint NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, dsn(t))
		if err == nil {
			_, err = pool.Exec(ctx, `DROP TABLE IF EXISTS `+fences+`, `+data+`, `+log)
			pool.Close()
		}
		if err != nil {
			t.Errorf("dropping %s*: %v", p, err)
		}
	})
	return fences, data, log
}

// fencedWrite runs, in tx, Advance of the fence "invoice:1" and, when it
// passed, the write of value to the data row and to the log.
func fencedWrite(tx fenceTx, data, log string, token uint64, value string) error {
	if err := tx.advance("invoice:1", token); err != nil {
		return err
	}
	if err := tx.exec(`UPDATE `+data+` SET value = $1, token = $2 WHERE id = 1`, value, int64(token)); err != nil {
		return err
	}
	return tx.exec(`INSERT INTO `+log+` (token) VALUES ($1)`, int64(token))
}

// writeTx runs fencedWrite in a transaction of its own, and commits it when
// it passed.
func writeTx(ctx context.Context, t testing.TB, api fenceAPI, fences, data, log string, token uint64, value string) error {
	tx := api.begin(ctx, t, fences)
	defer tx.rollback()
	if err := fencedWrite(tx, data, log, token, value); err != nil {
		return err
	}
	return tx.commit()
}

func readData(ctx context.Context, t testing.TB, pool *pgxpool.Pool, data string) (string, uint64) {
	t.Helper()
	var v string
	var tok int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT value, token FROM `+data+` WHERE id = 1`).Scan(&v, &tok))
	return v, uint64(tok)
}

// TestFenceRejectsStaleHolder: with the tokens of this provider's locks, a
// holder whose lock was taken from it (ForceRelease, as a lease that ran
// out during a pause would) cannot write once the next holder has: its
// Advance returns a StaleTokenError, and the row keeps the next holder's
// data. The next holder writes again with the same token; a third holder's
// greater token moves the mark. Each API, and each against the other's
// mark.
func TestFenceRejectsStaleHolder(t *testing.T) {
	prefix := testPrefix(t)
	apis := fenceAPIs(t)
	for i, api := range apis {
		other := apis[1-i]
		t.Run(api.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			fences, data, log := fenceTables(t)
			pool := newPool(t)
			name := uniqueName(t)
			a := newClient(t, newProvider(t, prefix))
			b := newClient(t, newProvider(t, prefix))

			la, lb := testenv.Superseded(t, ctx, a, b, name)
			require.Greater(t, lb.Token(), la.Token())

			require.NoError(t, writeTx(ctx, t, other, fences, data, log, lb.Token(), "B"), "B's write (%s)", other.name)
			err := writeTx(ctx, t, api, fences, data, log, la.Token(), "A")
			require.ErrorIs(t, err, lock.ErrStaleToken, "A's write after B's")
			var stale *lock.StaleTokenError
			require.ErrorAs(t, err, &stale)
			assert.Equal(t, lock.StaleTokenError{Fence: "invoice:1", Token: la.Token(), Mark: lb.Token()}, *stale)
			v, tok := readData(ctx, t, pool, data)
			assert.Equal(t, "B", v, "the data after A's stale write")
			assert.Equal(t, lb.Token(), tok)

			require.NoError(t, writeTx(ctx, t, api, fences, data, log, lb.Token(), "B again"), "B again, with the mark's token")
			v, _ = readData(ctx, t, pool, data)
			assert.Equal(t, "B again", v)

			require.NoError(t, lb.Release(ctx))
			lc, err := a.Acquire(ctx, name, lock.Options{})
			require.NoError(t, err)
			require.NoError(t, writeTx(ctx, t, api, fences, data, log, lc.Token(), "C"))
			assert.ErrorIs(t, writeTx(ctx, t, api, fences, data, log, lb.Token(), "B late"), lock.ErrStaleToken)
			var mark int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM `+fences+` WHERE name = 'invoice:1'`).Scan(&mark))
			assert.Equal(t, lc.Token(), uint64(mark), "the mark")
			require.NoError(t, lc.Release(ctx))
			assert.ErrorIs(t, la.Release(ctx), lock.ErrLost, "A's release")
		})
	}
}

// TestFenceWaitsForTheOpenTransaction: a transaction that advanced the
// fence holds its row until it ends. A lower token that comes meanwhile
// waits, and is refused once the higher one commits (without the row lock
// it would pass, and overwrite the data after the commit); a higher token
// that comes while a lower one is open waits and passes after; a
// rollback gives the mark back. Across the two APIs.
func TestFenceWaitsForTheOpenTransaction(t *testing.T) {
	apis := fenceAPIs(t)
	for i, api := range apis {
		other := apis[1-i]
		t.Run(api.name+" first", func(t *testing.T) {
			ctx := ctxTimeout(t, 30*time.Second)
			fences, data, log := fenceTables(t)
			pool := newPool(t)

			// A mark of 5; token 9 first, open; 7 comes: refused at 9's
			// commit (a check of the mark the statement saw, 5, would pass).
			require.NoError(t, writeTx(ctx, t, api, fences, data, log, 5, "five"))
			first := api.begin(ctx, t, fences)
			defer first.rollback()
			require.NoError(t, fencedWrite(first, data, log, 9, "nine"))
			done := make(chan error, 1)
			go func() { done <- writeTx(ctx, t, other, fences, data, log, 7, "seven") }()
			select {
			case err := <-done:
				t.Fatalf("token 7 ended (%v) while token 9's transaction was open", err)
			case <-time.After(200 * time.Millisecond):
			}
			require.NoError(t, first.commit())
			assert.ErrorIs(t, <-done, lock.ErrStaleToken, "token 7 after token 9 committed")
			v, tok := readData(ctx, t, pool, data)
			assert.Equal(t, "nine", v)
			assert.EqualValues(t, 9, tok)

			// Token 10 first, open; 11 comes: it passes once 10 commits.
			first = api.begin(ctx, t, fences)
			defer first.rollback()
			require.NoError(t, fencedWrite(first, data, log, 10, "ten"))
			go func() { done <- writeTx(ctx, t, other, fences, data, log, 11, "eleven") }()
			time.Sleep(100 * time.Millisecond)
			require.NoError(t, first.commit())
			require.NoError(t, <-done, "token 11 after token 10 committed")
			v, _ = readData(ctx, t, pool, data)
			assert.Equal(t, "eleven", v)

			// Token 20 first, rolled back: 12 then passes.
			first = api.begin(ctx, t, fences)
			require.NoError(t, fencedWrite(first, data, log, 20, "twenty"))
			go func() { done <- writeTx(ctx, t, other, fences, data, log, 12, "twelve") }()
			time.Sleep(100 * time.Millisecond)
			first.rollback()
			require.NoError(t, <-done, "token 12 after token 20 rolled back")
			v, _ = readData(ctx, t, pool, data)
			assert.Equal(t, "twelve", v)
		})
	}
}

// TestFenceConcurrentTokens has goroutines on both APIs write with tokens
// that increase in shuffled blocks, so that lower and higher tokens race
// all along the run: the writes that committed did so in an order of
// non-decreasing tokens (no lower token overwrote a higher one), the
// greatest token wrote last, and every refused token was below the mark
// that refused it.
func TestFenceConcurrentTokens(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	fences, data, log := fenceTables(t)
	apis := fenceAPIs(t)
	pool := newPool(t)
	const goroutines, writes = 6, 240 // a multiple of 16
	refused := testenv.RaceTokens(t, goroutines, writes, 1, func(g int, tok uint64) error {
		api := apis[g%len(apis)]
		if err := writeTx(ctx, t, api, fences, data, log, tok, api.name); err != nil {
			return fmt.Errorf("%s: %w", api.name, err)
		}
		return nil
	})

	rows, err := pool.Query(ctx, `SELECT token FROM `+log+` ORDER BY seq`)
	require.NoError(t, err)
	ran, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.NotEmpty(t, ran)
	assert.Equal(t, writes, len(ran)+refused, "writes committed plus writes refused")
	for i := 1; i < len(ran); i++ {
		if ran[i] < ran[i-1] {
			t.Fatalf("write %d of %d committed with token %d after token %d", i, len(ran), ran[i], ran[i-1])
		}
	}
	assert.EqualValues(t, writes, ran[len(ran)-1], "the last write: the greatest token")
	_, tok := readData(ctx, t, pool, data)
	assert.EqualValues(t, writes, tok, "the data's token")
	t.Logf("%d writes committed, %d refused", len(ran), refused)
}

// TestFenceRepeatableRead: under REPEATABLE READ, a transaction whose
// snapshot predates another's advance never passes: a token below the
// other's is refused (stale, or a serialization failure), one above it
// gets the serialization failure, as SQLFence's doc says.
func TestFenceRepeatableRead(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	fences, data, log := fenceTables(t)
	pool := newPool(t)
	api := fenceAPIs(t)[0]
	require.NoError(t, writeTx(ctx, t, api, fences, data, log, 5, "five"))
	for _, c := range []struct{ other, token uint64 }{{8, 7}, {9, 20}} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+fences) // takes the snapshot
		require.NoError(t, err)
		require.NoError(t, writeTx(ctx, t, api, fences, data, log, c.other, "other"))
		err = postgres.Fence{Table: fences}.Advance(ctx, tx, "invoice:1", c.token)
		var pgErr *pgconn.PgError
		serialization := errors.As(err, &pgErr) && pgErr.Code == "40001"
		if c.token < c.other {
			assert.True(t, errors.Is(err, lock.ErrStaleToken) || serialization,
				"token %d after %d committed: %v, want ErrStaleToken or a serialization failure", c.token, c.other, err)
		} else {
			assert.True(t, serialization, "token %d after %d committed: %v, want a serialization failure", c.token, c.other, err)
		}
		_ = tx.Rollback(ctx)
	}
}

// TestFenceArguments: what both APIs refuse before sending anything, a
// missing table (the database's error, not a stale token), CreateTable
// twice and from several processes at once, and a table in a schema.
func TestFenceArguments(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	needServer(t)
	pool := newPool(t)
	db := sqlDB(t)

	for _, c := range []struct {
		table, name string
		token       uint64
	}{
		{"", "", 7},
		{"", "a\x00b", 7},
		{"", "invoice:7", 0},
		{"", "invoice:7", 1 << 63},
		{"bad name", "invoice:7", 7},
		{"x.y.z", "invoice:7", 7},
	} {
		err := postgres.Fence{Table: c.table}.Advance(ctx, nil, c.name, c.token)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "table %q, name %q, token %d", c.table, c.name, c.token)
	}

	missing := "lock_tf" + randomHex(4) + "_missing"
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	err = postgres.Fence{Table: missing}.Advance(ctx, tx, "invoice:7", 7)
	require.Error(t, err, "a table that does not exist")
	assert.NotErrorIs(t, err, lock.ErrStaleToken)
	_ = tx.Rollback(ctx)

	schema := "lock_tf" + randomHex(4)
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	table := schema + ".Fences" // folded to lower case, as unquoted names are
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = postgres.Fence{Table: table}.CreateTable(ctx, pool)
			} else {
				errs[i] = lock.SQLFence{Table: table}.CreateTable(ctx, db)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "CreateTable %d of %d at once", i+1, len(errs))
	}
	require.NoError(t, postgres.Fence{Table: table}.CreateTable(ctx, pool), "CreateTable again")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return postgres.Fence{Table: table}.Advance(ctx, tx, "invoice:7", 7)
	}))
	var mark int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM `+schema+`.fences WHERE name = 'invoice:7'`).Scan(&mark))
	assert.EqualValues(t, 7, mark)
}
