package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	"github.com/seed05627090/lock/check"
)

// DefaultFenceTable is the table of an [SQLFence] whose Table is empty.
const DefaultFenceTable = "lock_fences"

// SQLFence makes writes to an SQL database that a stale holder of a lock
// cannot make, inside the caller's transaction (database/sql; for pgx, see
// the postgres module's Fence, which shares the table). Its table keeps a
// row per name, the fence of one resource, with the greatest fencing token
// that has passed it (its mark). Advance, first thing in the transaction,
// moves the mark to the caller's token, or reports a token below it as
// stale; the fence row stays locked until the transaction ends:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := (lock.SQLFence{}).Advance(ctx, tx, "invoice:7", l.Token()); err != nil {
//		return err // errors.Is(err, lock.ErrStaleToken): a later holder has written
//	}
//	... the writes to invoice 7, in tx ...
//	return tx.Commit()
//
// It takes the token of any lock on any provider, as long as the writers
// of one resource take theirs from the same lock. PostgreSQL only (9.5 or
// later). What it guarantees under each isolation level, and its limits,
// are in docs/fencing.md.
type SQLFence struct {
	// Table is the table of fence rows: [DefaultFenceTable] when empty. It may
	// be qualified with its schema ("app.lock_fences"). It is used unquoted,
	// so it is made of ASCII letters, digits and underscores, and PostgreSQL
	// folds it to lower case.
	Table string
}

// CreateTable makes the fence table, "(name text PRIMARY KEY, token bigint
// NOT NULL)", unless it exists, in a transaction of its own that first takes
// a PostgreSQL advisory lock, so that processes starting together do not
// collide. The table can also be made by a migration of the application's:
// Advance needs only those two columns.
func (f SQLFence) CreateTable(ctx context.Context, db *sql.DB) (err error) {
	q, err := f.Statements()
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.Table, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, q.Advisory, q.Table); err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.Table, err)
	}
	if _, err = tx.ExecContext(ctx, q.Create); err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.Table, err)
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.Table, err)
	}
	return nil
}

// Advance sets the mark of the fence called name to token, in tx, when
// token is not below it; a name without a row gets one. When the mark is
// greater, it returns a *StaleTokenError (errors.Is [ErrStaleToken]) with the
// token and the mark: the caller must roll tx back, and not make its
// writes. An empty name, a name that is not valid UTF-8 or holds a NUL
// byte, a token of 0 or above math.MaxInt64, or a Table that is not a
// name, match [ErrInvalidArgument], and nothing is sent. Other errors are the
// database's (after which PostgreSQL has aborted tx).
func (f SQLFence) Advance(ctx context.Context, tx *sql.Tx, name string, token uint64) error {
	q, err := f.Statements()
	if err == nil {
		err = check.Fence(name, token)
	}
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, q.Advance, name, int64(token))
	if err != nil {
		return fmt.Errorf("lock: advance fence %q: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("lock: advance fence %q: %w", name, err)
	}
	if n == 1 {
		return nil
	}
	var mark int64
	if err := tx.QueryRowContext(ctx, q.Mark, name).Scan(&mark); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("lock: advance fence %q: stale token %d, and reading its mark: %w", name, token, err)
	}
	return &StaleTokenError{Fence: name, Token: token, Mark: uint64(mark)}
}

// fenceTableName is what [SQLFence.Table] may be: a name, or a schema and a
// name, unquoted.
var fenceTableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// SQLFenceStatements are the statements of the fences on one table, in
// PostgreSQL's dialect with $1-style parameters. [SQLFence] sends them through
// database/sql, and the postgres module's Fence through pgx: one definition,
// so that both keep sharing their tables. A fence on another driver sends
// them as [SQLFence.CreateTable] and [SQLFence.Advance] do.
type SQLFenceStatements struct {
	// Table is the fence table: [SQLFence.Table], or [DefaultFenceTable] when
	// that is empty.
	Table string
	// Advisory takes the transaction's advisory lock on creating the table
	// named by its parameter $1 (Table).
	Advisory string
	// Create makes Table, "(name text PRIMARY KEY, token bigint NOT NULL)",
	// unless it exists.
	Create string
	// Advance sets the mark of the fence $1 to the token $2 when the token
	// is not below it, and makes the row of a fence that has none: one row
	// affected then. A row whose mark is greater is left as it is, but
	// locked, as an update would: zero rows affected is a stale token.
	Advance string
	// Mark reads the mark of the fence $1.
	Mark string
}

// Statements returns the statements of f's table. A Table that is not a name
// (see [SQLFence.Table]) yields an error matching [ErrInvalidArgument], and the
// zero [SQLFenceStatements].
func (f SQLFence) Statements() (SQLFenceStatements, error) {
	table := f.Table
	if table == "" {
		table = DefaultFenceTable
	}
	if !fenceTableName.MatchString(table) || len(table) > 127 {
		return SQLFenceStatements{}, fmt.Errorf("%w: fence table %q: want a name of letters, digits and underscores, optionally after a schema and a dot", ErrInvalidArgument, table)
	}
	return SQLFenceStatements{
		Table:    table,
		Advisory: `SELECT pg_advisory_xact_lock(hashtext('lock fence table'), hashtext($1))`,
		Create:   `CREATE TABLE IF NOT EXISTS ` + table + ` (name text PRIMARY KEY, token bigint NOT NULL)`,
		Advance: `INSERT INTO ` + table + ` AS f (name, token) VALUES ($1, $2) ` +
			`ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token`,
		Mark: `SELECT token FROM ` + table + ` WHERE name = $1`,
	}, nil
}
