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
-- server's time in microseconds, so tokens keep increasing after a counter
-- expires or the server restarts empty, as long as the server clock does.
local function grant(owner, ttl, fencettl)
  local token = redis.pcall('INCR', KEYS[2])
  if type(token) ~= 'number' then
    return redis.error_reply('LOCKCORRUPT fencing counter is not an integer')
  end
  if token == 1 then
    local t = redis.call('TIME')
    token = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', token), 'PX', fencettl)
  else
    redis.call('PEXPIRE', KEYS[2], fencettl)
  end
  local v = owner .. ',' .. string.format('%d', token)
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  return v
end
