package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// Fence is lock.SQLFence for pgx: it makes writes to PostgreSQL that a
// stale holder of a lock cannot make, inside the caller's pgx.Tx. Its table
// keeps a row per name, the fence of one resource, with the greatest
// fencing token that has passed it (its mark); it is the same table, with
// the same statements, as lock.SQLFence's, so that writers on pgx and on
// database/sql can share fences.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		if err := (postgres.Fence{}).Advance(ctx, tx, "invoice:7", l.Token()); err != nil {
//			return err // errors.Is(err, lock.ErrStaleToken): a later holder has written
//		}
//		... the writes to invoice 7, in tx ...
//	})
//
// What holds is what lock.SQLFence says: the fence row stays locked until
// the transaction ends, so transactions that advance one fence run one
// after the other from there; one whose token is below a committed mark
// gets lock.ErrStaleToken, and must roll back; a token equal to the mark
// passes. Call Advance first in the transaction. The token of any lock
// works (Acquire, Do, Middleware, a Term of an election; on any provider)
// as long as the writers of one resource take theirs from the same lock.
//
// The zero value uses lock.DefaultFenceTable in the connection's search
// path. Tokens must be at most math.MaxInt64 (the column is a bigint): the
// tokens of this provider and of the library's others are.
type Fence struct {
	// Table is the table of fence rows: lock.DefaultFenceTable when empty.
	// It may be qualified with its schema ("app.lock_fences"). It is used
	// unquoted, so it is made of ASCII letters, digits and underscores, and
	// PostgreSQL folds it to lower case.
	Table string
}

// CreateTable makes the fence table, "(name text PRIMARY KEY, token bigint
// NOT NULL)", unless it exists, in a transaction of its own begun on db (a
// *pgxpool.Pool, a *pgx.Conn) that first takes an advisory lock, so that
// processes starting together do not collide. The table can also be made
// by a migration of the application's: Advance needs only those two
// columns.
func (f Fence) CreateTable(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) error {
	q, err := f.statements()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q.Advisory, q.Table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, q.Create)
		return err
	})
	if err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.Table, err)
	}
	return nil
}

// Advance sets the mark of the fence called name to token, in tx, when
// token is not below it; a name without a row gets one. When the mark is
// greater, it returns a *lock.StaleTokenError (errors.Is
// lock.ErrStaleToken) with the token and the mark: the caller must roll tx
// back, and not make its writes. An empty name, a name that is not valid
// UTF-8 or holds a NUL byte, a token of 0 or above math.MaxInt64, or a
// Table that is not a name, match lock.ErrInvalidArgument, and nothing is
// sent. Other errors are the database's (after which PostgreSQL has aborted
// tx).
func (f Fence) Advance(ctx context.Context, tx pgx.Tx, name string, token uint64) error {
	q, err := f.statements()
	if err == nil {
		err = check.Fence(name, token)
	}
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, q.Advance, name, int64(token))
	if err != nil {
		return fmt.Errorf("lock: advance fence %q: %w", name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var mark int64
	if err := tx.QueryRow(ctx, q.Mark, name).Scan(&mark); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lock: advance fence %q: stale token %d, and reading its mark: %w", name, token, err)
	}
	return &lock.StaleTokenError{Fence: name, Token: token, Mark: uint64(mark)}
}

// statements returns the statements of f's table: lock.SQLFence's, so that
// the two share their tables.
func (f Fence) statements() (lock.SQLFenceStatements, error) {
	return lock.SQLFence{Table: f.Table}.Statements()
}
