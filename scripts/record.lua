-- Prepended to every script: the record format and fencing tokens. KEYS[1]
-- is the record, KEYS[2] the fencing counter, KEYS[3] the wait queue: a list
-- of entries "owner ttl-ms inbox" in arrival order.
--
-- A record is "owner,token" while held, "owner,token,q" while held with a
-- queue waiting for it, and "owner,token,ended" during a grace period; owner
-- is 1 to 128 bytes without commas or white space, token 1 to 19 digits
-- without a leading zero. parseRecord in provider.go is the same parser in Go.

-- parse returns owner, token, ended and queued, or nil when v is not a
-- record.
local function parse(v)
  local owner, token, rest = string.match(v, '^([^,%s]+),([1-9]%d*)(.*)$')
  if not owner or #owner > 128 or #token > 19 then return nil end
  if rest == '' then return owner, token, false, false end
  if rest == ',q' then return owner, token, false, true end
  if rest == ',ended' then return owner, token, true, false end
  return nil
end
