-- Inspect: read the record, its remaining TTL and the length of its queue.
-- Takes no ARGV; replies EMPTY, or VALUE with n the length of the queue (see
-- the replies in record.lua, which is not prepended here). Changes nothing.
local v = redis.call('GET', KEYS[1])
if not v then return {0, false, 0, 0} end
return {2, v, redis.call('PTTL', KEYS[1]), redis.call('LLEN', KEYS[3])}
