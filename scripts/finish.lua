-- Finish: mark the caller's live record ended for ttl ms (a grace period);
-- every waiter leaves the queue and is told (see tellall).
-- Takes ARGV owner, ttl, key, pub (see the layout and the replies at the top
-- of this script, record.lua). Replies DONE when done, EMPTY when the key is
-- empty, VALUE when the caller does not hold it or it has ended.
local v = redis.call('GET', KEYS[1])
if not v then return {0, false, 0, 0} end
--#include owned.lua
if not token or rest == ',ended' then return {2, v, 0, 0} end
redis.call('SET', KEYS[1], o .. ',' .. token .. ',' .. since .. ',ended', 'PX', ARGV[2])
if rest == ',q' then lib().tellall() end
return {1, false, 0, 0}
