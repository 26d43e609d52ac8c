-- Acquire: store a new record if the key is free, and return the record that
-- holds the key after the call with its remaining TTL.
-- KEYS[1] record key, KEYS[2] fencing counter, KEYS[3], KEYS[4] wait queue
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] fencing counter ttl ms,
-- ARGV[4] queue: "0" none; "-1" in arrival order without joining the queue;
-- a positive ttl ms: in arrival order, joining the queue for that long if the
-- lock is not granted.
-- Returns {value, pttl}; {false, 0} when the key is free but it is another
-- owner's turn. A value that is not a record is returned as it is, unchanged;
-- the caller reports it.
local qttl = tonumber(ARGV[4])
local v = redis.call('GET', KEYS[1])
if v then
  local owner, _, ended = parse(v)
  if owner == ARGV[1] and not ended then
    -- Our own record from an attempt whose reply was lost: renew it.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  elseif owner and not ended and qttl > 0 then
    enqueue(ARGV[1], qttl)
  end
  return {v, redis.call('PTTL', KEYS[1])}
end
if qttl ~= 0 then
  local head = queuehead()
  if head and head ~= ARGV[1] then
    if qttl > 0 then enqueue(ARGV[1], qttl) end
    return {false, 0}
  end
  if head then dequeue(ARGV[1]) end
end
v = grant(ARGV[1], ARGV[2], ARGV[3])
if type(v) == 'table' then return v end
return {v, tonumber(ARGV[2])}
