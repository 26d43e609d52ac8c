-- Release: delete the record if ARGV[1] owns it, then announce the end.
-- KEYS[1] record key, KEYS[2] fencing counter, KEYS[3], KEYS[4] wait queue
-- ARGV[1] owner, ARGV[2] channel, ARGV[3] key to announce
-- Returns {1} when released, {0} when the key is empty, {-1, value} when
-- another owner holds it, {-2, value} when the value is not a record.
local v = redis.call('GET', KEYS[1])
if not v then return {0} end
local owner = parse(v)
if not owner then return {-2, v} end
if owner ~= ARGV[1] then return {-1, v} end
redis.call('DEL', KEYS[1])
announce(ARGV[2], ARGV[3])
return {1}
