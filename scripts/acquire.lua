-- Acquire: store a new record if the key is free, and return the record that
-- holds the key after the call with its remaining TTL.
-- KEYS[1] record key, KEYS[2] fencing counter (same hash slot)
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] fencing counter ttl ms
-- Returns {value, pttl}. A value that is not a record is returned as it is,
-- unchanged; the caller reports it.
local v = redis.call('GET', KEYS[1])
if v then
  local owner, _, ended = parse(v)
  if owner == ARGV[1] and not ended then
    -- Our own record from an attempt whose reply was lost: renew it.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {v, redis.call('PTTL', KEYS[1])}
end
v = grant(ARGV[1], ARGV[2], ARGV[3])
if type(v) == 'table' then return v end
return {v, tonumber(ARGV[2])}
