-- Prepended, after record.lua, to the scripts that grant a lock from the
-- wait queue or tell its waiters (all but acquire.lua, which needs neither
-- and runs most often).

-- grant stores a new record for owner with a fresh token, marked queued when
-- queued is true, and returns its value, or nil and the error to return.
local function grant(owner, ttl, fencettl, queued)
  local token, err = nexttoken(fencettl)
  if not token then return nil, err end
  local v = owner .. ',' .. token
  if queued then v = v .. ',q' end
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  return v
end

-- serve hands the lock to the first waiter in the queue: it stores a record
-- for it (marked queued: others may follow) and publishes "value ttl\nkey" on
-- its inbox. A waiter whose inbox nobody listens to any more (PUBLISH reaches
-- no one) is skipped when skipdead is '1' (not on a Cluster, where PUBLISH
-- counts only the receivers of one node). It returns the owner and the value
-- of the new record; nothing when the queue is empty (the record is then
-- unchanged, or deleted if it had been handed to a dead waiter); or nil, nil
-- and an error. The entry me (if given) is granted without a message.
local function serve(fencettl, key, skipdead, me)
  while true do
    local e = redis.call('LPOP', KEYS[3])
    if not e then return nil end
    local owner, ttl, inbox = string.match(e, '^(%S+) (%d+) (%S+)$')
    if owner then
      local v, err = grant(owner, ttl, fencettl, true)
      if not v then return nil, nil, err end
      if e == me then return owner, v end
      local n = redis.call('PUBLISH', inbox, v .. ' ' .. ttl .. '\n' .. key)
      if n > 0 or skipdead ~= '1' then return owner, v end
      redis.call('DEL', KEYS[1])
    end
  end
end

-- tellall publishes "\nkey" once on every inbox of the queue and deletes the
-- queue: the lock entered a grace period, and none of them will get it.
local function tellall(key)
  local seen = {}
  for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    local inbox = string.match(e, ' (%S+)$')
    if inbox and not seen[inbox] then
      seen[inbox] = true
      redis.call('PUBLISH', inbox, '\n' .. key)
    end
  end
  redis.call('DEL', KEYS[3])
end
