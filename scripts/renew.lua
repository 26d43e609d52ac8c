-- Renew: set the TTL of ARGV[1]'s live record.
-- ARGV[1] owner, ARGV[2] ttl ms
-- Returns 1 when renewed, 0 when the key is empty, {-1, value} when another
-- owner holds it or it has ended, {-2, value} when the value is not a record.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
--#include owned.lua
if not token or rest == ',ended' then
  if lib().parse(v) then return {-1, v} end
  return {-2, v}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
