-- RenewClaim: give the caller's live claim ARGV ttl ms from now. Takes ARGV
-- owner, ttl, key, pub (see the layout and the replies at the top of this
-- script, claim.lua); serves the queue when a claim expired. Replies DONE,
-- or LOST when the caller holds no live claim.
local err = load()
if err then return err end
if limit and reaped then
  err = serve()
  if err then return failed(err) end
end
local code = 5
if mine then
  renew(tonumber(ARGV[2]))
  code = 1
end
return done(code)
