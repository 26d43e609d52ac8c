// Package postgres is a lock.Provider that keeps the locks of
// github.com/seed05627090/lock in PostgreSQL (11 or later), for services
// whose replicas share a database rather than a Redis:
//
//	pool, _ := pgxpool.New(ctx, "postgres://...")
//	p, err := postgres.NewProvider(ctx, pool)
//	c, err := lock.NewClient(p)
//	err = c.Do(ctx, "nightly-report", lock.Options{}, sendReport)
//
// # Schema
//
// NewProvider creates, if they do not exist, in the schema that is current
// on the pool's connections (see WithTablePrefix for the names):
//
//	lock_records      key text (primary key), owner text, token bigint,
//	                  ended boolean, since timestamptz, expires_at timestamptz
//	lock_queue        position bigserial (primary key: arrival order), key text,
//	                  owner text, ttl_ms bigint, channel text, expires_at timestamptz
//	lock_tokens       a sequence: the fencing tokens
//	lock_claims       key text, owner text (primary key: key, owner), weight int,
//	                  lim int, kind text, token bigint, since timestamptz,
//	                  expires_at timestamptz
//	lock_claim_queue  position bigserial (primary key: arrival order), key text,
//	                  owner text, weight int, lim int, kind text, ttl_ms bigint,
//	                  inbox text, channel text, expires_at timestamptz
//
// and PL/pgSQL functions (lock_acquire, lock_wait, lock_release, ...; the
// text is schema.sql in this package). Each method of the provider is one
// call of one of them: one statement, one round trip, one transaction,
// which first takes an advisory lock made from the key
// (pg_advisory_xact_lock(class, hashtext(key)), class a number made from the
// schema and prefix), so that every method is atomic per key across
// processes. Every process that shares a prefix must run the same version
// of this package. The tables of a database made by an earlier version are
// kept, and the missing ones added.
//
// # Counted names
//
// The claims of counted names (Semaphore, RWMutex) live in lock_claims,
// one row per claim, and their waiters in lock_claim_queue; the limit and
// the kind are in every row (all rows of a name have the same). A name
// holds no row once it holds no claim and no waiter. A key is one kind at a
// time (lock.Kind): a lock's acquire and wait do not take a free key whose
// name holds a live claim or waiter, and the call that makes a name takes
// the key's lock too, after the name's, and does not make it while the
// key's record lives. Each claim method is one call of one
// function (claim_acquire or claim_change), one transaction that takes the
// name's advisory lock (of a class of its own, so that the calls on a lock
// and on a counted name of one key do not wait for each other), deletes the name's
// expired claims, serves its queue, and then does its work; InspectClaims
// and the counted part of List are plain reads. Serving the queue grants
// the first waiters while they fit, up to 64 a call, each told with NOTIFY
// as a lock's waiter is (a Notice with Weight). Claim tokens come from
// lock_tokens, as the locks' do. A grant of a claim opens up to two other
// names with expired claims (deletes them and serves those names' queues),
// so that names never used again do not pile up; a waiter's entry lasts its
// Claim's QueueTTL after its last look, and an entry past that is passed
// over (deleted) by the next call that serves the queue.
//
// # Guarantees and limits
//
// Expiry is by the server's clock: a record whose expires_at has passed
// (clock_timestamp() on the server) counts as absent, and is overwritten or
// deleted by a later call; a grant deletes a couple of expired records of
// other keys as it goes, so that keys that are never used again do not pile
// up. Record.Since is the server's clock at the grant, and Record.TTL the
// time the record has left by the server's clock, in milliseconds. Fencing
// tokens come from one sequence, so they strictly increase across all keys.
//
// A lock handed to a waiter from the queue is announced with NOTIFY on the
// channel of the waiter's inbox, in the transaction that stores the
// waiter's record: it is delivered when that transaction commits, never
// for a hand-over that did not happen. Listen holds a connection of its own
// per inbox (taken from the pool and kept out of it), with
// application_name "lock-listen" (see WithListenApplicationName). An inbox
// longer than 63 bytes, the limit of a channel name, is listened to on a
// channel named after its SHA-256 sum.
//
// PostgreSQL cannot tell whether anyone listens on a channel, so a lock is
// handed to the first waiter in the queue even when that waiter's process
// died: the lock then idles until the record's TTL (the waiter's lease)
// runs out, and the next waiter's look serves the queue. A queue entry ages
// out two minutes after its waiter's last look.
//
// When the Listen connection breaks, the provider reconnects (waiting up
// to 5s between attempts), listens again, and delivers a Notice without Key:
// grants notified meanwhile were lost, and the Client's waiters look again
// at once.
//
// Keys, owners and inboxes must be valid UTF-8 without NUL bytes (text
// that PostgreSQL can store); others are refused with
// lock.ErrInvalidArgument. Calls need READ COMMITTED (the default) as the
// connections' isolation level.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

var _ lock.Provider = (*Provider)(nil)

// DefaultTablePrefix starts the name of every table, sequence and function
// of the provider when no WithTablePrefix is given.
const DefaultTablePrefix = "lock_"

// DefaultListenApplicationName is the application_name of the connections
// that Listen holds, when no WithListenApplicationName is given.
const DefaultListenApplicationName = "lock-listen"

// Provider is a lock.Provider backed by PostgreSQL through a pgx pool. Make
// one with NewProvider; it is safe for concurrent use. The pool stays the
// caller's to close, after every Listen has stopped.
type Provider struct {
	pool     *pgxpool.Pool
	obj      objects
	appName  string
	sql      queries
	claimSQL claimQueries
}

// queries are the statements of the methods, with their names filled in.
type queries struct {
	acquire, wait, leave, release, update, force, inspect, list string
}

// Option configures a Provider.
type Option func(*config)

type config struct {
	prefix  string
	appName string
}

// WithTablePrefix sets the text that starts the name of every table,
// sequence and function the provider makes (DefaultTablePrefix when not
// given): 1 to 40 lowercase ASCII letters, digits and underscores, starting
// with a letter or an underscore. Providers with different prefixes keep
// separate locks.
func WithTablePrefix(prefix string) Option {
	return func(c *config) { c.prefix = prefix }
}

// WithListenApplicationName sets the application_name of the connections
// that Listen holds (DefaultListenApplicationName when not given or empty),
// so that they can be told apart in pg_stat_activity.
func WithListenApplicationName(name string) Option {
	return func(c *config) {
		if name != "" {
			c.appName = name
		}
	}
}

var prefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// NewProvider returns a provider that keeps its locks in pool's database.
// It creates the provider's tables, sequence and functions in the current
// schema when they do not exist, and (re)defines the functions. It fails
// with lock.ErrInvalidArgument for a nil pool or a bad prefix, and with the
// server's error when the objects cannot be made; nothing is left half made
// then (one transaction).
func NewProvider(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Provider, error) {
	if pool == nil {
		return nil, check.Invalidf("nil pool")
	}
	cfg := config{prefix: DefaultTablePrefix, appName: DefaultListenApplicationName}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if !prefixPattern.MatchString(cfg.prefix) {
		return nil, check.Invalidf("table prefix %q: want 1 to 40 of a-z, 0-9 and _, not starting with a digit", cfg.prefix)
	}
	var schema *string
	var isolation string
	err := pool.QueryRow(ctx, "SELECT current_schema(), current_setting('transaction_isolation')").Scan(&schema, &isolation)
	switch {
	case err != nil:
		return nil, fmt.Errorf("lock: postgres set-up: %w", err)
	case schema == nil:
		return nil, errors.New("lock: postgres set-up: no current schema (search_path names none that exists)")
	case isolation != "read committed":
		return nil, fmt.Errorf("lock: postgres set-up: the pool's isolation level is %s; the provider needs read committed", isolation)
	}
	p := &Provider{pool: pool, obj: newObjects(*schema, cfg.prefix), appName: cfg.appName}
	p.sql = p.obj.queries()
	p.claimSQL = p.obj.claimQueries()
	if err := p.inSetupLock(ctx, p.obj.ddl()); err != nil {
		return nil, fmt.Errorf("lock: postgres set-up of %s.%s*: %w", *schema, cfg.prefix, err)
	}
	return p, nil
}

// Drop removes the provider's tables, sequence and functions, with every
// lock and queue they hold: for tests and examples that made their own
// prefix. Calls on the provider fail afterwards.
func (p *Provider) Drop(ctx context.Context) error {
	if err := p.inSetupLock(ctx, p.obj.dropDDL()); err != nil {
		return fmt.Errorf("lock: postgres drop %s.%s*: %w", p.obj.schema, p.obj.prefix, err)
	}
	return nil
}

func (o objects) queries() queries {
	f := o.funcs
	// The queue entries of a record, by the time of the same statement.
	waiters := `(SELECT count(*) FROM ` + o.queue + ` q WHERE q.key = k.key AND q.expires_at > c.t)`
	return queries{
		acquire: `SELECT * FROM ` + f["acquire"] + `($1, $2, $3)`,
		wait:    `SELECT * FROM ` + f["wait"] + `($1, $2, $3, $4, $5, $6)`,
		leave:   `SELECT ` + f["leave"] + `($1, $2)`,
		release: `SELECT * FROM ` + f["release"] + `($1, $2)`,
		update:  `SELECT * FROM ` + f["update"] + `($1, $2, $3, $4)`,
		force:   `SELECT * FROM ` + f["force_release"] + `($1)`,
		inspect: `WITH c AS (SELECT clock_timestamp() AS t), k AS (SELECT $1::text COLLATE "C" AS key)
SELECT coalesce(r.owner, ''), coalesce(r.token, 0), coalesce(r.ended, false),
	coalesce(r.expires_at, c.t), coalesce(r.since, c.t), c.t, ` + waiters + `
FROM c CROSS JOIN k LEFT JOIN ` + o.records + ` r ON r.key = k.key AND r.expires_at > c.t`,
		// A page of the live records whose keys start with $1, after $2, and
		// before $3 when it is not NULL (the keys past every key with the
		// prefix, in byte order: see upperBound).
		list: `WITH c AS (SELECT clock_timestamp() AS t)
SELECT k.key, k.owner, k.token, k.ended, k.expires_at, k.since, c.t, ` + waiters + `
FROM c CROSS JOIN ` + o.records + ` k
WHERE k.key > $2 AND ($3::text IS NULL OR k.key < $3) AND starts_with(k.key, $1) AND k.expires_at > c.t
ORDER BY k.key LIMIT $4`,
	}
}

// Acquire implements lock.Provider.
func (p *Provider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if err := checkArgs(key, owner, ttl); err != nil {
		return lock.Record{}, err
	}
	var r row
	var kind string
	err := p.pool.QueryRow(ctx, p.sql.acquire, key, owner, ttl.Milliseconds()).Scan(append(r.fields(), &kind)...)
	if err != nil {
		return lock.Record{}, fail(err)
	}
	if kind != "" {
		return lock.Record{Kind: lock.Kind(kind)}, nil // in use as a counted name
	}
	return r.record(), nil
}

// Queue implements lock.Provider. It always reads the record, and serves
// a LookJoin as a LookFair.
func (p *Provider) Queue(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
	if err := checkWait(key, w); err != nil {
		return lock.Record{}, err
	}
	var r row
	var queued bool
	var place int64
	var kind string
	err := p.pool.QueryRow(ctx, p.sql.wait, key, w.Owner, w.TTL.Milliseconds(), channel(w.Inbox), w.Look == lock.LookFair || w.Look == lock.LookJoin, w.Look == lock.LookAgain).
		Scan(append(r.fields(), &queued, &place, &kind)...)
	if err != nil {
		return lock.Record{}, fail(err)
	}
	if kind != "" {
		return lock.Record{Kind: lock.Kind(kind)}, nil // in use as a counted name
	}
	rec := r.record()
	if queued {
		rec.Queued, rec.Position = true, int(place)
	}
	return rec, nil
}

// Leave implements lock.Provider.
func (p *Provider) Leave(ctx context.Context, key string, w lock.Wait) error {
	if err := checkWait(key, w); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, p.sql.leave, key, w.Owner); err != nil {
		return fail(err)
	}
	return nil
}

// Release implements lock.Provider.
func (p *Provider) Release(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	var code int32
	if err := p.pool.QueryRow(ctx, p.sql.release, key, owner).Scan(&code); err != nil {
		return fail(err)
	}
	if code == 0 {
		return &lock.LostError{Key: key}
	}
	return nil
}

// Renew implements lock.Provider.
func (p *Provider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	return p.update(ctx, key, owner, ttl, false)
}

// Finish implements lock.Provider.
func (p *Provider) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	return p.update(ctx, key, owner, ttl, true)
}

// update runs the update function of schema.sql, which renews the record or,
// with ended, finishes it.
func (p *Provider) update(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	var code int32
	var token int64
	err := p.pool.QueryRow(ctx, p.sql.update, key, owner, ttl.Milliseconds(), ended).Scan(&code, &token)
	if err != nil {
		return fail(err)
	}
	if code == 0 {
		return &lock.LostError{Key: key, Token: uint64(token)}
	}
	return nil
}

// Inspect implements lock.Provider. It reads the record and counts the
// queue in one statement, without taking the key's lock. A free key
// inspects as the zero Record, even when waiters are still queued (after
// its record expired), as with the other providers.
func (p *Provider) Inspect(ctx context.Context, key string) (lock.Record, error) {
	if err := checkKey(key); err != nil {
		return lock.Record{}, err
	}
	var r row
	var waiters int64
	if err := p.pool.QueryRow(ctx, p.sql.inspect, key).Scan(append(r.fields(), &waiters)...); err != nil {
		return lock.Record{}, fail(err)
	}
	rec := r.record()
	if rec.Owner != "" {
		rec.Waiters = int(waiters)
	}
	return rec, nil
}

// listPage is how many records List reads in one query. No connection is
// held while fn runs, so fn may call the provider.
const listPage = 100

// List implements lock.Provider. It reads the records in key order, a page
// at a time, then the counted names with claims or waiters, in key order
// too; a record or a claim taken or freed meanwhile may be seen or not.
// The prefix is matched byte for byte (no pattern characters).
func (p *Provider) List(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) error {
	if fn == nil {
		return check.Invalidf("nil list function")
	}
	if err := checkText("prefix", prefix); err != nil {
		return err
	}
	upper := upperBound(prefix)
	for _, table := range []struct {
		query string
		scan  pgx.RowToFunc[listed]
	}{{p.sql.list, scanRecord}, {p.claimSQL.list, scanCounted}} {
		more, err := p.listPages(ctx, table.query, prefix, upper, table.scan, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// listed is a key and its record, as a row of a list query reads.
type listed struct {
	key string
	rec lock.Record
}

// listPages runs query (the list of the records, or of the counted names,
// whose keys start with prefix, in key order, after the key $2) a page of
// listPage rows at a time, and calls fn with each key and record scan
// reads, until fn returns false (more is false then) or the last page.
func (p *Provider) listPages(ctx context.Context, query, prefix string, upper *string, scan pgx.RowToFunc[listed],
	fn func(key string, r lock.Record, err error) bool) (more bool, err error) {
	after := ""
	for {
		page, err := p.listPage(ctx, query, prefix, after, upper, scan)
		if err != nil {
			return false, fail(err)
		}
		for _, l := range page {
			if !fn(l.key, l.rec, nil) {
				return false, nil
			}
		}
		if len(page) < listPage {
			return true, nil
		}
		after = page[len(page)-1].key
	}
}

// listPage reads up to listPage rows of query, each with scan.
func (p *Provider) listPage(ctx context.Context, query, prefix, after string, upper *string, scan pgx.RowToFunc[listed]) ([]listed, error) {
	rows, err := p.pool.Query(ctx, query, prefix, after, upper, listPage)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// scanRecord reads a row of the records' list: a key, its record and the
// count of its waiters.
func scanRecord(rows pgx.CollectableRow) (listed, error) {
	var l listed
	var r row
	var waiters int64
	if err := rows.Scan(append(append([]any{&l.key}, r.fields()...), &waiters)...); err != nil {
		return listed{}, err
	}
	l.rec = r.record()
	l.rec.Waiters = int(waiters)
	return l, nil
}

// ForceRelease implements lock.Provider.
func (p *Provider) ForceRelease(ctx context.Context, key string) (lock.Record, error) {
	if err := checkKey(key); err != nil {
		return lock.Record{}, err
	}
	var r row
	if err := p.pool.QueryRow(ctx, p.sql.force, key).Scan(r.fields()...); err != nil {
		return lock.Record{}, fail(err)
	}
	return r.record(), nil
}

// row is a record as the functions return it, with the server's time.
type row struct {
	owner                 string
	token                 int64
	ended                 bool
	expires, since, clock time.Time
}

func (r *row) fields() []any {
	return []any{&r.owner, &r.token, &r.ended, &r.expires, &r.since, &r.clock}
}

// record returns r as a lock.Record: the zero Record when no owner.
func (r *row) record() lock.Record {
	if r.owner == "" {
		return lock.Record{}
	}
	return lock.Record{
		Owner:       r.owner,
		Token:       uint64(r.token),
		GracePeriod: r.ended,
		TTL:         max(r.expires.Sub(r.clock).Truncate(time.Millisecond), time.Millisecond), // live rows only: at least 1ms, never "unknown"
		Since:       r.since,
	}
}

// fail marks a server's, network's or context's error as PostgreSQL's; the
// lock.Client names the operation and the key.
func fail(err error) error {
	return fmt.Errorf("postgres: %w", err)
}

// upperBound returns the least string greater than every string that starts
// with prefix, in byte order (the keys' collation is "C"), or nil when there
// is none (an empty prefix, or one of only U+10FFFF): the prefix with its
// last rune that can be incremented incremented, and what follows dropped.
func upperBound(prefix string) *string {
	rs := []rune(prefix)
	for i := len(rs) - 1; i >= 0; i-- {
		switch r := rs[i]; {
		case r == 0xD7FF:
			rs[i] = 0xE000 // past the surrogates, which UTF-8 does not encode
		case r < 0x10FFFF:
			rs[i] = r + 1
		default:
			continue
		}
		s := string(rs[:i+1])
		return &s
	}
	return nil
}
