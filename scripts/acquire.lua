-- Acquire: store a new record if the key is free and return its token (an
-- integer: the caller knows the rest of the record); otherwise return the
-- record that holds the key after the call with its remaining TTL, as
-- {value, pttl}. A value that is not a record is returned as it is,
-- unchanged; the caller reports it. The token is taken first, so that a free
-- key costs one write: a contended attempt uses up a token, and tokens still
-- increase.
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] now (Unix ms)
--#include token.lua
if not token then return tokenerr end
local grant = token
local v = ARGV[1] .. ',' .. string.format('%d', grant) .. ',' .. ARGV[3]
if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
  return grant
end
v = redis.call('GET', KEYS[1])
-- Our own live record from an attempt whose reply was lost: renew it. (Any
-- other value goes back to the caller, who reads it.)
--#include owned.lua
if token and rest ~= ',ended' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {v, tonumber(ARGV[2])}
end
return {v, redis.call('PTTL', KEYS[1])}
