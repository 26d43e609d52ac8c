-- LeaveClaim: take ARGV owner's entry out of the queue; if a claim was
-- granted to it meanwhile, release it; serve the queue. Takes ARGV owner,
-- "", key, pub, "", "", entry (see the layout and the replies at the top of
-- this script, claim.lua). Replies DONE.
local err = load()
if err then return err end
if qlen > 0 then qlen = qlen - redis.call('LREM', KEYS[4], 1, ARGV[7]) end
if mine then drop(owner, mine) end
err = serve()
if err then return err end
finish()
return {1, limit or 0, used, 0, false, false, 0}
