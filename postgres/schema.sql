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

-- enter takes the advisory lock of p_key for the rest of the transaction
-- and returns the server's time after it. A snapshot that outlives one
-- statement (REPEATABLE READ, SERIALIZABLE) would not see the calls that
-- held the lock before: it is refused.
CREATE OR REPLACE FUNCTION {{enter}}(p_key text) RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
	IF current_setting('transaction_isolation') <> 'read committed' THEN
		RAISE EXCEPTION 'lock provider: isolation level %, want read committed',
			current_setting('transaction_isolation');
	END IF;
	PERFORM pg_advisory_xact_lock({{class}}, hashtext(p_key));
	RETURN clock_timestamp();
END $$;

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

-- acquire is Provider.Acquire: it returns the record that holds the key
-- after the call, and the server's time (for the TTL left).
CREATE OR REPLACE FUNCTION {{acquire}}(p_key text, p_owner text, p_ttl bigint,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
BEGIN
	o_now := {{enter}}(p_key);
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > o_now;
	IF r.key IS NULL THEN
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
CREATE OR REPLACE FUNCTION {{wait}}(p_key text, p_owner text, p_ttl bigint,
	p_channel text, p_fair boolean, p_again boolean,
	OUT o_owner text, OUT o_token bigint, OUT o_ended boolean,
	OUT o_expires timestamptz, OUT o_since timestamptz, OUT o_now timestamptz,
	OUT o_queued boolean, OUT o_place bigint)
LANGUAGE plpgsql AS $$
DECLARE
	r {{records}};
	pos bigint;
BEGIN
	o_now := {{enter}}(p_key);
	o_queued := false;
	o_place := 0;
	SELECT * INTO r FROM {{records}} WHERE key = p_key AND expires_at > o_now;
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
