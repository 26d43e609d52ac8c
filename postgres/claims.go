package postgres

import (
	"cmp"
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// The counted names (semaphores, read-write locks): each method is one call
// of a function of schema.sql (claim_acquire, claim_change), one statement
// and one transaction that takes the name's advisory lock first, then
// deletes the name's expired claims and serves its queue, then does its
// work; InspectClaims is one plain read. The claims and their queue live in
// tables of their own (claims, claim_queue), beside the locks'; a key is
// one kind at a time (see claim_acquire and claim_kind in schema.sql).

// claimQueries are the statements of the claim methods, with their names
// filled in.
type claimQueries struct {
	acquire, change, inspect, list string
}

func (o objects) claimQueries() claimQueries {
	f := o.funcs
	return claimQueries{
		acquire: `SELECT * FROM ` + f["claim_acquire"] + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		change:  `SELECT * FROM ` + f["claim_change"] + `($1, $2, $3, $4, $5)`,
		// The live claims in grant order (kind 0), then the live waiters in
		// arrival order (kind 1), by one clock.
		inspect: `WITH c AS (SELECT clock_timestamp() AS t)
SELECT 0, x.owner, x.weight, x.lim, x.kind, x.token, x.since, x.expires_at, 0::bigint, '', c.t
FROM c CROSS JOIN ` + o.claims + ` x WHERE x.key = $1 AND x.expires_at > c.t
UNION ALL
SELECT 1, q.owner, q.weight, q.lim, q.kind, q.position, c.t, q.expires_at, q.ttl_ms, q.inbox, c.t
FROM c CROSS JOIN ` + o.claimQueue + ` q WHERE q.key = $1 AND q.expires_at > c.t
ORDER BY 1, 6`,
		// A page of the counted names with live claims or waiters whose
		// keys start with $1, after $2, and before $3 when it is not NULL
		// (as the list of records): each with its limit, the weight its
		// claims hold, when its last claim expires, its waiters, and its
		// kind ('' for a name of a version before kinds).
		list: `WITH c AS (SELECT clock_timestamp() AS t),
k AS (
	SELECT u.key FROM (
		SELECT x.key FROM c CROSS JOIN ` + o.claims + ` x
		WHERE x.key > $2 AND ($3::text IS NULL OR x.key < $3) AND starts_with(x.key, $1) AND x.expires_at > c.t
		UNION
		SELECT q.key FROM c CROSS JOIN ` + o.claimQueue + ` q
		WHERE q.key > $2 AND ($3::text IS NULL OR q.key < $3) AND starts_with(q.key, $1) AND q.expires_at > c.t
	) u ORDER BY u.key LIMIT $4)
SELECT k.key, coalesce(a.lim, w.lim, 0), coalesce(a.used, 0), coalesce(a.until, c.t), w.n, c.t,
	coalesce(a.kind, w.kind, '')
FROM c CROSS JOIN k
CROSS JOIN LATERAL (SELECT max(x.lim) AS lim, sum(x.weight) AS used, max(x.expires_at) AS until,
	max(nullif(x.kind, '')) AS kind
	FROM ` + o.claims + ` x WHERE x.key = k.key AND x.expires_at > c.t) a
CROSS JOIN LATERAL (SELECT count(*) AS n, max(q.lim) AS lim, max(nullif(q.kind, '')) AS kind
	FROM ` + o.claimQueue + ` q WHERE q.key = k.key AND q.expires_at > c.t) w
ORDER BY k.key`,
	}
}

// checkClaim is lock.Claim.Check, then, with inbox, checkInbox of c.Inbox,
// then checkTexts.
func checkClaim(key string, c lock.Claim, inbox bool) error {
	if err := c.Check(key); err != nil {
		return err
	}
	if !inbox {
		return checkTexts(key, c.Owner, "")
	}
	if err := check.Inbox(c.Inbox); err != nil {
		return err
	}
	return checkTexts(key, c.Owner, c.Inbox)
}

// AcquireClaim implements lock.Provider.
func (p *Provider) AcquireClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if err := checkClaim(key, c, false); err != nil {
		return lock.Record{}, err
	}
	return p.acquireClaim(ctx, key, c, false)
}

// QueueClaim implements lock.Provider. c.Look is not used: the queue is
// always served first.
func (p *Provider) QueueClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if err := checkClaim(key, c, true); err != nil {
		return lock.Record{}, err
	}
	return p.acquireClaim(ctx, key, c, true)
}

// acquireClaim runs claim_acquire, which queues the caller when wait is
// set and the claim is not granted.
func (p *Provider) acquireClaim(ctx context.Context, key string, c lock.Claim, wait bool) (lock.Record, error) {
	var r claimRow
	err := p.pool.QueryRow(ctx, p.claimSQL.acquire, key, c.Owner, c.Weight, c.Limit, string(c.Kind), c.TTL.Milliseconds(),
		wait, c.Inbox, channel(c.Inbox), max(cmp.Or(c.QueueTTL, lock.DefaultQueueTTL).Milliseconds(), 1)).Scan(r.fields()...)
	if err != nil {
		return lock.Record{}, fail(err)
	}
	return r.record(c.Owner), nil
}

// claimRow is what claim_acquire returns.
type claimRow struct {
	owner                 string
	token                 int64
	expires, since, clock time.Time
	limit, used           int32
	queued                bool
	place                 int64
	head                  *time.Time // when the head's entry runs out, for a caller behind it
	kind                  string     // the name's; "lock" when the key's lock record refused the call
	ended                 bool       // the lock record's, when kind is "lock"
}

func (r *claimRow) fields() []any {
	return []any{&r.owner, &r.token, &r.expires, &r.since, &r.clock, &r.limit, &r.used, &r.queued, &r.place, &r.head, &r.kind, &r.ended}
}

// record returns r as a lock.Record for the caller owner: Since is set
// only for the caller's own claim. A call refused for the key's lock
// record returns that record, with Kind lock.KindLock.
func (r *claimRow) record(owner string) lock.Record {
	if lock.Kind(r.kind) == lock.KindLock {
		return lock.Record{Owner: r.owner, Token: uint64(r.token), GracePeriod: r.ended, TTL: ttlLeft(r.expires, r.clock),
			Since: r.since, Kind: lock.KindLock}
	}
	rec := lock.Record{Limit: int(r.limit), Used: int(r.used), Kind: lock.Kind(r.kind)}
	if r.owner != "" {
		rec.Owner, rec.Token, rec.TTL = r.owner, uint64(r.token), ttlLeft(r.expires, r.clock)
	}
	if r.owner == owner {
		rec.Since = r.since
	}
	if r.queued {
		rec.Queued, rec.Position = true, int(r.place)
	}
	if r.queued && r.head != nil {
		rec.HeadTTL = ttlLeft(*r.head, r.clock)
	}
	return rec
}

// ttlLeft is the time from clock to expires, truncated to the millisecond,
// and at least 1ms (the rows read are live).
func ttlLeft(expires, clock time.Time) time.Duration {
	return max(expires.Sub(clock).Truncate(time.Millisecond), time.Millisecond)
}

// LeaveClaim implements lock.Provider.
func (p *Provider) LeaveClaim(ctx context.Context, key string, c lock.Claim) error {
	if err := checkClaim(key, c, true); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, c.Owner, "leave", 0, 0)
}

// RenewClaim implements lock.Provider.
func (p *Provider) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, "renew", ttl.Milliseconds(), 0)
}

// ReleaseClaim implements lock.Provider.
func (p *Provider) ReleaseClaim(ctx context.Context, key, owner string) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, "release", 0, 0)
}

// LowerClaim implements lock.Provider.
func (p *Provider) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	if err := check.Weight(weight); err != nil {
		return err
	}
	return p.changeClaim(ctx, key, owner, "lower", 0, weight)
}

// changeClaim runs claim_change with op. It returns a *lock.LostError
// when owner held no live claim, except for "leave".
func (p *Provider) changeClaim(ctx context.Context, key, owner, op string, ttl int64, weight int) error {
	var code int32
	if err := p.pool.QueryRow(ctx, p.claimSQL.change, key, owner, op, ttl, weight).Scan(&code); err != nil {
		return fail(err)
	}
	if code == 0 && op != "leave" {
		return &lock.LostError{Key: key}
	}
	return nil
}

// InspectClaims implements lock.Provider. It reads the claims and the
// queue in one statement, without taking the name's lock: it changes
// nothing, and reads expired claims and aged-out entries as gone.
func (p *Provider) InspectClaims(ctx context.Context, key string) (lock.Claims, error) {
	if err := checkKey(key); err != nil {
		return lock.Claims{}, err
	}
	rows, err := p.pool.Query(ctx, p.claimSQL.inspect, key)
	if err != nil {
		return lock.Claims{}, fail(err)
	}
	defer rows.Close()
	var cs lock.Claims
	for rows.Next() {
		var (
			part, weight, limit int32
			owner, inbox, kind  string
			token, ttl          int64
			since, expires, now time.Time
		)
		if err := rows.Scan(&part, &owner, &weight, &limit, &kind, &token, &since, &expires, &ttl, &inbox, &now); err != nil {
			return lock.Claims{}, fail(err)
		}
		cs.Limit = int(limit)
		if kind != "" {
			cs.Kind = lock.Kind(kind)
		}
		if part == 0 {
			cs.Holders = append(cs.Holders, lock.Record{Owner: owner, Token: uint64(token), TTL: ttlLeft(expires, now), Since: since})
			cs.Weights = append(cs.Weights, int(weight))
			continue
		}
		cs.Queue = append(cs.Queue, lock.Claim{Owner: owner, Weight: int(weight), Limit: int(limit), Kind: lock.Kind(kind),
			TTL: time.Duration(ttl) * time.Millisecond, Inbox: inbox})
	}
	if err := rows.Err(); err != nil {
		return lock.Claims{}, fail(err)
	}
	return cs, nil
}

// scanCounted reads a row of the counted names' list: a key, with its
// limit, the weight its claims hold, when its last claim expires, the
// count of its waiters, the server's time, and its kind.
func scanCounted(rows pgx.CollectableRow) (listed, error) {
	var l listed
	var limit int32
	var used, waiters int64
	var until, now time.Time
	var kind string
	if err := rows.Scan(&l.key, &limit, &used, &until, &waiters, &now, &kind); err != nil {
		return listed{}, err
	}
	l.rec = lock.Record{Limit: int(limit), Used: int(used), Waiters: int(waiters), Kind: lock.Kind(kind)}
	if used > 0 {
		l.rec.TTL = ttlLeft(until, now)
	}
	return l, nil
}
