-- Leave: take the caller's entry out of the queue; if the lock was handed
-- to the caller meanwhile, pass it on or delete it, as release does.
-- Takes ARGV owner, "", key, pub, now, entry (see the layout and the replies
-- at the top of this script, record.lua). Replies DONE.
redis.call('LREM', KEYS[3], 1, ARGV[6])
local v = redis.call('GET', KEYS[1])
if not v then return {1, false, 0, 0} end
local owner, _, ended, queued = lib().parse(v)
if owner ~= ARGV[1] or ended then return {1, false, 0, 0} end
if queued then
  local first, _, err = lib().serve()
  if err then return err end
  if first then return {1, false, 0, 0} end
end
redis.call('DEL', KEYS[1])
return {1, false, 0, 0}
