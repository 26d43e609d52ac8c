package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed schema.sql
var schemaSQL string

// queueTTL is how long a queue entry outlives its waiter's last look. A
// Client's waiter looks at least once a minute (the further back in the
// queue, the less often, up to a minute), so twice that keeps every waiter
// that still looks, and lets the entries of waiters that died age out.
const queueTTL = 2 * time.Minute

// objects are the names of the provider's tables, sequence and functions,
// quoted and qualified with their schema, as SQL uses them.
type objects struct {
	schema, prefix string
	class          int32 // the first key of the provider's advisory locks
	claimsClass    int32 // the first key of the counted names' advisory locks

	records, queue, tokens string
	claims, claimQueue     string
	// The index names are not qualified: an index lives in its table's schema.
	recordsExpiry, queueOrder, queueExpiry          string
	claimsExpiry, claimQueueOrder, claimQueueExpiry string
	// The functions, by their names in schema.sql.
	funcs map[string]string
}

// functions lists the functions of schema.sql, in an order that drops them.
var functions = []string{"acquire", "wait", "leave", "release", "update", "force_release", "free", "serve", "grant", "enter",
	"claim_acquire", "claim_change", "claim_view", "claim_grant", "claim_open", "claim_serve", "claim_limit", "claim_kind", "claim_enter",
	"enter_class"}

func newObjects(schema, prefix string) objects {
	qualified := func(name string) string { return pgx.Identifier{schema, prefix + name}.Sanitize() }
	o := objects{
		schema:           schema,
		prefix:           prefix,
		class:            int32(crc32.ChecksumIEEE([]byte(schema + "." + prefix))),
		claimsClass:      int32(crc32.ChecksumIEEE([]byte(schema + "." + prefix + " claims"))),
		records:          qualified("records"),
		queue:            qualified("queue"),
		tokens:           qualified("tokens"),
		claims:           qualified("claims"),
		claimQueue:       qualified("claim_queue"),
		recordsExpiry:    pgx.Identifier{prefix + "records_expiry"}.Sanitize(),
		queueOrder:       pgx.Identifier{prefix + "queue_order"}.Sanitize(),
		queueExpiry:      pgx.Identifier{prefix + "queue_expiry"}.Sanitize(),
		claimsExpiry:     pgx.Identifier{prefix + "claims_expiry"}.Sanitize(),
		claimQueueOrder:  pgx.Identifier{prefix + "claim_queue_order"}.Sanitize(),
		claimQueueExpiry: pgx.Identifier{prefix + "claim_queue_expiry"}.Sanitize(),
		funcs:            make(map[string]string),
	}
	for _, f := range functions {
		o.funcs[f] = qualified(f)
	}
	return o
}

// ddl returns schema.sql with its names filled in.
func (o objects) ddl() string {
	pairs := []string{
		"{{class}}", strconv.FormatInt(int64(o.class), 10),
		"{{claims_class}}", strconv.FormatInt(int64(o.claimsClass), 10),
		"{{queue_ttl}}", "interval '" + strconv.FormatInt(queueTTL.Milliseconds(), 10) + " milliseconds'",
	}
	// The tables and the sequence, each also as a string literal (for
	// to_regclass and nextval), then the indexes.
	for _, t := range [][2]string{{"records", o.records}, {"queue", o.queue}, {"tokens", o.tokens},
		{"claims", o.claims}, {"claim_queue", o.claimQueue}} {
		pairs = append(pairs, "{{"+t[0]+"}}", t[1], "{{"+t[0]+"_literal}}", literal(t[1]))
	}
	for _, i := range [][2]string{{"records_expiry", o.recordsExpiry}, {"queue_order", o.queueOrder},
		{"queue_expiry", o.queueExpiry}, {"claims_expiry", o.claimsExpiry},
		{"claim_queue_order", o.claimQueueOrder}, {"claim_queue_expiry", o.claimQueueExpiry}} {
		pairs = append(pairs, "{{"+i[0]+"}}", i[1])
	}
	for _, f := range functions {
		pairs = append(pairs, "{{"+f+"}}", o.funcs[f], "{{"+f+"_literal}}", literal(o.funcs[f]))
	}
	return strings.NewReplacer(pairs...).Replace(schemaSQL)
}

// literal quotes s as an SQL string literal.
func literal(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// dropDDL returns the statements that remove every object of ddl.
func (o objects) dropDDL() string {
	var b strings.Builder
	for _, f := range functions {
		fmt.Fprintf(&b, "DROP FUNCTION IF EXISTS %s;\n", o.funcs[f])
	}
	fmt.Fprintf(&b, "DROP TABLE IF EXISTS %s, %s, %s, %s;\nDROP SEQUENCE IF EXISTS %s;\n",
		o.records, o.queue, o.claims, o.claimQueue, o.tokens)
	return b.String()
}

// inSetupLock runs sql in one transaction that holds the advisory lock of
// the schema's set-up, so that processes that start together create (or
// drop) the objects one after the other.
func (p *Provider) inSetupLock(ctx context.Context, sql string) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
			"lock provider set-up "+p.obj.schema+"."+p.obj.prefix); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sql)
		return err
	})
}
