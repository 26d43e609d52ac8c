-- The tables, sequence and functions of the PostgreSQL provider. NewProvider
-- runs this text once per process, under an advisory lock, with every
-- {{name}} replaced by a quoted identifier (see schema.go): the names start
-- with the table prefix, in the schema that was current then.
--
-- Every method of the provider is one call of one function below: one
-- statement, one round trip, one transaction. The transaction first takes
-- the key's advisory lock (enter), so that the calls on one key, from every
-- process, run one after the other; each statement after it, in READ
-- COMMITTED, sees all that the calls before it committed. Every write to a
-- key's rows holds that key's lock: the sweeps that delete another key's
-- expired rows take its lock too, or leave the row alone.
--
-- Time is the server's: a row whose expires_at has passed counts as absent,
-- and is overwritten or deleted later.

CREATE SEQUENCE IF NOT EXISTS {{tokens}} AS bigint;

-- The tables are made, with their indexes, only when they do not exist:
-- CREATE INDEX IF NOT EXISTS would lock an existing table, and could
-- deadlock with the calls of processes already running.
DO $do$
BEGIN
	IF to_regclass({{records_literal}}) IS NULL THEN
		-- A key's record: its holder (owner), the fencing token of the
		-- grant, ended during a grace period, when it was granted, and when
		-- it expires.
		CREATE TABLE {{records}} (
			key        text COLLATE "C" PRIMARY KEY,
			owner      text NOT NULL,
			token      bigint NOT NULL,
			ended      boolean NOT NULL DEFAULT false,
			since      timestamptz NOT NULL,
			expires_at timestamptz NOT NULL
		);
		CREATE INDEX {{records_expiry}} ON {{records}} (expires_at);
	END IF;
	IF to_regclass({{queue_literal}}) IS NULL THEN
		-- A key's wait queue, in arrival order (position): each waiter's
		-- owner, the TTL of the record it is to be granted (ms), the NOTIFY
		-- channel of its inbox, and when the entry ages out (a while after
		-- the waiter's last look).
		CREATE TABLE {{queue}} (
			position   bigserial PRIMARY KEY,
			key        text COLLATE "C" NOT NULL,
			owner      text NOT NULL,
			ttl_ms     bigint NOT NULL,
			channel    text NOT NULL,
			expires_at timestamptz NOT NULL,
			UNIQUE (key, owner)
		);
		CREATE INDEX {{queue_order}} ON {{queue}} (key, position);
		CREATE INDEX {{queue_expiry}} ON {{queue}} (expires_at);
	END IF;
END $do$;

-- enter_class takes the advisory lock of p_key in the class p_class (the
-- locks', or the counted names') for the rest of the transaction and
-- returns the server's time after it. A snapshot that outlives one
-- statement (REPEATABLE READ, SERIALIZABLE) would not see the calls that
-- held the lock before: it is refused.
CREATE OR REPLACE FUNCTION {{enter_class}}(p_class int, p_key text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION 'lock provider: isolation level %, want read committed',
			current_setting('transaction_isolation');
	END IF;
	PERFORM pg_advisory_xact_lock(p_class, hashtext(p_key));
	RETURN clock_timestamp();
END $$;

-- enter takes the advisory lock of the key p_key (enter_class).
CREATE OR REPLACE FUNCTION {{enter}}(p_key text) RETURNS timestamptz
LANGUAGE sql AS $$ SELECT {{enter_class}}({{class}}, p_key) $$;

-- grant stores a new record for p_owner under the free key p_key, with a
-- fresh token, over the expired record that may be there. First it deletes
-- up to two expired records of other keys, so that keys never used again
-- (a lock per tick, say) do not pile up.
CREATE OR REPLACE FUNCTION {{grant}}(p_key text, p_owner text, p_ttl bigint, p_now timestamptz)
RETURNS {{records}} LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
BEGIN
	DELETE FROM {{records}} WHERE expires_at <= p_now AND key IN (
		SELECT c.key FROM (
			SELECT x.key FROM {{records}} x WHERE x.expires_at <= p_now
			ORDER BY x.expires_at LIMIT 2) c
		WHERE pg_try_advisory_xact_lock({{class}}, hashtext(c.key)));
	INSERT INTO {{records}} AS x (key, owner, token, ended, since, expires_at)
	VALUES (p_key, p_owner, nextval({{tokens_literal}}), false,
		date_trunc('milliseconds', p_now), p_now + p_ttl * interval '1 millisecond')
	ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
		ended = false, since = excluded.since, expires_at = excluded.expires_at
	RETURNING x.* INTO r;
	RETURN r;
END $$;

-- serve hands the free key p_key to the first waiter of its queue whose
-- entry has not aged out: it stores a record for it, and tells its inbox
-- (delivered when the transaction commits) unless the waiter is p_me, the
-- caller, who learns it from the reply. It returns the new record, or NULL
-- when nobody waits. Postgres cannot tell whether anyone listens on a
-- channel: a waiter that died is served all the same.
CREATE OR REPLACE FUNCTION {{serve}}(p_key text, p_now timestamptz, p_me text)
RETURNS {{records}} LANGUAGE plpgsql AS $$
DECLARE
	w {{queue}};
	r {{records}};
BEGIN
	LOOP
		DELETE FROM {{queue}} WHERE position = (
			SELECT q.position FROM {{queue}} q WHERE q.key = p_key ORDER BY q.position LIMIT 1)
		RETURNING * INTO w;
		IF NOT FOUND THEN
			RETURN NULL;
		END IF;
		EXIT WHEN w.expires_at > p_now;
	END LOOP;
	r := {{grant}}(p_key, w.owner, w.ttl_ms, p_now);
	IF p_me IS NULL OR w.owner <> p_me THEN
		PERFORM pg_notify(w.channel, json_build_object(
			'k', p_key, 'o', w.owner, 't', r.token, 'ttl', w.ttl_ms)::text);
	END IF;
	RETURN r;
END $$;

-- free deletes the record under p_key, or hands the key to its first
-- waiter. It returns 2 when the key was handed over, 1 when freed.
CREATE OR REPLACE FUNCTION {{free}}(p_key text, p_now timestamptz) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
BEGIN
	r := {{serve}}(p_key, p_now, NULL);
	IF r.key IS NOT NULL THEN
		RETURN 2;
	END IF;
	DELETE FROM {{records}} WHERE key = p_key;
	RETURN 1;
END $$;

-- acquire and wait of a version before kinds (issue 38) return no o_kind:
-- they are dropped, and defined anew below (CREATE OR REPLACE cannot
-- change what a function returns). Once they have o_kind, nothing is
-- dropped.
DO $do$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_proc
		WHERE oid = to_regprocedure({{acquire_literal}} || '(text, text, bigint)') AND 'o_kind' = ANY(proargnames)) THEN
		DROP FUNCTION IF EXISTS {{acquire}}(text, text, bigint);
	END IF;
	IF NOT EXISTS (SELECT FROM pg_proc
		WHERE oid = to_regprocedure({{wait_literal}} || '(text, text, bigint, text, boolean, boolean)') AND 'o_kind' = ANY(proargnames)) THEN
		DROP FUNCTION IF EXISTS {{wait}}(text, text, bigint, text, boolean, boolean);
	END IF;
END $do$;

-- acquire is Provider.Acquire: it returns the record that holds the key
-- after the call, and the server's time (for the TTL left). A free key in
-- use as a counted name (claim_kind) is not a lock's to take: o_kind is
-- the name's kind then, o_owner '' and nothing changes; o_kind is ''
-- otherwise.
CREATE OR REPLACE FUNCTION {{acquire}}(p_key text, p_owner text, p_ttl bigint,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz, OUT o_kind text)
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
BEGIN
	o_now := {{enter}}(p_key);
	o_kind := '';
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > o_now;
	IF r.key IS NULL THEN
		o_kind := coalesce({{claim_kind}}(p_key, o_now), '');
	END IF;
	IF o_kind <> '' THEN
		o_owner := ''; o_token := 0; o_ended := false; o_expires := o_now; o_since := o_now;
		RETURN;
	ELSIF r.key IS NULL THEN
		r := {{grant}}(p_key, p_owner, p_ttl, o_now);
	ELSIF r.owner = p_owner AND NOT r.ended THEN
		-- An earlier attempt whose reply was lost: reset its TTL.
		UPDATE {{records}} SET expires_at = o_now + p_ttl * interval '1 millisecond'
		WHERE key = p_key RETURNING * INTO r;
	END IF;
	o_owner := r.owner; o_token := r.token; o_ended := r.ended;
	o_expires := r.expires_at; o_since := r.since;
END $$;

-- wait is Provider.Queue: acquire for a waiter, or put it in the key's
-- queue (keeping its place when it is there). o_queued and o_place say
-- whether the caller is queued and how many live entries are before it.
-- A free key in use as a counted name is neither taken nor queued for:
-- o_kind is the name's kind then, as in acquire.
CREATE OR REPLACE FUNCTION {{wait}}(p_key text, p_owner text, p_ttl bigint,
	p_channel text, p_fair boolean, p_again boolean,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz,
	OUT o_queued boolean, OUT o_place bigint, OUT o_kind text)
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
	pos bigint;
BEGIN
	o_now := {{enter}}(p_key);
	o_queued := false;
	o_place := 0;
	o_kind := '';
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > o_now;
	IF r.key IS NULL THEN
		o_kind := coalesce({{claim_kind}}(p_key, o_now), '');
		IF o_kind <> '' THEN
			o_owner := ''; o_token := 0; o_ended := false; o_expires := o_now; o_since := o_now;
			RETURN;
		END IF;
	END IF;
	IF r.key IS NULL AND (p_fair OR p_again) THEN
		-- Free: the first waiter goes first; it may be the caller.
		r := {{serve}}(p_key, o_now, p_owner);
	END IF;
	IF r.key IS NULL THEN
		DELETE FROM {{queue}} WHERE key = p_key AND owner = p_owner;
		r := {{grant}}(p_key, p_owner, p_ttl, o_now);
	ELSIF r.owner = p_owner AND NOT r.ended THEN
		-- Handed to the caller from the queue, or granted by an attempt
		-- whose reply was lost: it is the caller's, for its TTL from now.
		DELETE FROM {{queue}} WHERE key = p_key AND owner = p_owner;
		UPDATE {{records}} SET expires_at = o_now + p_ttl * interval '1 millisecond'
		WHERE key = p_key RETURNING * INTO r;
	ELSIF r.ended THEN
		-- A grace period: no waiter gets the lock in it.
		DELETE FROM {{queue}} WHERE key = p_key AND owner = p_owner;
	ELSE
		-- Age out a couple of entries that nobody looks after any more.
		DELETE FROM {{queue}} WHERE expires_at <= o_now AND position IN (
			SELECT c.position FROM (
				SELECT x.position, x.key FROM {{queue}} x WHERE x.expires_at <= o_now
				ORDER BY x.expires_at LIMIT 2) c
			WHERE pg_try_advisory_xact_lock({{class}}, hashtext(c.key)));
		-- Join the queue, or keep its place there (an entry that aged out
		-- goes to the back).
		INSERT INTO {{queue}} AS q (key, owner, ttl_ms, channel, expires_at)
		VALUES (p_key, p_owner, p_ttl, p_channel, o_now + {{queue_ttl}})
		ON CONFLICT (key, owner) DO UPDATE SET
			position = CASE WHEN q.expires_at <= o_now THEN excluded.position ELSE q.position END,
			ttl_ms = excluded.ttl_ms, channel = excluded.channel, expires_at = excluded.expires_at
		RETURNING q.position INTO pos;
		SELECT count(*) INTO o_place FROM {{queue}}
		WHERE key = p_key AND position < pos AND expires_at > o_now;
		o_queued := true;
	END IF;
	o_owner := r.owner; o_token := r.token; o_ended := r.ended;
	o_expires := r.expires_at; o_since := r.since;
END $$;

-- leave is Provider.Leave: it takes p_owner out of the queue, and frees or
-- passes on the key if it was handed to p_owner meanwhile.
CREATE OR REPLACE FUNCTION {{leave}}(p_key text, p_owner text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz;
	r {{records}};
BEGIN
	t := {{enter}}(p_key);
	DELETE FROM {{queue}} WHERE key = p_key AND owner = p_owner;
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > t;
	IF r.owner = p_owner AND NOT r.ended THEN
		PERFORM {{free}}(p_key, t);
	END IF;
END $$;

-- release is Provider.Release: o_code is 1 when the record was deleted, 2
-- when the key was handed to a waiter, 0 when p_owner held no record.
CREATE OR REPLACE FUNCTION {{release}}(p_key text, p_owner text, OUT o_code int)
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz;
	r {{records}};
BEGIN
	t := {{enter}}(p_key);
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > t;
	IF r.key IS NULL OR r.owner <> p_owner THEN
		o_code := 0;
		RETURN;
	END IF;
	o_code := {{free}}(p_key, t);
END $$;

-- update is Provider.Update: o_code is 1 when the record was updated, 0
-- when p_owner held no live record (o_token is then the token of p_owner's
-- ended record, if that is what is there, or 0). Ending a record tells
-- every inbox of the queue once, and empties the queue.
CREATE OR REPLACE FUNCTION {{update}}(p_key text, p_owner text, p_ttl bigint, p_ended boolean,
	OUT o_code int, OUT o_token bigint)
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz;
	r {{records}};
BEGIN
	t := {{enter}}(p_key);
	o_code := 0;
	o_token := 0;
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > t;
	IF r.key IS NULL OR r.owner <> p_owner THEN
		RETURN;
	END IF;
	o_token := r.token;
	IF r.ended THEN
		RETURN;
	END IF;
	UPDATE {{records}} SET ended = p_ended, expires_at = t + p_ttl * interval '1 millisecond'
	WHERE key = p_key;
	IF p_ended THEN
		PERFORM pg_notify(c.channel, json_build_object('k', p_key)::text)
		FROM (SELECT DISTINCT q.channel FROM {{queue}} q WHERE q.key = p_key AND q.expires_at > t) c;
		DELETE FROM {{queue}} WHERE key = p_key;
	END IF;
	o_code := 1;
END $$;

-- force_release is Provider.ForceRelease: it removes the live record under
-- p_key, whoever holds it, as its owner's release would, and returns it
-- (o_owner is '' when the key was free).
CREATE OR REPLACE FUNCTION {{force_release}}(p_key text,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
BEGIN
	o_now := {{enter}}(p_key);
	o_owner := ''; o_token := 0; o_ended := false; o_expires := o_now; o_since := o_now;
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > o_now;
	IF r.key IS NULL THEN
		RETURN;
	END IF;
	PERFORM {{free}}(p_key, o_now);
	o_owner := r.owner; o_token := r.token; o_ended := r.ended;
	o_expires := r.expires_at; o_since := r.since;
END $$;

-- The counted names (Provider.AcquireClaim and the other claim methods): a
-- name with a kind and a limit, holding claims whose weights add up to at
-- most the limit, and a queue of waiters. They live in tables of their
-- own, beside the records and queue of the locks; a key is one kind at a
-- time (issue 38): a lock's acquire and wait do not take a key whose
-- counted name holds claims or waiters (claim_kind), and claim_acquire
-- does not make a counted name of a key whose record exists. The tables
-- are made when they do not exist, so that a database made by an earlier
-- version gains them.
DO $do$
BEGIN
	IF to_regclass({{claims_literal}}) IS NULL THEN
		-- A claim on the counted name key: its holder (owner), its weight,
		-- the name's limit and kind, the fencing token of the grant (from
		-- the locks' sequence: the order of the grants), when it was
		-- granted, and when it expires.
		CREATE TABLE {{claims}} (
			key        text COLLATE "C" NOT NULL,
			owner      text NOT NULL,
			weight     int NOT NULL,
			lim        int NOT NULL,
			kind       text NOT NULL,
			token      bigint NOT NULL,
			since      timestamptz NOT NULL,
			expires_at timestamptz NOT NULL,
			PRIMARY KEY (key, owner)
		);
		CREATE INDEX {{claims_expiry}} ON {{claims}} (expires_at);
	END IF;
	IF to_regclass({{claim_queue_literal}}) IS NULL THEN
		-- A counted name's queue, in arrival order (position): each
		-- waiter's owner, weight, and the name's limit and kind, the TTL
		-- of the claim it is to be granted (ms), its inbox and that
		-- inbox's NOTIFY channel, and when the entry ages out (a while
		-- after the waiter's last look).
		CREATE TABLE {{claim_queue}} (
			position   bigserial PRIMARY KEY,
			key        text COLLATE "C" NOT NULL,
			owner      text NOT NULL,
			weight     int NOT NULL,
			lim        int NOT NULL,
			kind       text NOT NULL,
			ttl_ms     bigint NOT NULL,
			inbox      text NOT NULL,
			channel    text NOT NULL,
			expires_at timestamptz NOT NULL,
			UNIQUE (key, owner)
		);
		CREATE INDEX {{claim_queue_order}} ON {{claim_queue}} (key, position);
		CREATE INDEX {{claim_queue_expiry}} ON {{claim_queue}} (expires_at);
	END IF;
	-- The tables of a version before kinds gain the column (its rows have
	-- none: '', a name that takes claims of either kind and that a lock's
	-- calls do not see, as before, until it empties).
	IF NOT EXISTS (SELECT FROM pg_attribute
		WHERE attrelid = to_regclass({{claims_literal}}) AND attname = 'kind' AND NOT attisdropped) THEN
		ALTER TABLE {{claims}} ADD COLUMN kind text NOT NULL DEFAULT '';
	END IF;
	IF NOT EXISTS (SELECT FROM pg_attribute
		WHERE attrelid = to_regclass({{claim_queue_literal}}) AND attname = 'kind' AND NOT attisdropped) THEN
		ALTER TABLE {{claim_queue}} ADD COLUMN kind text NOT NULL DEFAULT '';
	END IF;
END $do$;

-- claim_enter is enter for a counted name: it takes the name's advisory
-- lock (of a class of its own, so that a lock and a counted name of the
-- same key do not wait for each other) for the rest of the transaction,
-- and returns the server's time after it (enter_class). Every call on a
-- counted name takes it first: two calls on one name run one after the
-- other, and the second's statements (READ COMMITTED) see all that the
-- first committed, so two calls never both see the same room.
CREATE OR REPLACE FUNCTION {{claim_enter}}(p_key text) RETURNS timestamptz
LANGUAGE sql AS $$ SELECT {{enter_class}}({{claims_class}}, p_key) $$;

-- claim_kind returns the kind of the name p_key: that of its live claims,
-- or of its first live waiter; NULL when it holds neither (or only rows of
-- a version before kinds). A lock's acquire and wait call it under the
-- key's lock alone: a call that makes a name takes that lock too (see
-- claim_acquire), so the two never both find the key free.
CREATE OR REPLACE FUNCTION {{claim_kind}}(p_key text, p_now timestamptz) RETURNS text
LANGUAGE sql AS $$
	SELECT coalesce(
		(SELECT x.kind FROM {{claims}} x WHERE x.key = p_key AND x.expires_at > p_now AND x.kind <> '' LIMIT 1),
		(SELECT q.kind FROM {{claim_queue}} q WHERE q.key = p_key AND q.expires_at > p_now AND q.kind <> ''
			ORDER BY q.position LIMIT 1))
$$;

-- claim_limit returns the limit of the name p_key: that of its claims, or
-- of its first live waiter; NULL when it holds neither.
CREATE OR REPLACE FUNCTION {{claim_limit}}(p_key text, p_now timestamptz) RETURNS int
LANGUAGE sql AS $$
	SELECT coalesce(
		(SELECT x.lim FROM {{claims}} x WHERE x.key = p_key AND x.expires_at > p_now LIMIT 1),
		(SELECT q.lim FROM {{claim_queue}} q WHERE q.key = p_key AND q.expires_at > p_now
			ORDER BY q.position LIMIT 1))
$$;

-- claim_serve grants the queue of the name p_key, whose expired claims
-- are deleted: the first live waiter gets a claim of its weight, with its
-- TTL and a fresh token, while it fits, then the next, and so on, up to
-- 64 grants; a waiter that does not fit stops it (nobody overtakes it).
-- Each grant is told to the waiter's inbox, delivered when the
-- transaction commits. Entries that aged out are deleted on the way.
-- PostgreSQL cannot tell whether anyone listens on a channel: a waiter
-- that died is granted all the same, and its claim idles until its TTL
-- runs out. It returns the number of grants.
CREATE OR REPLACE FUNCTION {{claim_serve}}(p_key text, p_now timestamptz) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	w {{claim_queue}};
	c {{claims}};
	used bigint;
	n int := 0;
BEGIN
	WHILE n < 64 LOOP
		SELECT * INTO w FROM {{claim_queue}} q WHERE q.key = p_key ORDER BY q.position LIMIT 1;
		EXIT WHEN NOT FOUND;
		IF used IS NULL THEN
			-- Summed once, when someone waits.
			SELECT coalesce(sum(x.weight), 0) INTO used FROM {{claims}} x
			WHERE x.key = p_key AND x.expires_at > p_now;
		END IF;
		IF w.expires_at > p_now THEN
			EXIT WHEN used + w.weight > w.lim;
		END IF;
		DELETE FROM {{claim_queue}} WHERE position = w.position;
		CONTINUE WHEN w.expires_at <= p_now;
		INSERT INTO {{claims}} AS x (key, owner, weight, lim, kind, token, since, expires_at)
		VALUES (p_key, w.owner, w.weight, w.lim, w.kind, nextval({{tokens_literal}}),
			date_trunc('milliseconds', p_now), p_now + w.ttl_ms * interval '1 millisecond')
		ON CONFLICT (key, owner) DO NOTHING
		RETURNING x.* INTO c;
		IF c.key IS NULL THEN
			-- The waiter holds a claim already: tell it of that one.
			SELECT * INTO c FROM {{claims}} x WHERE x.key = p_key AND x.owner = w.owner;
		ELSE
			used := used + w.weight;
		END IF;
		PERFORM pg_notify(w.channel, json_build_object('k', p_key, 'o', w.owner, 't', c.token,
			'ttl', greatest(1, floor(extract(epoch FROM c.expires_at - p_now) * 1000))::bigint, 'w', c.weight)::text);
		n := n + 1;
		c := NULL;
	END LOOP;
	RETURN n;
END $$;

-- claim_open starts every call that changes the name p_key, once its
-- advisory lock is held: it deletes the name's expired claims, and serves
-- its queue with the weight they held (and with the room a waiter that
-- aged out may have left at the head).
CREATE OR REPLACE FUNCTION {{claim_open}}(p_key text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM {{claims}} WHERE key = p_key AND expires_at <= p_now;
	PERFORM {{claim_serve}}(p_key, p_now);
END $$;

-- claim_grant stores a new claim for p_owner on p_key, with a fresh
-- token. First it opens (claim_open) up to two other names that hold
-- expired claims, when their advisory locks are free, so that the claims
-- of names never used again do not pile up, and their waiters are served.
-- (The version before kinds is dropped first.)
DROP FUNCTION IF EXISTS {{claim_grant}}(text, text, int, int, bigint, timestamptz);
CREATE OR REPLACE FUNCTION {{claim_grant}}(p_key text, p_owner text, p_weight int, p_limit int,
	p_kind text, p_ttl bigint, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	k text;
BEGIN
	FOR k IN SELECT c.key FROM (
		SELECT DISTINCT x.key FROM (
			SELECT y.key FROM {{claims}} y WHERE y.expires_at <= p_now
			ORDER BY y.expires_at LIMIT 2) x) c
	WHERE c.key <> p_key AND pg_try_advisory_xact_lock({{claims_class}}, hashtext(c.key))
	LOOP
		PERFORM {{claim_open}}(k, p_now);
	END LOOP;
	INSERT INTO {{claims}} (key, owner, weight, lim, kind, token, since, expires_at)
	VALUES (p_key, p_owner, p_weight, p_limit, p_kind, nextval({{tokens_literal}}),
		date_trunc('milliseconds', p_now), p_now + p_ttl * interval '1 millisecond');
END $$;

-- claim_view fills in what the claim calls return of the name p_key: the
-- claim of p_owner, or else the live claim that expires first (owner ''
-- when none is live; p_owner '' for none), and the weight the live claims
-- hold.
CREATE OR REPLACE FUNCTION {{claim_view}}(p_key text, p_owner text, p_now timestamptz,
	OUT o_owner text, OUT o_token bigint, OUT o_expires timestamptz, OUT o_since timestamptz,
	OUT o_used int)
LANGUAGE plpgsql AS $$
BEGIN
	o_owner := ''; o_token := 0; o_expires := p_now; o_since := p_now;
	SELECT x.owner, x.token, x.expires_at, x.since INTO o_owner, o_token, o_expires, o_since
	FROM {{claims}} x WHERE x.key = p_key AND x.expires_at > p_now
	ORDER BY x.owner = p_owner DESC, x.expires_at, x.token LIMIT 1;
	IF NOT FOUND THEN
		o_owner := ''; o_token := 0; o_expires := p_now; o_since := p_now;
	END IF;
	SELECT coalesce(sum(x.weight), 0) INTO o_used FROM {{claims}} x
	WHERE x.key = p_key AND x.expires_at > p_now;
END $$;

-- claim_acquire is Provider.AcquireClaim, and, with p_wait, QueueClaim
-- (p_inbox, p_channel and p_queue_ttl, the ms its entry lasts, are then the
-- waiter's). It returns the view of claim_view, the name's limit and kind
-- (its own when it has them: a p_limit or p_kind that differs changes
-- nothing), the server's time (for the TTL left), o_queued and o_place:
-- whether the caller is queued and how many live entries are before it,
-- and o_head: when the head's entry runs out, when the caller is queued
-- behind it (else NULL). A call that would make the name (it holds no
-- claim and no waiter) of a key whose lock record exists, held or ended,
-- changes nothing: o_kind is 'lock', o_limit 0, and o_owner, o_token,
-- o_ended, o_expires and o_since are the record's. (The versions before
-- p_queue_ttl and before p_kind are dropped first.)
DROP FUNCTION IF EXISTS {{claim_acquire}}(text, text, int, int, bigint, boolean, text, text);
DROP FUNCTION IF EXISTS {{claim_acquire}}(text, text, int, int, bigint, boolean, text, text, bigint);
CREATE OR REPLACE FUNCTION {{claim_acquire}}(p_key text, p_owner text, p_weight int, p_limit int,
	p_kind text, p_ttl bigint, p_wait boolean, p_inbox text, p_channel text, p_queue_ttl bigint,
	OUT o_owner text, OUT o_token bigint, OUT o_expires timestamptz, OUT o_since timestamptz,
	OUT o_now timestamptz, OUT o_limit int, OUT o_used int, OUT o_queued boolean, OUT o_place bigint,
	OUT o_head timestamptz, OUT o_kind text, OUT o_ended boolean)
LANGUAGE plpgsql AS $$
DECLARE
	pos bigint;
	used bigint;
	r {{records}};
	t timestamptz;
BEGIN
	o_now := {{claim_enter}}(p_key);
	o_queued := false;
	o_place := 0;
	o_ended := false;
	PERFORM {{claim_open}}(p_key, o_now);
	o_limit := {{claim_limit}}(p_key, o_now);
	IF o_limit IS NULL THEN
		-- The call makes the name: not of a key whose lock record exists.
		-- The key's lock (the locks' advisory lock), taken after the
		-- name's (a lock's calls never take a name's), orders this look
		-- and the grant below against a lock's grant of the key.
		t := {{enter}}(p_key);
		SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > t;
		IF r.key IS NOT NULL THEN
			o_kind := 'lock'; o_limit := 0; o_used := 0; o_now := t;
			o_owner := r.owner; o_token := r.token; o_ended := r.ended;
			o_expires := r.expires_at; o_since := r.since;
			RETURN;
		END IF;
		o_limit := p_limit;
	END IF;
	o_kind := coalesce({{claim_kind}}(p_key, o_now), p_kind);
	IF o_limit = p_limit AND o_kind = p_kind THEN
		-- The caller's claim (granted by an attempt whose reply was lost,
		-- or from the queue): it is the caller's, for its TTL from now.
		UPDATE {{claims}} SET expires_at = o_now + p_ttl * interval '1 millisecond'
		WHERE key = p_key AND owner = p_owner;
		IF FOUND THEN
			DELETE FROM {{claim_queue}} WHERE key = p_key AND owner = p_owner;
		ELSE
			SELECT coalesce(sum(x.weight), 0) INTO used FROM {{claims}} x WHERE x.key = p_key;
			IF used + p_weight <= p_limit AND NOT EXISTS (
				SELECT FROM {{claim_queue}} q WHERE q.key = p_key AND q.expires_at > o_now) THEN
				DELETE FROM {{claim_queue}} WHERE key = p_key AND owner = p_owner;
				PERFORM {{claim_grant}}(p_key, p_owner, p_weight, p_limit, p_kind, p_ttl, o_now);
			ELSIF p_wait THEN
				-- Age out a couple of entries that nobody looks after any more.
				DELETE FROM {{claim_queue}} WHERE expires_at <= o_now AND position IN (
					SELECT c.position FROM (
						SELECT x.position, x.key FROM {{claim_queue}} x WHERE x.expires_at <= o_now
						ORDER BY x.expires_at LIMIT 2) c
					WHERE pg_try_advisory_xact_lock({{claims_class}}, hashtext(c.key)));
				-- Join the queue, or keep its place there (an entry that ran
				-- out goes to the back); the entry lasts p_queue_ttl.
				INSERT INTO {{claim_queue}} AS q (key, owner, weight, lim, kind, ttl_ms, inbox, channel, expires_at)
				VALUES (p_key, p_owner, p_weight, p_limit, p_kind, p_ttl, p_inbox, p_channel,
					o_now + p_queue_ttl * interval '1 millisecond')
				ON CONFLICT (key, owner) DO UPDATE SET
					position = CASE WHEN q.expires_at <= o_now THEN excluded.position ELSE q.position END,
					weight = excluded.weight, ttl_ms = excluded.ttl_ms, inbox = excluded.inbox,
					channel = excluded.channel, expires_at = excluded.expires_at
				RETURNING q.position INTO pos;
				SELECT count(*) INTO o_place FROM {{claim_queue}}
				WHERE key = p_key AND position < pos AND expires_at > o_now;
				o_queued := true;
				IF o_place > 0 THEN
					SELECT q.expires_at INTO o_head FROM {{claim_queue}} q
					WHERE q.key = p_key AND q.expires_at > o_now ORDER BY q.position LIMIT 1;
				END IF;
			END IF;
		END IF;
	END IF;
	-- A caller whose limit or kind differs is shown the name as a
	-- stranger is.
	SELECT * INTO o_owner, o_token, o_expires, o_since, o_used
	FROM {{claim_view}}(p_key, CASE WHEN o_limit = p_limit AND o_kind = p_kind THEN p_owner ELSE '' END, o_now);
END $$;

-- claim_change is Provider.LeaveClaim, ReleaseClaim, RenewClaim and
-- LowerClaim, by p_op: 'leave' takes p_owner out of the queue and
-- releases its claim, if any; 'release' deletes its claim; 'renew' sets
-- its TTL to p_ttl; 'lower' sets its weight to p_weight when that is
-- less. Then it serves the queue with the weight freed ('leave' always:
-- the waiters behind the one that left may fit now). o_code is 1 when
-- p_owner held a live claim, else 0 (and nothing was changed but the
-- queue entry 'leave' deletes).
CREATE OR REPLACE FUNCTION {{claim_change}}(p_key text, p_owner text, p_op text, p_ttl bigint,
	p_weight int, OUT o_code int)
LANGUAGE plpgsql AS $$
DECLARE
	t timestamptz;
BEGIN
	t := {{claim_enter}}(p_key);
	PERFORM {{claim_open}}(p_key, t);
	CASE p_op
	WHEN 'leave' THEN
		DELETE FROM {{claim_queue}} WHERE key = p_key AND owner = p_owner;
		DELETE FROM {{claims}} WHERE key = p_key AND owner = p_owner;
	WHEN 'release' THEN
		DELETE FROM {{claims}} WHERE key = p_key AND owner = p_owner;
	WHEN 'renew' THEN
		UPDATE {{claims}} SET expires_at = t + p_ttl * interval '1 millisecond'
		WHERE key = p_key AND owner = p_owner;
	WHEN 'lower' THEN
		UPDATE {{claims}} SET weight = least(weight, p_weight)
		WHERE key = p_key AND owner = p_owner;
	END CASE;
	o_code := CASE WHEN FOUND THEN 1 ELSE 0 END;
	IF p_op = 'leave' OR (o_code = 1 AND p_op <> 'renew') THEN
		PERFORM {{claim_serve}}(p_key, t);
	END IF;
END $$;
