-- InspectClaims and List: read a counted name's live claims and queue,
-- changing nothing. Takes the KEYS of claim.lua (not prepended here) and
-- ARGV[1]: 'n' to read the queue's length only (List), else '' for its
-- entries. Replies {limit, holders, queue, qlen}: holders a flat array of
-- owner, value, ms left for each live claim (value as in claim.lua), queue
-- the entries (false with 'n'), qlen the queue's length; {0, {}, {}, 0}
-- when the name holds no live claim and no waiter. With 'n', a KEYS[1]
-- that is not a hash (a lock's record whose key ends with ':c') replies
-- {-1}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = redis.pcall('HGET', KEYS[1], ' limit')
if type(limit) == 'table' then
  if ARGV[1] == 'n' then return {-1} end
  return limit
end
if not limit then return {0, {}, {}, 0} end
local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
local holders = {}
if #live > 0 then
  local owners = {}
  for i = 1, #live, 2 do owners[#owners + 1] = live[i] end
  local vs = redis.call('HMGET', KEYS[1], unpack(owners))
  for i, o in ipairs(owners) do
    if vs[i] then
      holders[#holders + 1] = o
      holders[#holders + 1] = vs[i]
      holders[#holders + 1] = tonumber(live[2 * i]) - now
    end
  end
end
local qlen = redis.call('LLEN', KEYS[4])
if #holders == 0 and qlen == 0 then return {0, {}, {}, 0} end
local queue = false
if ARGV[1] ~= 'n' and qlen > 0 then queue = redis.call('LRANGE', KEYS[4], 0, -1) end
return {limit, holders, queue, qlen}
