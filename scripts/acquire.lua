-- Acquire: store a new record if the key is free. Takes ARGV owner, ttl,
-- "", "", now, and replies GRANTED with the new record's token (the caller
-- knows the rest), or VALUE with what holds the key after the call (see the
-- layout and the replies in record.lua, which is not prepended here: this
-- script needs none of it). A value that is not a record is returned as it
-- is, unchanged. The token is taken first, so that a free key costs one
-- write: a contended attempt uses up a token, and tokens still increase.
local step = 1
--#include token.lua
if not token then return tokenerr end
local grant = token
local v = ARGV[1] .. ',' .. string.format('%d', grant) .. ',' .. ARGV[5]
if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
  return {4, false, 0, grant}
end
v = redis.call('GET', KEYS[1])
-- Our own live record from an attempt whose reply was lost: renew it. (Any
-- other value goes back to the caller, who reads it.)
--#include owned.lua
if token and rest ~= ',ended' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, v, tonumber(ARGV[2]), 0}
end
return {2, v, redis.call('PTTL', KEYS[1]), 0}
