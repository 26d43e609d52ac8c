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
	_, err = p.AcquireClaim(ctx, "kept-claims", lock.Claim{Owner: "c", Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Minute})
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
	cs, err := p.InspectClaims(ctx, "kept-claims")
	require.NoError(t, err)
	require.Len(t, cs.Holders, 1)
	assert.Equal(t, "c", cs.Holders[0].Owner)
	rec, err := p.AcquireClaim(ctx, "kept-claims", lock.Claim{Owner: "d", Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, "d", rec.Owner)
	_, err = p.Acquire(ctx, "other", "o", time.Minute)
	require.NoError(t, err)
}

// A database of a version before kinds (issue 38: no kind column in the
// claims' tables, an acquire and a wait that return no o_kind) is brought
// up to date by the next NewProvider: the columns are added, the two
// functions defined anew, and the rows kept. A name stored then has no
// kind: it takes a claim of either kind, which stores its kind from then
// on, and a lock's calls do not see it until then, as before.
func TestKindsAdded(t *testing.T) {
	prefix := testPrefix(t)
	newProvider(t, prefix) // the objects of this version, then made older below
	ctx := ctxTimeout(t, 30*time.Second)
	pool := newPool(t)
	claims, queue := pgx.Identifier{prefix + "claims"}.Sanitize(), pgx.Identifier{prefix + "claim_queue"}.Sanitize()
	for _, stmt := range []string{
		"ALTER TABLE " + claims + " DROP COLUMN kind",
		"ALTER TABLE " + queue + " DROP COLUMN kind",
		"DROP FUNCTION " + fn(prefix, "acquire"),
		"DROP FUNCTION " + fn(prefix, "wait"),
		// The shapes of an earlier version's acquire and wait.
		"CREATE FUNCTION " + fn(prefix, "acquire") + `(p_key text, p_owner text, p_ttl bigint,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz)
LANGUAGE sql AS $$ SELECT 'old', 1::bigint, false, now(), now(), now() $$`,
		"CREATE FUNCTION " + fn(prefix, "wait") + `(p_key text, p_owner text, p_ttl bigint,
	p_channel text, p_fair boolean, p_again boolean,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz,
	OUT o_queued boolean, OUT o_place bigint)
LANGUAGE sql AS $$ SELECT 'old', 1::bigint, false, now(), now(), now(), false, 0::bigint $$`,
		"INSERT INTO " + claims + " (key, owner, weight, lim, token, since, expires_at) VALUES " +
			"('legacy', 'c', 1, 2, nextval('" + pgx.Identifier{prefix + "tokens"}.Sanitize() + "'), now(), now() + interval '1 minute')",
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}

	p := newProvider(t, prefix)
	rec, err := p.Acquire(ctx, "other", "o", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "o", rec.Owner, "acquire defined anew")
	rec, err = p.Queue(ctx, "other", lock.Wait{Owner: "w", TTL: time.Minute, Inbox: "i"})
	require.NoError(t, err)
	assert.True(t, rec.Queued, "wait defined anew")
	cs, err := p.InspectClaims(ctx, "legacy")
	require.NoError(t, err)
	require.Len(t, cs.Holders, 1, "the rows are kept")
	assert.Empty(t, cs.Kind, "stored without a kind")
	rec, err = p.Acquire(ctx, "legacy", "o", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "o", rec.Owner, "a lock's call does not see a name without a kind")
	require.NoError(t, p.Release(ctx, "legacy", "o"))
	rec, err = p.AcquireClaim(ctx, "legacy", lock.Claim{Owner: "d", Weight: 1, Limit: 2, Kind: lock.KindRWMutex, TTL: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, "d", rec.Owner, "a name without a kind takes either")
	assert.Equal(t, lock.KindRWMutex, rec.Kind)
	rec, err = p.Acquire(ctx, "legacy", "o", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lock.Record{Kind: lock.KindRWMutex}, rec, "its kind is stored now")
}
