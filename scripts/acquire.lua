-- Acquire: store a new record if the key is free, and return the record that
-- holds the key after the call with its remaining TTL.
-- KEYS[1] record key, KEYS[2] fencing counter (same hash slot)
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] fencing counter ttl ms
-- Returns {value, pttl}. A value that is not a record is returned as it is;
-- the caller reports it. Records: "owner,token" or "owner,token,ended".
local v = redis.call('GET', KEYS[1])
if v then
  if string.match(v, '^([^,]+),%d+$') == ARGV[1] then
    -- Our own record from an attempt whose reply was lost: renew it.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {v, redis.call('PTTL', KEYS[1])}
end
-- The token is max(server time in microseconds, last token + 1): it strictly
-- increases while the counter lives, and keeps increasing after the counter
-- expires or the server restarts empty, as long as the server clock does.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local token = string.format('%d', math.max(now, last + 1))
redis.call('SET', KEYS[2], token, 'PX', ARGV[3])
v = ARGV[1] .. ',' .. token
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return {v, tonumber(ARGV[2])}
