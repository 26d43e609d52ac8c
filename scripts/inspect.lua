-- Inspect: read the record, its remaining TTL and the length of its queue,
-- as {value or false, pttl, waiters}. Changes nothing.
local v = redis.call('GET', KEYS[1])
if not v then return {false, 0, 0} end
return {v, redis.call('PTTL', KEYS[1]), redis.call('LLEN', KEYS[3])}
