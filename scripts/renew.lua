-- Renew: set the TTL of ARGV[1]'s live record.
-- ARGV[1] owner, ARGV[2] ttl ms
-- Returns 1 when renewed, 0 when the key is empty, {-1, value} when another
-- owner holds it or it has ended, {-2, value} when the value is not a record.
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
-- Is v owner's live record? (as in release.lua)
local o, token, since, rest = ARGV[1]
if string.sub(v, 1, #o + 1) == o .. ',' then
  token, since, rest = string.match(v, '^([1-9]%d*),(%d+)(.*)$', #o + 2)
end
if not token or #token > 19 or #since > 15 or (rest ~= '' and rest ~= ',q') then
  if lib().parse(v) then return {-1, v} end
  return {-2, v}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
