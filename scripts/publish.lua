-- Included where a script grants a waiter (--#include publish.lua): publish
-- sends msg on ch, the channel of a queue entry, and returns true when
-- nobody heard it and the waiter may be skipped. pub, ARGV[4], is the
-- caller's choice (RedisProvider.publishing): '1' PUBLISH, whose count of
-- receivers is exact (one server); '0' PUBLISH on a Cluster, which counts
-- the receivers of one node only (never skip); '1{t}' or '0{t}' sharded
-- pub/sub: a channel that starts with '{t}', a tag of this key's slot, is
-- sent with SPUBLISH, which only this slot's shard handles and whose count
-- is exact ('1') unless the subscribers may be on replicas ('0'); any other
-- channel (the entry of a process that does not shard) with PUBLISH, never
-- skipped. A server without SPUBLISH (before 7.0) gets PUBLISH instead.
local function publish(ch, msg)
  local pub = ARGV[4]
  local shard = string.sub(pub, 2)
  if shard ~= '' and string.sub(ch, 1, #shard) == shard then
    local n = redis.pcall('SPUBLISH', ch, msg)
    if type(n) == 'number' then return n == 0 and string.sub(pub, 1, 1) == '1' end
  end
  return redis.call('PUBLISH', ch, msg) == 0 and pub == '1'
end
