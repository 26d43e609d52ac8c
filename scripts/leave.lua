-- Leave: take the caller's entry out of the queue; if the lock was handed
-- to the caller meanwhile, pass it on or delete it, as release does.
-- Takes ARGV owner, "", key, pub, now, entry (see the layout and the replies
-- at the top of this script, record.lua). Replies DONE.
redis.call('LREM', KEYS[3], 1, ARGV[6])
local v = redis.call('GET', KEYS[1])
if not v then return {1, false, 0, 0} end
local h = lib()
local owner, _, ended, queued = h.parse(v)
if owner ~= ARGV[1] or ended then return {1, false, 0, 0} end
return h.handon(queued) or {1, false, 0, 0}
