-- Prepended to every script but acquire.lua (which needs none of it): lib()
-- makes the functions that read and grant records and serve the wait queue.
-- It makes them only when a script needs them: a function made on every
-- call of a script costs Redis more than the rest of an uncontended
-- acquire, release or renewal, which read a record of their own owner
-- inline (as release.lua shows) and call lib() only for anything else.
-- KEYS[1] is the record, KEYS[2] the fencing counter of its slot, KEYS[3] the wait
-- queue: a list of entries "owner ttl-ms channel" in arrival order, channel
-- the waiter's inbox or, with sharded pub/sub on a Cluster, its shard
-- channel in this key's slot (see publish).
--
-- A record is "owner,token,since" while held, "owner,token,since,q" while
-- held with a queue waiting for it, and "owner,token,since,ended" during a
-- grace period; owner is 1 to 128 bytes without commas or white space, token
-- 1 to 19 digits without a leading zero, since the grant's time in Unix
-- milliseconds, 1 to 15 digits, by the clock of the process whose call
-- granted it (ARGV now). parseRecord in provider.go is the same parser in Go.

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
    --#include token.lua
    if not token then return nil, tokenerr end
    return string.format('%d', token)
  end

  -- grant stores a new record for owner with a fresh token, granted at now,
  -- marked queued when queued is true, and returns its value, or nil and the
  -- error to return.
  local function grant(owner, ttl, now, queued)
    local token, err = nexttoken()
    if not token then return nil, err end
    local v = owner .. ',' .. token .. ',' .. now
    if queued then v = v .. ',q' end
    redis.call('SET', KEYS[1], v, 'PX', ttl)
    return v
  end

  -- publish sends msg on ch, the channel of a queue entry, and returns true
  -- when nobody heard it and the waiter may be skipped (see serve). pub is
  -- the caller's choice (RedisProvider.publishing): '1' PUBLISH, whose
  -- count of receivers is exact (one server); '0' PUBLISH on a Cluster,
  -- which counts the receivers of one node only (never skip); '1{t}' or
  -- '0{t}' sharded pub/sub: a channel that starts with '{t}', a tag of this
  -- key's slot, is sent with SPUBLISH, which only this slot's shard handles
  -- and whose count is exact ('1') unless the subscribers may be on
  -- replicas ('0'); any other channel (the entry of a process that does
  -- not shard) with PUBLISH, never skipped. A server without SPUBLISH
  -- (before 7.0) gets PUBLISH instead.
  local function publish(ch, msg, pub)
    local shard = string.sub(pub, 2)
    if shard ~= '' and string.sub(ch, 1, #shard) == shard then
      local n = redis.pcall('SPUBLISH', ch, msg)
      if type(n) == 'number' then return n == 0 and string.sub(pub, 1, 1) == '1' end
    end
    return redis.call('PUBLISH', ch, msg) == 0 and pub == '1'
  end

  -- serve hands the lock to the first waiter in the queue: it stores a record
  -- for it (marked queued: others may follow) and publishes "value ttl\nkey" on
  -- its channel. A waiter whose inbox nobody listens to any more (the message
  -- reaches no one) is skipped when pub says the count is exact (see
  -- publish). It returns the owner and the value of the new record; nothing
  -- when the queue is empty, or 64 entries were skipped (the record is then
  -- unchanged, or deleted if it had been handed to a dead waiter); or nil,
  -- nil and an error. The entry me (if given) is granted without a message.
  local function serve(key, pub, now, me)
    -- At most 64 entries a call: past that the key is left free, and the
    -- next waiter's look serves the rest of the queue.
    for _ = 1, 64 do
      local e = redis.call('LPOP', KEYS[3])
      if not e then return nil end
      local owner, ttl, ch = string.match(e, '^(%S+) (%d+) (%S+)$')
      if owner then
        local v, err = grant(owner, ttl, now, true)
        if not v then return nil, nil, err end
        if e == me then return owner, v end
        if not publish(ch, v .. ' ' .. ttl .. '\n' .. key, pub) then return owner, v end
        redis.call('DEL', KEYS[1])
      end
    end
    return nil
  end

  -- tellall publishes "\nkey" once on every channel of the queue (see
  -- publish) and deletes the queue: the lock entered a grace period, and
  -- none of them will get it.
  local function tellall(key, pub)
    local seen = {}
    for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
      local ch = string.match(e, ' (%S+)$')
      if ch and not seen[ch] then
        seen[ch] = true
        publish(ch, '\n' .. key, pub)
      end
    end
    redis.call('DEL', KEYS[3])
  end

  return {parse = parse, nexttoken = nexttoken, grant = grant, serve = serve, tellall = tellall}
end
