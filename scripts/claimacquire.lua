-- AcquireClaim: take a claim of ARGV weight for ARGV owner when it fits and
-- nobody is queued, or renew the caller's own. Takes ARGV owner, ttl, key,
-- pub, weight, limit (see the layout and the replies at the top of this
-- script, claim.lua); serves the queue first when a waiter's head fits.
-- Replies HELD with the caller's claim, or VALUE. A limit that is not the
-- name's changes nothing (but the reaping and serving): VALUE.
local err = start()
if err then return err end
local ttl, w = tonumber(ARGV[2]), tonumber(ARGV[5])
err = serve()
if err then return failed(err) end
if limit ~= want then return reply(2, 0) end
if changed[owner] then
  -- The caller was queued, and granted from the queue just now.
  return held(short(changed[owner]), ttl)
end
if mine then
  renew(ttl)
  return held(short(mine), ttl)
end
if qlen <= 0 and used + w <= limit then
  local v, e = grant(owner, w, ttl)
  if not v then return failed(e) end
  return held(v, ttl)
end
return reply(2, 0)
