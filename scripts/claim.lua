-- Prepended to every script of the counted names but claiminspect.lua: what
-- they take and reply, the state of one name as the call reads and changes
-- it, and the functions that reap, grant and serve. The counted names have
-- a layout and replies of their own, not those of record.lua; the fencing
-- counter is the locks' (token.lua).
--
-- KEYS (every one in the hash slot of the name's record key R, see
-- RedisKeys):
--   KEYS[1] R..':c', a hash: each live claim, owner -> "weight,token,since"
--     (since the grant's time in Unix ms by the server's clock), and the
--     fields ' limit', ' used' and ' until' (the name's limit, the weight
--     its claims hold, and when the keys expire, in Unix ms; a space, which
--     no owner has, keeps them apart)
--   KEYS[2] the fencing counter of the slot (see token.lua)
--   KEYS[3] R..':cd', a sorted set: each claim's owner, scored with its
--     deadline in Unix ms by the server's clock (TIME)
--   KEYS[4] R..':cq', the queue: a list of entries "owner weight ttl-ms
--     channel" in arrival order, channel as in record.lua's queue (see
--     publish)
-- The three keys live and die together: the hash and the sorted set expire
-- at ' until', no earlier than the last deadline and the queue's expiry,
-- and every call that leaves the name without claims and waiters deletes
-- all three.
--
-- ARGV has one layout; a script is passed the first positions it needs,
-- with "" in those it skips:
--   ARGV[1] owner: the caller's owner
--   ARGV[2] ttl: the caller's ttl, in ms
--   ARGV[3] key: the name, for the messages (see serve)
--   ARGV[4] pub: how to publish (see publish)
--   ARGV[5] weight: the caller's weight (the new weight, for lower)
--   ARGV[6] limit: the caller's limit
--   ARGV[7] entry: the caller's queue entry
--   ARGV[8] queue ttl: how long the queue outlives its last look, in ms
--
-- Every script but claiminspect.lua replies {code, limit, used, n, owner,
-- value, pttl}, decoded by decodeClaim in provider_redis_claims.go: limit
-- and used are the name's after the call (limit 0 when it holds nothing),
-- and
--   code 1 DONE: the call did what it was asked.
--   code 2 VALUE: the caller holds no claim; owner, value and pttl are
--     those of the live claim that expires first (false, false, 0 when
--     none is live).
--   code 3 QUEUED: the caller is in the queue at place n (0 first); owner,
--     value and pttl as for VALUE.
--   code 4 HELD: the caller holds the claim value, with pttl ms left.
--   code 5 LOST: the caller holds no live claim, and nothing changed.
--   code 6 CORRUPT: value is a stored value that is not one of these
--     scripts'; nothing was written.
-- A claim's value is "weight,token,since": weight 1 to 4 digits, token 1 to
-- 19 digits, since 1 to 15 digits, none with a leading zero but since.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, want = ARGV[1], tonumber(ARGV[6])

-- The name as this call sees it. Writes wait in changed (owner -> value,
-- or false: deleted) and deadline (owner -> ms, or false: deleted) until
-- finish, which makes them; so a stored value found corrupt stops the call
-- before it wrote anything.
local limit, used, qlen = nil, 0, 0 -- limit nil: the name holds nothing
local existed = false -- the hash was there
local fresh = false -- the limit is this call's: write it
local reaped = false -- a claim expired
local mine = nil -- the caller's live claim, as stored
local changed, deadline = {}, {}
local exp = 0 -- the keys live at least until then (ms)
local expires = 0 -- when they expire: ' until'
local base = 0 -- the weight of the claims that outlive the reaping

-- parse returns the weight, token and since of a claim's value, or nil.
local function parse(v)
  local w, token, since = string.match(v, '^([1-9]%d*),([1-9]%d*),(%d+)$')
  if not w or #w > 4 or #token > 19 or #since > 15 then return nil end
  return tonumber(w), token, since
end

local function corrupt(v)
  return {6, 0, 0, 0, false, v, 0}
end

-- load reads the limit, the weight used and the caller's claim, reaps the
-- claims whose deadline passed (their weight is free), and reads the
-- queue's length. A name left without claims and waiters holds nothing:
-- limit is nil. It returns a CORRUPT reply, or nil.
local function load()
  local st = redis.call('HMGET', KEYS[1], ' limit', ' used', ' until', owner)
  if not st[1] then return nil end
  existed = true
  if not string.match(st[1], '^[1-9]%d?%d?%d?$') then return corrupt(st[1]) end
  for i = 2, 3 do
    if not st[i] or not string.match(st[i], '^%d+$') or #st[i] > 15 then return corrupt(tostring(st[i])) end
  end
  limit, used, expires = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  if st[4] then
    if not parse(st[4]) then return corrupt(st[4]) end
    mine = st[4]
  end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #gone > 0 then
    local vs = redis.call('HMGET', KEYS[1], unpack(gone))
    for i = 1, #gone do
      local o = gone[i]
      if vs[i] then
        local w = parse(vs[i])
        if not w then return corrupt(vs[i]) end
        used = used - w
      end
      changed[o], deadline[o] = false, false
      if o == owner then mine = nil end
    end
    reaped = true
  end
  if used < 0 then used = 0 end
  base = used
  qlen = redis.call('LLEN', KEYS[4])
  if used == 0 and qlen == 0 then limit = nil end
  return nil
end

-- start begins a call that may take a claim or join the queue: the
-- caller's limit becomes the name's when it holds nothing.
local function start()
  local err = load()
  if err then return err end
  if not limit then limit, fresh = want, true end
  return nil
end

-- holds returns the value of o's claim, or a false value.
local function holds(o)
  local v = changed[o]
  if v == nil then v = redis.call('HEXISTS', KEYS[1], o) == 1 end
  return v
end

-- keep makes the keys live at least until ms.
local function keep(ms)
  if ms > exp then exp = ms end
end

-- grant gives o a claim of weight w for ttl ms, with a fresh token, and
-- returns its value, token and since, or nil and the error to return.
local function grant(o, w, ttl)
  --#include token.lua
  if not token then return nil, tokenerr end
  token = string.format('%d', token)
  local since = string.format('%d', now)
  local v = w .. ',' .. token .. ',' .. since
  changed[o], deadline[o] = v, now + ttl
  used = used + w
  keep(now + ttl)
  return v, token, since
end

-- drop deletes o's claim, of value v.
local function drop(o, v)
  changed[o], deadline[o] = false, false
  used = used - parse(v)
end

-- publish sends msg on ch, the channel of a queue entry, and returns true
-- when nobody heard it and the waiter may be skipped. It is the publish of
-- record.lua: ARGV[4] '1' PUBLISH with an exact count, '0' PUBLISH never
-- skipped, '1{t}' or '0{t}' SPUBLISH on a channel that starts with '{t}', a
-- tag of this slot (PUBLISH on any other, or when the server has no
-- SPUBLISH).
local function publish(ch, msg)
  local pub = ARGV[4]
  local shard = string.sub(pub, 2)
  if shard ~= '' and string.sub(ch, 1, #shard) == shard then
    local n = redis.pcall('SPUBLISH', ch, msg)
    if type(n) == 'number' then return n == 0 and string.sub(pub, 1, 1) == '1' end
  end
  return redis.call('PUBLISH', ch, msg) == 0 and pub == '1'
end

-- serve grants the head of the queue a claim of its weight and ttl while it
-- fits, and publishes "owner,token,since ttl weight\nkey" on its channel,
-- key ARGV[3]: the first head that does not fit stops it, so that nobody
-- overtakes it. A waiter whose message nobody heard is skipped (see
-- publish), its claim taken back, unless its entry is me, the caller's; an
-- entry that is not one, or whose owner holds a claim already, is dropped.
-- At most 64 entries a call: the next call serves the rest. It returns nil,
-- or the error to return.
local function serve(me)
  for _ = 1, 64 do
    if qlen <= 0 then return nil end
    local e = redis.call('LINDEX', KEYS[4], 0)
    if not e then
      qlen = 0
      return nil
    end
    local o, w, ttl, ch = string.match(e, '^(%S+) ([1-9]%d?%d?%d?) ([1-9]%d*) (%S+)$')
    w = tonumber(w)
    if o and w <= limit and not holds(o) then
      if used + w > limit then return nil end
      local v, token, since = grant(o, w, tonumber(ttl))
      if not v then return token end
      local msg = o .. ',' .. token .. ',' .. since .. ' ' .. ttl .. ' ' .. w .. '\n' .. ARGV[3]
      if publish(ch, msg) and e ~= me then drop(o, v) end
    end
    redis.call('LPOP', KEYS[4])
    qlen = qlen - 1
  end
  return nil
end

-- renew gives the caller's claim ttl ms from now.
local function renew(ttl)
  deadline[owner] = now + ttl
  keep(now + ttl)
end

-- finish makes the call's writes: it deletes the name's keys when it holds
-- no claim and no waiter, and otherwise writes the claims changed, the
-- limit and the weight used, and makes the keys live at least until exp.
local function finish()
  if used <= 0 and qlen <= 0 then
    if existed then redis.call('DEL', KEYS[1], KEYS[3], KEYS[4]) end
    limit = nil
    return
  end
  local hset, hdel, zadd, zrem = {}, {}, {}, {}
  for o, v in pairs(changed) do
    if v then
      hset[#hset + 1], hset[#hset + 2] = o, v
    else
      hdel[#hdel + 1] = o
    end
  end
  for o, ms in pairs(deadline) do
    if ms then
      zadd[#zadd + 1], zadd[#zadd + 2] = string.format('%d', ms), o
    else
      zrem[#zrem + 1] = o
    end
  end
  if #hdel > 0 then redis.call('HDEL', KEYS[1], unpack(hdel)) end
  if #zrem > 0 then redis.call('ZREM', KEYS[3], unpack(zrem)) end
  local e = math.max(exp, expires)
  if #hset > 0 or #hdel > 0 or fresh or e > expires then
    hset[#hset + 1], hset[#hset + 2] = ' limit', string.format('%d', limit)
    hset[#hset + 1], hset[#hset + 2] = ' used', string.format('%d', used)
    hset[#hset + 1], hset[#hset + 2] = ' until', string.format('%d', e)
    redis.call('HSET', KEYS[1], unpack(hset))
  end
  if #zadd > 0 then redis.call('ZADD', KEYS[3], unpack(zadd)) end
  if e > expires then redis.call('PEXPIREAT', KEYS[1], string.format('%d', e)) end
  -- The sorted set is made anew when no claim outlived the reaping.
  if used > 0 and (e > expires or (base == 0 and #zadd > 0)) then
    redis.call('PEXPIREAT', KEYS[3], string.format('%d', e))
  end
end

-- first returns the owner, value and ms left of the live claim that expires
-- first, or false, false, 0; after finish.
local function first()
  if used <= 0 then return false, false, 0 end
  local f = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if #f == 0 then return false, false, 0 end
  local v = redis.call('HGET', KEYS[1], f[1])
  if not v then return false, false, 0 end
  return f[1], v, tonumber(f[2]) - now
end

-- reply returns the reply code with n, and the live claim that expires
-- first (VALUE, QUEUED); after finish.
local function reply(code, n)
  local o, v, pttl = first()
  return {code, limit or 0, used, n, o, v, pttl}
end

-- held returns the HELD reply of the caller's claim v, with pttl ms left;
-- after finish.
local function held(v, pttl)
  return {4, limit or 0, used, 0, owner, v, pttl}
end

