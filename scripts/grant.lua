-- grant stores a new record for owner under KEYS[1] with a fresh fencing token
-- and returns it. It is prepended to the scripts that grant a lock.
-- The token is max(server time in microseconds, last token + 1): it strictly
-- increases while the counter KEYS[2] lives, and keeps increasing after the
-- counter expires or the server restarts empty, as long as the server clock
-- does.
local function grant(owner, ttl, fencettl)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local token = string.format('%d', math.max(now, last + 1))
  redis.call('SET', KEYS[2], token, 'PX', fencettl)
  local v = owner .. ',' .. token
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  return v
end
