-- QueueClaim: serve the queue, then take a claim for ARGV owner as
-- claimacquire.lua does, or put the caller at the back of the queue, or
-- keep its place there. Takes ARGV owner, ttl, key, pub, weight, limit,
-- entry, queue ttl, kind (see the layout and the replies at the top of
-- this script, claim.lua). Replies GRANTED with the caller's claim (granted
-- from the queue too: the caller is told with a message as well), QUEUED
-- with its place, VALUE when its limit or kind is not the name's (which
-- changes nothing but the reaping and serving), or LOCKED when it would
-- make the name of a key that holds a lock's record (which changes
-- nothing).
--
-- An owner is queued once: its entry is kept in the hash (' w '..owner),
-- so a look finds its place with LPOS only when it is queued. Each look
-- writes its entry anew in place (LSET), with the terms it gives (weight,
-- ttl, channel) and a deadline ARGV[8] ms from now; a look after its entry
-- ran out joins at the back. A caller that holds a claim leaves the queue:
-- nobody queued holds one.
local ttl, w = tonumber(ARGV[2]), tonumber(ARGV[5])
local r = opening(ttl)
if r then return r end
if waiting and waitdl <= now then
  -- Its entry ran out (a look that came late): it is gone.
  qlen = qlen - redis.call('LREM', KEYS[3], 1, waiting)
  changed[wfield] = false
  headw, headdl, waiting = nil, nil, nil
end
if mine or (qlen <= 0 and used + w <= limit) then
  if waiting then
    qlen = qlen - redis.call('LREM', KEYS[3], 1, waiting)
    changed[wfield] = false
    headw, headdl = nil, nil
  end
  if mine then
    renew(ttl)
    return granted(short(mine), ttl)
  end
  local v, e = grant(owner, w, ttl)
  if not v then return failed(e) end
  return granted(v, ttl)
end
local place = false
local dl = now + tonumber(ARGV[8])
local e = ARGV[7] .. ' ' .. string.format('%d', dl)
if waiting then
  place = redis.call('LPOS', KEYS[3], waiting)
  if place then redis.call('LSET', KEYS[3], place, e) end
end
if not place then
  qlen = redis.call('RPUSH', KEYS[3], e)
  place = qlen - 1
  if qlen == 1 then relist = true end
end
changed[wfield] = e
if place == 0 then headw, headdl = w, dl end
-- The keys outlive a look by a minute at least, so that the looks of a
-- busy name seldom move their expiry (one PEXPIREAT in about 15 s).
keep(math.max(dl, now + 60000))
return reply(3, place)
