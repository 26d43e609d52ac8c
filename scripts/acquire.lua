-- Acquire: store a new record if the key is free, and return the record that
-- holds the key after the call with its remaining TTL, as {value, pttl}. A
-- value that is not a record is returned as it is, unchanged; the caller
-- reports it. The token is taken first, so that a free key costs one write:
-- a contended attempt uses up a token, and tokens still increase.
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] fencing counter ttl ms
local token, err = nexttoken(ARGV[3])
if not token then return err end
local v = ARGV[1] .. ',' .. token
if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
  return {v, tonumber(ARGV[2])}
end
v = redis.call('GET', KEYS[1])
local owner, _, ended = parse(v)
if owner == ARGV[1] and not ended then
  -- Our own record from an attempt whose reply was lost: renew it.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {v, tonumber(ARGV[2])}
end
return {v, redis.call('PTTL', KEYS[1])}
