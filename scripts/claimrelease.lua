-- ReleaseClaim: delete the caller's live claim and serve the queue with
-- the weight freed. Takes ARGV owner, "", key, pub (see the layout and the
-- replies at the top of this script, claim.lua). Replies DONE, or LOST
-- when the caller holds no live claim (the queue is served all the same
-- when a claim expired).
local err = load()
if err then return err end
local code = 5
if mine then
  drop(owner, mine)
  code = 1
end
if limit and (code == 1 or reaped) then
  err = serve()
  if err then return failed(err) end
end
return done(code)
