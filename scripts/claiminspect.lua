-- InspectClaims and List: read a counted name's live claims and queue,
-- changing nothing. Takes the first three KEYS of claim.lua (which is not
-- prepended here) and ARGV[1]: 'n' to read the queue's length only
-- (List), else '' for its entries. Replies {limit, holders, queue, qlen,
-- kind}: holders a flat array of owner, value, ms left for each live claim
-- (value "weight,token,since", or the stored value as it is when it is not
-- a claim), queue the entries (false with 'n'), qlen the queue's length,
-- kind the name's (false when it has none stored); {0, {}, {}, 0, false}
-- when the name holds no live claim and no waiter. A waiter whose entry
-- ran out (its deadline is past) is not shown, nor counted. With 'n', a
-- KEYS[1] that is not a hash (a lock's record whose key ends with ':c')
-- replies {-1}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.pcall('HGETALL', KEYS[1])
if h.err then
  if ARGV[1] == 'n' then return {-1} end
  return h
end
local limit, kind, qlen = false, false, 0
local holders = {}
for i = 1, #h, 2 do
  local o, v = h[i], h[i + 1]
  if o == ' limit' then
    limit = v
  elseif o == ' kind' then
    kind = v
  elseif string.sub(o, 1, 3) == ' w ' then
    local dl = tonumber(string.match(v, ' (%d+)$'))
    if not dl or dl > now then qlen = qlen + 1 end
  elseif string.byte(o, 1) ~= 32 then
    local c, dl = string.match(v, '^(%d+,%d+,%d+),(%d+)$')
    if not c then
      holders[#holders + 1], holders[#holders + 2], holders[#holders + 3] = o, v, 1
    elseif tonumber(dl) > now then
      holders[#holders + 1], holders[#holders + 2], holders[#holders + 3] = o, c, tonumber(dl) - now
    end
  end
end
if not limit or (#holders == 0 and qlen == 0) then return {0, {}, {}, 0, false} end
local queue = false
if ARGV[1] ~= 'n' and qlen > 0 then
  queue = {}
  for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local dl = tonumber(string.match(e, '^%S+ %S+ %S+ %S+ (%d+)$'))
    if not dl or dl > now then queue[#queue + 1] = e end -- one not an entry is shown, and reported
  end
  qlen = #queue
end
return {limit, holders, queue, qlen, kind}
