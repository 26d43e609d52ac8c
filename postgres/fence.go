package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/seed05627090/lock"
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
	q, err := fenceQueries(f.Table)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q.advisory, q.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, q.create)
		return err
	})
	if err != nil {
		return fmt.Errorf("lock: create fence table %s: %w", q.table, err)
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
	q, err := fenceQueries(f.Table)
	if err == nil {
		err = checkFenceRow(name, token)
	}
	if err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, q.advance, name, int64(token))
	if err != nil {
		return fmt.Errorf("lock: advance fence %q: %w", name, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var mark int64
	if err := tx.QueryRow(ctx, q.mark, name).Scan(&mark); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lock: advance fence %q: stale token %d, and reading its mark: %w", name, token, err)
	}
	return &lock.StaleTokenError{Fence: name, Token: token, Mark: uint64(mark)}
}

// The statements below are lock.SQLFence's (fence_sql.go in the root
// module), word for word: the two share their tables.

var fenceTableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

type fenceStatements struct {
	table, advisory, create, advance, mark string
}

func fenceQueries(table string) (fenceStatements, error) {
	if table == "" {
		table = lock.DefaultFenceTable
	}
	if !fenceTableName.MatchString(table) || len(table) > 127 {
		return fenceStatements{}, fmt.Errorf("%w: fence table %q: want a name of letters, digits and underscores, optionally after a schema and a dot", lock.ErrInvalidArgument, table)
	}
	return fenceStatements{
		table:    table,
		advisory: `SELECT pg_advisory_xact_lock(hashtext('lock fence table'), hashtext($1))`,
		create:   `CREATE TABLE IF NOT EXISTS ` + table + ` (name text PRIMARY KEY, token bigint NOT NULL)`,
		// ON CONFLICT ... WHERE leaves a row whose mark is greater alone, but
		// locked, as an update would: zero rows affected is a stale token.
		advance: `INSERT INTO ` + table + ` AS f (name, token) VALUES ($1, $2) ` +
			`ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token`,
		mark: `SELECT token FROM ` + table + ` WHERE name = $1`,
	}, nil
}

func checkFenceRow(name string, token uint64) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty fence name", lock.ErrInvalidArgument)
	case !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: fence name %q is not valid UTF-8 without NUL bytes", lock.ErrInvalidArgument, name)
	case token == 0:
		return fmt.Errorf("%w: fencing token 0 (no grant has it)", lock.ErrInvalidArgument)
	case token > math.MaxInt64:
		return fmt.Errorf("%w: fencing token %d is above the bigint column's maximum", lock.ErrInvalidArgument, token)
	}
	return nil
}
