-- LowerClaim: set the weight of the caller's live claim to ARGV weight when
-- that is less, keeping its token and deadline, and serve the queue with
-- the weight freed. Takes ARGV owner, "", key, pub, weight (see the layout
-- and the replies at the top of this script, claim.lua). Replies DONE, or
-- LOST when the caller holds no live claim.
local err = load()
if err then return err end
local code = 5
if mine then
  local w, token, since, dl = parse(mine)
  local to = tonumber(ARGV[5])
  if to < w then
    set(owner, to .. ',' .. token .. ',' .. since .. ',' .. string.format('%d', dl), dl)
    used = used - (w - to)
  end
  code = 1
end
if code == 1 or reaped then
  err = serve()
  if err then return failed(err) end
end
return done(code)
