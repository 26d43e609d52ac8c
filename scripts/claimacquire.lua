-- AcquireClaim: take a claim of ARGV weight for ARGV owner when it fits and
-- nobody is queued, or renew the caller's own. Takes ARGV owner, ttl, key,
-- pub, weight, limit, "", "", kind (see the layout and the replies at the
-- top of this script, claim.lua); serves the queue first when a waiter's
-- head fits. Replies GRANTED with the caller's claim, or VALUE. A limit or a
-- kind that is not the name's changes nothing (but the reaping and
-- serving): VALUE. A claim that would make the name of a key that holds a
-- lock's record changes nothing: LOCKED.
local ttl, w = tonumber(ARGV[2]), tonumber(ARGV[5])
local r = opening(ttl)
if r then return r end
if mine then
  renew(ttl)
  return granted(short(mine), ttl)
end
if qlen <= 0 and used + w <= limit then
  local v, e = grant(owner, w, ttl)
  if not v then return failed(e) end
  return granted(v, ttl)
end
return reply(2, 0)
