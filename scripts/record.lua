-- Prepended to every script: the record format and fencing tokens. KEYS[1]
-- is the record, KEYS[2] the fencing counter, KEYS[3] the wait queue: a list
-- of entries "owner ttl-ms inbox" in arrival order.
--
-- A record is "owner,token" while held, "owner,token,q" while held with a
-- queue waiting for it, and "owner,token,ended" during a grace period; owner
-- is 1 to 128 bytes without commas or white space, token 1 to 19 digits
-- without a leading zero. parseRecord in provider.go is the same parser in Go.

-- parse returns owner, token, ended and queued, or nil when v is not a
-- record.
local function parse(v)
  local owner, token, rest = string.match(v, '^([^,%s]+),([1-9]%d*)(.*)$')
  if not owner or #owner > 128 or #token > 19 then return nil end
  if rest == '' then return owner, token, false, false end
  if rest == ',q' then return owner, token, false, true end
  if rest == ',ended' then return owner, token, true, false end
  return nil
end

-- nexttoken returns a fresh fencing token from the counter KEYS[2], or nil
-- and the error to return. A new counter starts at the server's time in
-- microseconds and lives for fencettl ms (INCR keeps its TTL); the next one
-- starts at the time then, higher than any token the old one gave (that
-- would take a grant a microsecond). So tokens keep increasing across
-- counters, and after the server restarts empty, as long as its clock does.
-- A server error (OOM, READONLY...) is returned as it is; only a counter that
-- holds something else than an integer is reported as corrupt.
local function nexttoken(fencettl)
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) == 'table' then
    local msg = token.err or ''
    if string.find(msg, 'not an integer', 1, true) or string.find(msg, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply('LOCKCORRUPT fencing counter is not an integer')
    end
    return nil, token
  end
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', fencettl)
  end
  return string.format('%d', token)
end
