-- Prepended to every script but acquire.lua and inspect.lua (which need
-- none of it): lib() makes the functions that read and grant records and
-- serve the wait queue. It makes them only when a script needs them: a
-- function made on every call of a script costs Redis more than the rest of
-- an uncontended acquire, release or renewal, which read a record of their
-- own owner inline (as release.lua shows) and call lib() only for anything
-- else.
--
-- What every script takes and replies, written once here:
--
-- KEYS[1] is the record, KEYS[2] the fencing counter of its slot, KEYS[3]
-- the wait queue: a list of entries "owner ttl-ms channel" in arrival order,
-- channel the waiter's inbox or, with sharded pub/sub on a Cluster, its
-- shard channel in this key's slot (see publish).
--
-- ARGV has one layout: position i means the same in every script, and a
-- script is passed the first positions it needs, with "" in those it skips.
--   ARGV[1] owner: the caller's owner
--   ARGV[2] ttl: the caller's ttl, in ms
--   ARGV[3] key: the lock's key, for the messages (see serve)
--   ARGV[4] pub: how to publish (see publish)
--   ARGV[5] now: the caller's clock, in Unix ms, a grant's since
--   ARGV[6] entry: the caller's queue entry
--   ARGV[7] mode: how queue.lua looks (see there)
--   ARGV[8] queue ttl: how long the queue outlives its last look, in ms
-- (RedisProvider's methods in provider_redis.go pass them in this order.)
--
-- The reply codes, one table for these scripts and the counted names'
-- (claim.lua), decoded into one reply type (reply, whose constants
-- replyEmpty... name them, in provider_redis_script.go):
--   0 EMPTY    the key holds nothing
--   1 DONE     the call did what it was asked
--   2 VALUE    the caller holds nothing; the reply says what holds the key
--   3 QUEUED   the caller is in the queue
--   4 GRANTED  the caller holds the key: a lock's new record, a claim
--   5 LOST     the caller holds no live claim; nothing changed
--   6 CORRUPT  a stored value is not the scripts'; nothing was written
--   7 LOCKED   the key holds a lock's record; nothing was written
-- These scripts reply codes 0 to 4, the counted names' 1 to 7.
--
-- Every script here replies {code, value, pttl, n}, decoded by decode in
-- provider_redis_script.go:
--   EMPTY: value false, pttl and n 0.
--   DONE (release, renew, finish, leave): value false, pttl and n 0.
--   VALUE: value is what the key holds (after the call; for forcerelease,
--     what it held), pttl its remaining TTL in ms (0 when not read), n the
--     length of the queue for inspect, else 0. A value that is not a
--     record is returned as it is: the caller reports it, but for a
--     counted name's mark, "counted <kind>" (see claim.lua), which says
--     that the key is in use as that name: no lock's record. For release,
--     renew and finish, VALUE means the caller does not hold the key.
--   QUEUED (queue.lua): value is the record that holds the key with its
--     pttl, or false and 0 when it was not read, n the caller's place (0
--     first).
--   GRANTED (acquire.lua): the caller's new record was stored; value false
--     (the caller knows it), pttl 0, n its token.
--
-- A record is "owner,token,since" while held, "owner,token,since,q" while
-- held with a queue waiting for it, and "owner,token,since,ended" during a
-- grace period; owner is 1 to 128 bytes without commas or white space, token
-- 1 to 19 digits without a leading zero, since the grant's time in Unix
-- milliseconds, 1 to 15 digits, by the clock of the process whose call
-- granted it (ARGV[5]). parse below is the one parser in Lua (owned.lua is a
-- copy restricted to one owner, written inline for speed), and parseRecord
-- in provider_redis.go the same parser in Go;
-- TestRecordParsersAgree checks that the three agree.

local function lib()
  -- parse returns owner, token, ended and queued, or nil when v is not a
  -- record.
  local function parse(v)
    local owner, token, since, rest = string.match(v, '^([^,%s]+),([1-9]%d*),(%d+)(.*)$')
    if not owner or #owner > 128 or #token > 19 or #since > 15 then return nil end
    if rest == '' then return owner, token, false, false end
    if rest == ',q' then return owner, token, false, true end
    if rest == ',ended' then return owner, token, true, false end
    return nil
  end

  -- nexttoken returns a fresh fencing token from the counter KEYS[2], or nil
  -- and the error to return (see token.lua).
  local function nexttoken()
    local step = 1
    --#include token.lua
    if not token then return nil, tokenerr end
    return string.format('%d', token)
  end

  -- grant stores a new record for owner with a fresh token, granted now
  -- (ARGV[5]), marked queued when queued is true, and returns its value, or
  -- nil and the error to return.
  local function grant(owner, ttl, queued)
    local token, err = nexttoken()
    if not token then return nil, err end
    local v = owner .. ',' .. token .. ',' .. ARGV[5]
    if queued then v = v .. ',q' end
    redis.call('SET', KEYS[1], v, 'PX', ttl)
    return v
  end

  --#include publish.lua

  -- serve hands the lock to the first waiter in the queue: it stores a record
  -- for it (marked queued: others may follow) and publishes "value ttl\nkey"
  -- on its channel, key ARGV[3]. A waiter whose inbox nobody listens to any
  -- more (the message reaches no one) is skipped when ARGV[4] says the count
  -- is exact (see publish). It returns the owner and the value of the new
  -- record; nothing when the queue is empty, or 64 entries were skipped (the
  -- record is then unchanged, or deleted if it had been handed to a dead
  -- waiter); or nil, nil and an error. The entry me (if given) is granted
  -- without a message.
  local function serve(me)
    -- At most 64 entries a call: past that the key is left free, and the
    -- next waiter's look serves the rest of the queue.
    for _ = 1, 64 do
      local e = redis.call('LPOP', KEYS[3])
      if not e then return nil end
      local owner, ttl, ch = string.match(e, '^(%S+) (%d+) (%S+)$')
      if owner then
        local v, err = grant(owner, ttl, true)
        if not v then return nil, nil, err end
        if e == me then return owner, v end
        if not publish(ch, v .. ' ' .. ttl .. '\n' .. ARGV[3]) then return owner, v end
        redis.call('DEL', KEYS[1])
      end
    end
    return nil
  end

  -- tellall publishes "\nkey" (key ARGV[3]) once on every channel of the
  -- first 1,000 entries of the queue (see publish), and deletes the queue:
  -- the lock entered a grace period, and none of them will get it. A waiter
  -- past those is not told: its next look finds the lock ended and not
  -- queued for, and it leaves as a told waiter does.
  local function tellall()
    local seen = {}
    for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, 999)) do
      local ch = string.match(e, ' (%S+)$')
      if ch and not seen[ch] then
        seen[ch] = true
        publish(ch, '\n' .. ARGV[3])
      end
    end
    redis.call('DEL', KEYS[3])
  end

  -- handon hands the lock to the first live waiter of the queue when
  -- queued is true (see serve), and otherwise, or when nobody took it,
  -- deletes the record: the end of a release, a leave and a forced
  -- release. It returns nil, or the error to return.
  local function handon(queued)
    if queued then
      local first, _, err = serve()
      if err then return err end
      if first then return nil end
    end
    redis.call('DEL', KEYS[1])
  end

  return {parse = parse, nexttoken = nexttoken, grant = grant, serve = serve, tellall = tellall, handon = handon}
end
