-- Queue: acquire for a waiter, or put it in the wait queue. Returns
-- {value, pttl} as acquire does, with two more elements when the caller is
-- queued: 1 and its place in the queue (0 first); {false, 0, 1, place} when
-- it joined the queue without reading the record.
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] the caller's queue entry "owner ttl
-- channel", ARGV[4] mode: 'c' a first attempt at a busy key, 'a' a look again
-- (the caller may be queued), 'f' a fair first attempt, '' a first attempt
-- (after 'c' finds no queue, nobody waits, so fair or not is the same);
-- ARGV[5] queue ttl ms, ARGV[6] key (for messages), ARGV[7] how to publish
-- (see publish in record.lua), ARGV[8] now (Unix ms).
local owner, entry, mode = ARGV[1], ARGV[3], ARGV[4]
if mode == 'c' then
  -- A queue exists, so the lock is busy: one command to join it.
  local n = redis.call('RPUSHX', KEYS[3], entry)
  if n > 0 then return {false, 0, 1, n - 1} end
end
local h = lib()
local v
if mode == '' or mode == 'c' then
  local token, err = h.nexttoken()
  if not token then return err end
  v = owner .. ',' .. token .. ',' .. ARGV[8]
  if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
    return {v, tonumber(ARGV[2])}
  end
end
v = redis.call('GET', KEYS[1])
if not v then
  -- Free (a fair attempt, or a look again): the first waiter goes first.
  local first, fv, err = h.serve(ARGV[6], ARGV[7], ARGV[8], entry)
  if err then return err end
  if not first then
    fv, err = h.grant(owner, ARGV[2], ARGV[8], false)
    if not fv then return err end
    return {fv, tonumber(ARGV[2])}
  end
  v = fv
end
local holder, _, ended, queued = h.parse(v)
if not holder then return {v, 0} end
if holder == owner and not ended then
  -- Handed to the caller from the queue, or granted by an attempt whose
  -- reply was lost: it is the caller's, for its ttl from now.
  if mode == 'a' then redis.call('LREM', KEYS[3], 1, entry) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {v, tonumber(ARGV[2])}
end
local pttl = redis.call('PTTL', KEYS[1])
if ended then
  -- A grace period: no waiter will get the lock in it.
  if mode == 'a' then redis.call('LREM', KEYS[3], 1, entry) end
  return {v, pttl}
end
local place = false
if mode == 'a' then place = redis.call('LPOS', KEYS[3], entry) end
if not place then place = redis.call('RPUSH', KEYS[3], entry) - 1 end
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if not queued then
  redis.call('SET', KEYS[1], v .. ',q', 'KEEPTTL')
end
return {v, pttl, 1, place}
