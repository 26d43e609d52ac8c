-- ForceRelease: delete the record whoever holds it, or hand it to the first
-- live waiter of the queue, as release does for its owner.
-- ARGV[1] key (for messages), ARGV[2] how to publish (see publish in
-- record.lua), ARGV[3] now (Unix ms)
-- Returns {0} when the key is empty, {1, value, pttl} when the record value
-- was removed, {-2, value} when the value is not a record (left as it is).
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local h = lib()
local owner, _, ended, queued = h.parse(v)
if not owner then return {-2, v} end
local pttl = redis.call('PTTL', KEYS[1])
if queued then
  local first, _, err = h.serve(ARGV[1], ARGV[2], ARGV[3])
  if err then return err end
  if first then return {1, v, pttl} end
end
redis.call('DEL', KEYS[1])
return {1, v, pttl}
