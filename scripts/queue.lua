-- Queue: acquire for a waiter, or put it in the wait queue.
-- Takes ARGV owner, ttl, key, pub, now, entry, mode, queue ttl (see the
-- layout and the replies at the top of this script, record.lua); mode is
-- 'c' a first attempt at a busy key, 'a' a look again (the caller may be
-- queued), 'f' a fair first attempt, '' a first attempt (after 'c' finds no
-- queue, nobody waits, so fair or not is the same). Replies VALUE with what
-- holds the key after the call (the caller's own record when it got the
-- lock), as acquire does, or QUEUED with the caller's place.
local owner, entry, mode = ARGV[1], ARGV[6], ARGV[7]
if mode == 'c' then
  -- A queue exists, so the lock is busy: one command to join it.
  local n = redis.call('RPUSHX', KEYS[3], entry)
  if n > 0 then return {3, false, 0, n - 1} end
end
local h = lib()
local v
if mode == '' or mode == 'c' then
  local token, err = h.nexttoken()
  if not token then return err end
  v = owner .. ',' .. token .. ',' .. ARGV[5]
  if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
    return {2, v, tonumber(ARGV[2]), 0}
  end
end
v = redis.call('GET', KEYS[1])
if not v then
  -- Free (a fair attempt, or a look again): the first waiter goes first.
  local first, fv, err = h.serve(entry)
  if err then return err end
  if not first then
    fv, err = h.grant(owner, ARGV[2], false)
    if not fv then return err end
    return {2, fv, tonumber(ARGV[2]), 0}
  end
  v = fv
end
local holder, _, ended, queued = h.parse(v)
if not holder then return {2, v, 0, 0} end
if holder == owner and not ended then
  -- Handed to the caller from the queue, or granted by an attempt whose
  -- reply was lost: it is the caller's, for its ttl from now.
  if mode == 'a' then redis.call('LREM', KEYS[3], 1, entry) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {2, v, tonumber(ARGV[2]), 0}
end
local pttl = redis.call('PTTL', KEYS[1])
if ended then
  -- A grace period: no waiter will get the lock in it.
  if mode == 'a' then redis.call('LREM', KEYS[3], 1, entry) end
  return {2, v, pttl, 0}
end
local place = false
if mode == 'a' then place = redis.call('LPOS', KEYS[3], entry) end
if not place then place = redis.call('RPUSH', KEYS[3], entry) - 1 end
redis.call('PEXPIRE', KEYS[3], ARGV[8])
if not queued then
  redis.call('SET', KEYS[1], v .. ',q', 'KEEPTTL')
end
return {3, v, pttl, place}
