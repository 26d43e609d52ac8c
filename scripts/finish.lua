-- Finish: mark ARGV[1]'s live record ended for ARGV[2] ms (a grace period);
-- every waiter leaves the queue and is told.
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] key (for messages), ARGV[4] how to
-- publish (see publish in record.lua)
-- Returns 1 when done, 0 when the key is empty, {-1, value} when another
-- owner holds it or it has ended, {-2, value} when the value is not a record.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
--#include owned.lua
if not token or rest == ',ended' then
  if lib().parse(v) then return {-1, v} end
  return {-2, v}
end
redis.call('SET', KEYS[1], o .. ',' .. token .. ',' .. since .. ',ended', 'PX', ARGV[2])
if rest == ',q' then lib().tellall(ARGV[3], ARGV[4]) end
return 1
