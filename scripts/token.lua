-- Included where a script takes fencing tokens (--#include token.lua), after
-- a local step, how many: token is the last of step fresh tokens from the
-- counter KEYS[2] (INCR when step is 1, else INCRBY), a number, or nil with
-- tokenerr the error to return. The counter serves every lock of its hash
-- slot and key prefix and never expires (see provider_redis_token.go): when
-- it does not exist yet (or was lost), its first tokens start at the
-- server's time in microseconds plus 2^52, above every token an earlier
-- counter gave as long as the clock does not step back. A server error
-- (OOM, READONLY...) is returned as it is; only a counter that holds
-- something else than an integer is reported as corrupt: "LOCKCORRUPT
-- <value>", its first 100 bytes, or a description of a value of another
-- type (the Go side names the lock and the counter). Written out where it
-- is used, not made a function: a function made on every call costs Redis
-- more than the rest of an uncontended acquire.
local token, tokenerr = nil, nil
if step == 1 then
  token = redis.pcall('INCR', KEYS[2])
else
  token = redis.pcall('INCRBY', KEYS[2], step)
end
if type(token) == 'table' then
  tokenerr, token = token, nil
  local msg = tokenerr.err or ''
  if string.find(msg, 'WRONGTYPE', 1, true) then
    tokenerr = redis.error_reply('LOCKCORRUPT (a value of another Redis type)')
  elseif string.find(msg, 'not an integer', 1, true) then
    tokenerr = redis.error_reply('LOCKCORRUPT ' .. string.sub(redis.call('GET', KEYS[2]), 1, 100))
  end
elseif token == step then
  local t = redis.call('TIME')
  token = tonumber(t[1]) * 1000000 + tonumber(t[2]) + 4503599627370496 + step - 1
  redis.call('SET', KEYS[2], string.format('%d', token))
end
