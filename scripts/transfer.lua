-- Transfer: pass ARGV[1]'s live record straight to ARGV[2], with a fresh
-- fencing token, without freeing the key in between (and so without
-- announcing anything); but when another owner is first in the wait queue,
-- release the record and announce it to that owner instead.
-- KEYS[1] record key, KEYS[2] fencing counter, KEYS[3], KEYS[4] wait queue
-- ARGV[1] from, ARGV[2] to, ARGV[3] ttl ms, ARGV[4] fencing counter ttl ms,
-- ARGV[5] channel, ARGV[6] key to announce
-- Returns {1, value} when transferred, {2} when released for the queue's
-- first owner, {0} when the key is empty, {-1, value} when another owner holds
-- it or it has ended, {-2, value} when the value is not a record.
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local owner, _, ended = parse(v)
if not owner then return {-2, v} end
if owner ~= ARGV[1] or ended then return {-1, v} end
local head = queuehead()
if head and head ~= ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[5], ARGV[6] .. '\n' .. head)
  return {2}
end
if head then dequeue(ARGV[2]) end
v = grant(ARGV[2], ARGV[3], ARGV[4])
if type(v) == 'table' then return v end
return {1, v}
