-- QueueClaim: serve the queue, then take a claim for ARGV owner as
-- claimacquire.lua does, or put the caller at the back of the queue, or
-- keep its place there. Takes ARGV owner, ttl, key, pub, weight, limit,
-- entry, queue ttl (see the layout and the replies at the top of this
-- script, claim.lua). Replies HELD with the caller's claim (granted from
-- the queue too: the caller is told with a message as well), QUEUED with
-- its place, or VALUE when its limit is not the name's (which changes
-- nothing but the reaping and serving).
local err = start()
if err then return err end
local ttl, w, entry = tonumber(ARGV[2]), tonumber(ARGV[5]), ARGV[7]
if limit ~= want then
  err = serve()
  if err then return err end
  finish()
  return reply(2, 0)
end
err = serve(entry)
if err then return err end
if changed[owner] then
  -- Granted from the queue, just now.
  local v = changed[owner]
  finish()
  return held(v, ttl)
end
if mine then
  -- Its entry of an earlier look, if any, would be granted again.
  if qlen > 0 then qlen = qlen - redis.call('LREM', KEYS[4], 1, entry) end
  renew(ttl)
  finish()
  return held(mine, ttl)
end
if qlen <= 0 and used + w <= limit then
  local v, e = grant(owner, w, ttl)
  if not v then return e end
  finish()
  return held(v, ttl)
end
local place = false
if qlen > 0 then place = redis.call('LPOS', KEYS[4], entry) end
if not place then
  place = redis.call('RPUSH', KEYS[4], entry) - 1
  qlen = qlen + 1
end
redis.call('PEXPIRE', KEYS[4], ARGV[8])
keep(now + tonumber(ARGV[8]))
finish()
return reply(3, place)
