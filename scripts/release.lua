-- Release: if the caller holds the record, hand it to the first live waiter
-- of the queue (when the record says one waits), or delete it.
-- Takes ARGV owner, "", key, pub, now (see the layout and the replies at the
-- top of this script, record.lua). Replies DONE when deleted or handed over,
-- EMPTY when the key is empty, VALUE when the caller does not hold it.
local v = redis.call('GET', KEYS[1])
if not v then return {0, false, 0, 0} end
--#include owned.lua
if not token then return {2, v, 0, 0} end
if rest == ',q' then return lib().handon(true) or {1, false, 0, 0} end
redis.call('DEL', KEYS[1])
return {1, false, 0, 0}
