-- ForceRelease: delete the record whoever holds it, or hand it to the first
-- live waiter of the queue, as release does for its owner.
-- Takes ARGV "", "", key, pub, now (see the layout and the replies at the
-- top of this script, record.lua). Replies EMPTY when the key is empty, or
-- VALUE with the value found and its pttl: removed when it is a record, left
-- as it is when not.
local v = redis.call('GET', KEYS[1])
if not v then return {0, false, 0, 0} end
local h = lib()
local owner, _, ended, queued = h.parse(v)
if not owner then return {2, v, 0, 0} end
local pttl = redis.call('PTTL', KEYS[1])
return h.handon(queued) or {2, v, pttl, 0}
