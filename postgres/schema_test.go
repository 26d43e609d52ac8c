package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// fn is the quoted name of the function name of schema.sql under prefix.
func fn(prefix, name string) string { return pgx.Identifier{prefix + name}.Sanitize() }

// refusedOutsideReadCommitted checks that the calls on a lock (enter) and
// on a counted name (claim_enter) of prefix's functions fail in a
// REPEATABLE READ transaction, whose snapshot would not see the calls that
// held the key's advisory lock before.
func refusedOutsideReadCommitted(t *testing.T, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	for _, call := range []string{
		"SELECT * FROM " + fn(prefix, "acquire") + "('k', 'o', 1000)",
		"SELECT * FROM " + fn(prefix, "claim_change") + "('k', 'o', 'release', 0, 0)",
	} {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, call)
			return err
		})
		require.Error(t, err, call)
		assert.Contains(t, err.Error(), "isolation level repeatable read, want read committed", call)
	}
}

// Every call of the provider's functions takes its key's advisory lock in
// READ COMMITTED only.
func TestFunctionsRefuseRepeatableRead(t *testing.T) {
	prefix := testPrefix(t)
	newProvider(t, prefix)
	refusedOutsideReadCommitted(t, newPool(t), prefix)
}

// A database whose functions an earlier version defined (no enter_class;
// an enter and a claim_enter of their own, in PL/pgSQL) is brought up to
// date by the next NewProvider, and its locks and claims stay.
func TestFunctionsRedefined(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	ctx := ctxTimeout(t, 30*time.Second)
	_, err := p.Acquire(ctx, "kept", "o", time.Minute)
	require.NoError(t, err)
	_, err = p.AcquireClaim(ctx, "kept", lock.Claim{Owner: "c", Weight: 1, Limit: 2, TTL: time.Minute})
	require.NoError(t, err)

	pool := newPool(t)
	for _, name := range []string{"enter", "claim_enter"} {
		_, err = pool.Exec(ctx, "CREATE OR REPLACE FUNCTION "+fn(prefix, name)+`(p_key text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
	RETURN clock_timestamp();
END $$`)
		require.NoError(t, err, name)
	}
	_, err = pool.Exec(ctx, "DROP FUNCTION "+fn(prefix, "enter_class"))
	require.NoError(t, err)

	p = newProvider(t, prefix)
	refusedOutsideReadCommitted(t, pool, prefix) // enter and claim_enter call enter_class again
	assert.Equal(t, "o", mustInspect(t, p, "kept").Owner)
	cs, err := p.InspectClaims(ctx, "kept")
	require.NoError(t, err)
	require.Len(t, cs.Holders, 1)
	assert.Equal(t, "c", cs.Holders[0].Owner)
	rec, err := p.AcquireClaim(ctx, "kept", lock.Claim{Owner: "d", Weight: 1, Limit: 2, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, "d", rec.Owner)
	_, err = p.Acquire(ctx, "other", "o", time.Minute)
	require.NoError(t, err)
}
