-- Leave: take the entry ARGV[2] out of the queue; if the lock was handed to
-- ARGV[1] meanwhile, pass it on or delete it, as release does.
-- ARGV[1] owner, ARGV[2] entry, ARGV[3] key, ARGV[4] how to publish (see
-- publish in record.lua), ARGV[5] now (Unix ms)
redis.call('LREM', KEYS[3], 1, ARGV[2])
local v = redis.call('GET', KEYS[1])
if not v then return {1} end
local owner, _, ended, queued = lib().parse(v)
if owner ~= ARGV[1] or ended then return {1} end
if queued then
  local first, _, err = lib().serve(ARGV[3], ARGV[4], ARGV[5])
  if err then return err end
  if first then return {1} end
end
redis.call('DEL', KEYS[1])
return {1}
