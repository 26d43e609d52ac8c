-- Shared by every script (prepended to each): the record format and grants.
-- A record is "owner,token" while held and "owner,token,ended" during a grace
-- period; owner is 1 to 128 bytes without commas or white space, token 1 to
-- 19 digits without a leading zero. parseRecord in provider.go is the same
-- parser in Go.

-- parse returns owner, token and whether the record has ended, or nil when v
-- is not a record.
local function parse(v)
  local owner, token, rest = string.match(v, '^([^,%s]+),([1-9]%d*)(.*)$')
  if not owner or #owner > 128 or #token > 19 then return nil end
  if rest == '' then return owner, token, false end
  if rest == ',ended' then return owner, token, true end
  return nil
end

-- grant stores a new record for owner under KEYS[1] with a fresh fencing
-- token from the counter KEYS[2], and returns it. A new counter starts at the
-- server's time in microseconds and lives for fencettl (INCR keeps its TTL);
-- the next one starts at the time then, which is higher than any token the
-- old one gave (that would take a grant a microsecond). So tokens keep
-- increasing across counters, and after the server restarts empty, as long as
-- the server clock does.
local function grant(owner, ttl, fencettl)
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) ~= 'number' then
    return redis.error_reply('LOCKCORRUPT fencing counter is not an integer')
  end
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', fencettl)
  end
  local v = owner .. ',' .. string.format('%d', token)
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  return v
end

-- The wait queue of Options.Fair: KEYS[3] orders owners by arrival, KEYS[4]
-- holds the server time (ms) after which an owner that has not looked again
-- is dropped. Both expire with their last owner.
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- queuehead drops the owners that stopped looking and returns the first one
-- left, or nil.
local function queuehead()
  if redis.call('EXISTS', KEYS[3]) == 0 then return nil end
  local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', nowms())
  for _, o in ipairs(gone) do
    redis.call('ZREM', KEYS[3], o)
    redis.call('ZREM', KEYS[4], o)
  end
  return redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end

-- enqueue puts owner at the back of the queue, or keeps it where it is, and
-- keeps it there for ttl ms more.
local function enqueue(owner, ttl)
  if not redis.call('ZSCORE', KEYS[3], owner) then
    local t = redis.call('TIME')
    redis.call('ZADD', KEYS[3], tonumber(t[1]) * 1000000 + tonumber(t[2]), owner)
  end
  redis.call('ZADD', KEYS[4], nowms() + ttl, owner)
  -- The queue lives as long as its longest-lived owner.
  if redis.call('PTTL', KEYS[3]) < tonumber(ttl) then
    redis.call('PEXPIRE', KEYS[3], ttl)
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
end

-- dequeue takes owner out of the queue.
local function dequeue(owner)
  redis.call('ZREM', KEYS[3], owner)
  redis.call('ZREM', KEYS[4], owner)
end

-- announce publishes "key\nnext" on channel: the lock has ended, and it is
-- next's turn (empty: anyone's).
local function announce(channel, key)
  redis.call('PUBLISH', channel, key .. '\n' .. (queuehead() or ''))
end
