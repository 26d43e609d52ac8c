-- Acquire: store a new record if the key is free and return its token (an
-- integer: the caller knows the rest of the record); otherwise return the
-- record that holds the key after the call with its remaining TTL, as
-- {value, pttl}. A value that is not a record is returned as it is,
-- unchanged; the caller reports it. The token is taken first, so that a free
-- key costs one write: a contended attempt uses up a token, and tokens still
-- increase.
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] fencing counter ttl ms, ARGV[4] now
-- (Unix ms)
-- The fencing token, written out here as record.lua's nexttoken does it
-- (see there): this script runs most often, and a function made on every
-- call costs Redis more than the rest of it.
local token = redis.pcall('INCR', KEYS[2])
if type(token) == 'table' then
  local msg = token.err or ''
  if string.find(msg, 'not an integer', 1, true) or string.find(msg, 'WRONGTYPE', 1, true) then
    return redis.error_reply('LOCKCORRUPT fencing counter is not an integer')
  end
  return token
end
if token == 1 then
  local t = redis.call('TIME')
  token = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
end
local v = ARGV[1] .. ',' .. string.format('%d', token) .. ',' .. ARGV[4]
if redis.call('SET', KEYS[1], v, 'NX', 'PX', ARGV[2]) then
  return token
end
v = redis.call('GET', KEYS[1])
-- Our own live record from an attempt whose reply was lost: renew it. (As
-- in release.lua; any other value goes back to the caller, who reads it.)
local o, mine, since, rest = ARGV[1]
if string.sub(v, 1, #o + 1) == o .. ',' then
  mine, since, rest = string.match(v, '^([1-9]%d*),(%d+)(.*)$', #o + 2)
end
if mine and #mine <= 19 and #since <= 15 and (rest == '' or rest == ',q') then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {v, tonumber(ARGV[2])}
end
return {v, redis.call('PTTL', KEYS[1])}
