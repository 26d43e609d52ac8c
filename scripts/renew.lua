-- Renew: set the TTL of the caller's live record.
-- Takes ARGV owner, ttl (see the layout and the replies at the top of this
-- script, record.lua). Replies DONE when renewed, EMPTY when the key is
-- empty, VALUE when the caller does not hold it or it has ended.
local v = redis.call('GET', KEYS[1])
if not v then return {0, false, 0, 0} end
--#include owned.lua
if not token or rest == ',ended' then return {2, v, 0, 0} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, false, 0, 0}
