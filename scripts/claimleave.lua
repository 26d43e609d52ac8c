-- LeaveClaim: take ARGV owner's entry out of the queue; if a claim was
-- granted to it meanwhile, release it; serve the queue. Takes ARGV owner,
-- "", key, pub (see the layout and the replies at the top of this script,
-- claim.lua). Replies DONE.
local err = load()
if err then return err end
if waiting then
  qlen = qlen - redis.call('LREM', KEYS[3], 1, waiting)
  changed[wfield] = false
  headw, headdl = nil, nil
end
if mine then drop(owner, mine) end
if limit then
  err = serve()
  if err then return failed(err) end
end
return done(1)
