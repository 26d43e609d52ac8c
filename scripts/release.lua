-- Release: if ARGV[1] holds the record, hand it to the first live waiter of
-- the queue (when the record says one waits), or delete it.
-- ARGV[1] owner, ARGV[2] key (for messages), ARGV[3] how to publish (see
-- publish in record.lua), ARGV[4] now (Unix ms)
-- Returns 1 when deleted, 2 when handed over, 0 when the key is empty,
-- {-1, value} when another owner holds it, {-2, value} when the value is not a
-- record.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
--#include owned.lua
if not token then
  if lib().parse(v) then return {-1, v} end
  return {-2, v}
end
if rest == ',q' then
  local first, _, err = lib().serve(ARGV[2], ARGV[3], ARGV[4])
  if err then return err end
  if first then return 2 end
end
redis.call('DEL', KEYS[1])
return 1
