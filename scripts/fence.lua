-- Fence: the check of a fenced write (RedisFence). The Go side puts the
-- caller's body before this text, as the function fenced(KEYS, ARGV).
-- KEYS[1] the fence (the high-water mark: the greatest token accepted, a
-- decimal string, never expiring), KEYS[2..] the body's keys.
-- ARGV[1] the token (decimal, no leading zeros), ARGV[2..] the body's
-- arguments.
-- Replies "LOCK_STALE_TOKEN <mark>" (an error) when the token is below the
-- mark, "LOCK_BAD_FENCE <value>" when the fence holds something else than a
-- token; else it sets the mark to the token and returns the body's reply.
-- Tokens are compared as decimal strings (length, then bytes): exact for
-- every 64-bit token, where Lua's numbers are not above 2^53.
local mark = redis.call('GET', KEYS[1])
local token = ARGV[1]
if mark then
  if not string.match(mark, '^[1-9]%d*$') or #mark > 20
      or (#mark == 20 and mark > '18446744073709551615') then
    return redis.error_reply('LOCK_BAD_FENCE ' .. string.sub(mark, 1, 100))
  end
  if #token < #mark or (#token == #mark and token < mark) then
    return redis.error_reply('LOCK_STALE_TOKEN ' .. mark)
  end
end
if mark ~= token then
  redis.call('SET', KEYS[1], token)
end
local keys, args = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do args[i - 1] = ARGV[i] end
return fenced(keys, args)
