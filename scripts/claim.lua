-- Prepended to every script of the counted names but claiminspect.lua: what
-- they take and reply, the state of one name as the call reads and changes
-- it, and the functions that reap, grant and serve. The counted names have
-- a layout and replies of their own, not those of record.lua; the fencing
-- counter is the locks' (token.lua).
--
-- KEYS (every one in the hash slot of the name's record key R, see
-- RedisKeys):
--   KEYS[1] R..':c', a hash: each live claim, owner -> "weight,token,since,
--     deadline" (since the grant's time and deadline when it expires, in
--     Unix ms by the server's clock, TIME), each waiter, ' w '..owner ->
--     its queue entry (as in KEYS[3]), and the fields
--       ' limit' the name's limit,
--       ' used' the weight its claims hold (as last written: a claim past
--         its deadline counts until a call reaps it),
--       ' qlen' the length of the queue,
--       ' until' when the keys expire (Unix ms),
--       ' next' "deadline" or "deadline owner weight,token,since": no
--         live claim has an earlier deadline, and owner holds a live claim
--         (the one that expires first when its deadline is this one; a
--         call that drops that claim and grants another keeps the deadline
--         as a bound and names the claim granted, so that the calls after
--         it need not read every claim to name a holder); absent when the
--         name holds no claim,
--       ' tok' "last max step": the last fencing token the name granted,
--         the last of the block it took from the counter and the block's
--         size (see fresh),
--       ' hw' "weight deadline": the weight of the queue's head and when its
--         entry runs out, when a call knows them (absent otherwise): a
--         live head that does not fit stops serving without a look at the
--         queue;
--       ' kind' the name's kind ('semaphore' or 'rwmutex'; absent in a
--         name stored before kinds were, which takes a caller of either
--         kind, and has no mark),
--     a space, which no owner has, keeps them apart from the claims
--   KEYS[2] the fencing counter of the slot (see token.lua)
--   KEYS[3] R..':cq', the queue: a list of entries "owner weight ttl-ms
--     channel deadline" in arrival order, at most one an owner, channel
--     as in record.lua's queue (see publish), deadline when the entry runs
--     out (Unix ms by the server's clock: its waiter's last look and the
--     queue ttl it gave, ARGV[8])
--   KEYS[4] R, the record key of the same name: a lock's record (see
--     record.lua), or, while the name holds claims or waiters, its mark
--     "counted <kind>", which no record is, so that a lock's scripts find
--     the key taken and no lock is granted beside the name (one name, one
--     kind). The call that makes the name (its first claim or waiter)
--     writes the mark, unless R holds a lock's record: then it changes
--     nothing and replies LOCKED.
-- The three keys live and die together: they expire at ' until', no earlier
-- than the last deadline and a minute after the last look of a waiter
-- (or its queue ttl, ARGV[8], if longer), and every call that leaves the name without claims and
-- waiters deletes them. A call reaps (reads every claim, drops those past
-- their deadline) only when the server's time reached ' next'. A waiter's
-- entry past its deadline is gone: serve passes it over (drops it) when it
-- comes to the head, and the waiter's next look joins at the back.
--
-- ARGV has one layout; a script is passed the first positions it needs,
-- with "" in those it skips:
--   ARGV[1] owner: the caller's owner
--   ARGV[2] ttl: the caller's ttl, in ms
--   ARGV[3] key: the name, for the messages (see serve)
--   ARGV[4] pub: how to publish (see publish)
--   ARGV[5] weight: the caller's weight (the new weight, for lower)
--   ARGV[6] limit: the caller's limit
--   ARGV[7] entry: the caller's queue entry
--   ARGV[8] queue ttl: how long the caller's queue entry lasts, in ms
--   ARGV[9] kind: the caller's kind
--
-- Every script but claiminspect.lua replies {code, limit, used, n, owner,
-- value, pttl, head, kind}, decoded by decodeClaim in
-- provider_redis_claims.go, with a code of the one table of reply codes
-- (at the top of record.lua): limit, used and kind are the name's after the
-- call (0, 0, false when it holds nothing; kind false for a name stored
-- without one), and
--   code 1 DONE: the call did what it was asked.
--   code 2 VALUE: the caller holds no claim; owner and value are those
--     of a live claim (the one in ' next'), pttl the ms left to the first
--     expiry at the earliest (' next''s deadline); false, false, 0 when
--     none is live.
--   code 3 QUEUED: the caller is in the queue at place n (0 first); owner,
--     value and pttl as for VALUE; head the ms left to the head's entry
--     when n > 0 and the call knows it (' hw'), else 0.
--   code 4 GRANTED: the caller holds the claim value (granted by this call
--     or before it), with pttl ms left.
--   code 5 LOST: the caller holds no live claim, and nothing changed.
--   code 6 CORRUPT: value is a stored value that is not one of these
--     scripts'; nothing was written.
--   code 7 LOCKED: the call would have made the name, and R holds a lock's
--     record (or a value that is not a mark): value is that value, pttl
--     its ms left; limit 0, kind 'lock'. Nothing was written to the name.
-- A value in a reply is "weight,token,since" (the stored claim without its
-- deadline): weight 1 to 4 digits, token 1 to 19 digits, since and
-- deadline 1 to 15 digits, none with a leading zero but since.
--
-- A call that fails to take a token (the counter is corrupt, or the server
-- refused the write) after it granted claims and told their waiters makes
-- what it did so far (failed) before it returns the error: a grant that
-- was published is stored, and its token is never given again.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner, want, wantkind = ARGV[1], tonumber(ARGV[6]), ARGV[9]
local wfield = ' w ' .. owner
local markPrefix = 'counted ' -- of R's value while the name is in use

-- The name as this call sees it. Writes wait in changed (field -> value,
-- or false: deleted) until finish, which makes them; so a stored value
-- found corrupt stops the call before it wrote anything.
local limit, used, qlen = nil, 0, 0 -- limit nil: the name holds nothing
local kind = nil -- the name's kind; nil when it holds nothing, or has none stored
local made = false -- this call makes the name (start): it writes its kind and mark
local existed = false -- the hash was there
local stored = {} -- ' limit', ' used', ' qlen', ' next', ' hw', ' kind' as read
local untilms = 0 -- ' until' as read
local reaped = false -- a claim expired
local mine = nil -- the caller's live claim, as stored
local waiting = nil -- the caller's queue entry, as stored
local waitdl = nil -- and when it runs out
local changed = {}
local exp = 0 -- the keys live at least until then (ms)
local relist = false -- the queue was made anew: give it the hash's expiry
local headw, headdl = nil, nil -- the weight of the queue's head and its deadline, when known
-- The claims' first deadline, as ' next': nextdl no live claim's deadline
-- is earlier; nexto and nextv (the reply's value) a live claim, when one is
-- known (the one that expires first when its deadline is nextdl).
local nextdl, nexto, nextv = nil, nil, nil
local all = nil -- every live claim, owner -> stored value, once read
local toklast, tokmax, tokstep = nil, nil, nil -- ' tok' as read (numbers)

-- parse returns the weight, token, since and deadline of a stored claim,
-- or nil.
local function parse(v)
  local w, token, since, dl = string.match(v, '^([1-9]%d*),([1-9]%d*),(%d+),([1-9]%d*)$')
  if not w or #w > 4 or #token > 19 or #since > 15 or #dl > 15 then return nil end
  return tonumber(w), token, since, tonumber(dl)
end

-- short returns a stored claim without its deadline, as replies show it.
local function short(v)
  return string.match(v, '^(.*),%d+$')
end

local function corrupt(v)
  return {6, 0, 0, 0, false, v, 0, 0, false}
end

-- entry returns the owner, weight, ttl, channel and deadline of a queue
-- entry, or nil when e is not one.
local function entry(e)
  local o, w, ttl, ch, dl = string.match(e, '^(%S+) ([1-9]%d?%d?%d?) ([1-9]%d*) (%S+) ([1-9]%d*)$')
  if not o or #dl > 15 then return nil end
  return o, tonumber(w), ttl, ch, tonumber(dl)
end

-- scan reads every claim: those past their deadline are reaped (their
-- weight is free), the weight used and the claim that expires first are
-- counted anew. It returns a CORRUPT reply, or nil.
local function scan()
  local h = redis.call('HGETALL', KEYS[1])
  all, used, nextdl, nexto, nextv = {}, 0, nil, nil, nil
  for i = 1, #h, 2 do
    local o, v = h[i], h[i + 1]
    if string.byte(o, 1) ~= 32 then
      local w, _, _, dl = parse(v)
      if not w then return corrupt(v) end
      if dl <= now then
        changed[o] = false
        reaped = true
        if o == owner then mine = nil end
      else
        all[o] = v
        used = used + w
        if not nextdl or dl < nextdl then nextdl, nexto, nextv = dl, o, short(v) end
      end
    end
  end
  return nil
end

-- load reads the name's fields, the caller's claim and queue entry, and
-- reaps when a claim may have expired. A name left without claims and
-- waiters holds nothing: limit is nil. It returns a CORRUPT reply, or nil.
local function load()
  local st = redis.call('HMGET', KEYS[1], ' limit', ' used', ' qlen', ' until', ' next', owner, wfield, ' hw', ' tok', ' kind')
  if not st[1] then return nil end
  existed = true
  if not string.match(st[1], '^[1-9]%d?%d?%d?$') then return corrupt(st[1]) end
  if st[10] and not string.match(st[10], '^%l+$') then return corrupt(st[10]) end
  for i = 2, 4 do
    if not st[i] or not string.match(st[i], '^%d+$') or #st[i] > 15 then return corrupt(tostring(st[i])) end
  end
  limit, used, qlen, untilms = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
  stored = {limit = st[1], used = used, qlen = qlen, next = st[5], hw = st[8], kind = st[10]}
  kind = st[10]
  if st[8] then
    local w, dl = string.match(st[8], '^([1-9]%d?%d?%d?) ([1-9]%d*)$')
    if not w or #dl > 15 then return corrupt(st[8]) end
    headw, headdl = tonumber(w), tonumber(dl)
  end
  if st[9] then
    -- A block below 2^53, which Lua numbers hold exactly, and no larger
    -- than its size.
    local last, max, step = string.match(st[9], '^([1-9]%d*) ([1-9]%d*) ([1-9]%d?%d?%d?)$')
    last, max, step = tonumber(last), tonumber(max), tonumber(step)
    if not last or max >= 9007199254740992 or step > 1024 or last > max or max - last >= step then
      return corrupt(st[9])
    end
    toklast, tokmax, tokstep = last, max, step
  end
  if st[5] then
    local dl, o, v = string.match(st[5], '^(%d+) (%S+) (%S+)$')
    if not dl then dl = string.match(st[5], '^(%d+)$') end
    if not dl then return corrupt(st[5]) end
    nextdl, nexto, nextv = tonumber(dl), o, v
  end
  local mydl = nil
  if st[6] then
    local w, _, _, dl = parse(st[6])
    if not w then return corrupt(st[6]) end
    mine, mydl = st[6], dl
  end
  if st[7] then
    local o, _, _, _, dl = entry(st[7])
    if o ~= owner then return corrupt(st[7]) end
    waiting, waitdl = st[7], dl
  end
  if (nextdl and nextdl <= now) or (mydl and mydl <= now) then
    local err = scan()
    if err then return err end
  end
  if used == 0 and qlen == 0 then limit, kind = nil, nil end
  return nil
end

-- start begins a call that may take a claim or join the queue: the
-- caller's limit and kind become the name's when it holds nothing (the
-- call makes the name).
local function start()
  local err = load()
  if err then return err end
  if not limit then limit, kind, made = want, wantkind, true end
  return nil
end

-- other reports whether the caller's limit or kind is not the name's (a
-- name stored without a kind takes either).
local function other()
  return limit ~= want or (kind ~= nil and kind ~= wantkind)
end

-- keep makes the keys live at least until ms.
local function keep(ms)
  if ms > exp then exp = ms end
end

-- set stores o's claim v (false: deleted) of deadline dl, and keeps the
-- claim that expires first.
local function set(o, v, dl)
  changed[o] = v
  if all then all[o] = v or nil end
  if not v then
    if o == nexto then nexto, nextv = nil, nil end -- nextdl stays a bound
  elseif not nextdl or dl < nextdl then
    nextdl, nexto, nextv = dl, o, short(v)
  elseif o == nexto or not nexto then
    nexto, nextv = o, short(v) -- a live claim; nextdl stays a bound
  end
end

-- fresh returns a fresh fencing token: the next of the name's block, or
-- the first of a new block taken from the counter (INCR or INCRBY): one
-- token for the name's new keys, then twice the last block, up to 1,024,
-- each time a block runs out while they live; or nil and the error to
-- return. A block's unused tokens are skipped when the keys go, so a name
-- takes at most twice the tokens it grants from the counter (which must
-- not outpace the server's clock in microseconds: see token.lua), and a
-- busy name one INCRBY every 1,024 grants. Every token is strictly greater
-- than the name's earlier ones, and than every token the counter gave
-- before the block was taken: every lock's of the same key before the name
-- (no lock's is granted while the name's keys, and so its mark, live).
local function fresh()
  if toklast and toklast < tokmax then
    toklast = toklast + 1
  else
    local step = tokstep and math.min(2 * tokstep, 1024) or 1
    --#include token.lua
    if not token then return nil, tokenerr end
    toklast, tokmax, tokstep = token - step + 1, token, step
  end
  changed[' tok'] = string.format('%d %d %d', toklast, tokmax, tokstep)
  return toklast
end

-- grant gives o a claim of weight w for ttl ms, with a fresh token, and
-- returns its value (as a reply shows it) and token, or nil and the error
-- to return.
local function grant(o, w, ttl)
  local token, err = fresh()
  if not token then return nil, err end
  token = string.format('%d', token)
  local v = w .. ',' .. token .. ',' .. string.format('%d', now)
  set(o, v .. ',' .. string.format('%d', now + ttl), now + ttl)
  used = used + w
  keep(now + ttl)
  return v, token
end

-- drop deletes o's claim, of stored value v. When no claim is left, none
-- expires first: a claim granted next is the first, known without reading
-- every claim.
local function drop(o, v)
  set(o, false)
  used = used - parse(v)
  if used <= 0 then nextdl, nexto, nextv = nil, nil, nil end
end

--#include publish.lua

-- putback returns the queue's entry e, of weight w and deadline dl, to
-- the head of the queue, where serve took it from.
local function putback(e, w, dl)
  redis.call('LPUSH', KEYS[3], e)
  headw, headdl = w, dl
  if qlen == 0 then relist = true end
  qlen = qlen + 1
end

-- serve grants the head of the queue a claim of its weight and ttl while it
-- fits, and publishes "owner,token,since ttl weight\nkey" on its channel,
-- key ARGV[3]: the first head that does not fit stops it (it is put back),
-- so that nobody overtakes it. A head whose entry ran out (its deadline is
-- past: its waiter stopped looking) is passed over, fit or not, and so is
-- an entry that is not one. A waiter whose
-- message nobody heard is skipped (see publish), its claim taken back,
-- unless it is the caller. An owner is queued once and holds no claim
-- while queued (see claimqueue.lua), so a head is granted without looking
-- for its claim. At most 64 entries a call: the next call serves the
-- rest. It returns nil, or the error to return.
local function serve()
  for _ = 1, 64 do
    if qlen <= 0 or used >= limit then return nil end
    if headw and headdl > now and used + headw > limit then return nil end
    local e = redis.call('LPOP', KEYS[3])
    headw, headdl = nil, nil
    if not e then
      qlen = 0
      return nil
    end
    qlen = qlen - 1
    local o, w, ttl, ch, dl = entry(e)
    if o and dl > now and w <= limit then
      if used + w > limit then
        putback(e, w, dl)
        return nil
      end
      local v, token = grant(o, w, tonumber(ttl))
      if not v then
        -- No token: o stays at the head, where it was.
        putback(e, w, dl)
        return token
      end
      changed[' w ' .. o] = false
      if o == owner then waiting = nil end
      local msg = o .. ',' .. token .. ',' .. string.format('%d', now) .. ' ' .. ttl .. ' ' .. w .. '\n' .. ARGV[3]
      if publish(ch, msg) and o ~= owner then drop(o, changed[o]) end
    elseif o then
      changed[' w ' .. o] = false
      if o == owner then waiting = nil end
    end
  end
  return nil
end

-- renew gives the caller's claim ttl ms from now.
local function renew(ttl)
  local w, token, since = parse(mine)
  mine = w .. ',' .. token .. ',' .. since .. ',' .. string.format('%d', now + ttl)
  set(owner, mine, now + ttl)
  keep(now + ttl)
end

-- first returns the owner and value of a live claim (the one that expires
-- first when the call knows it) and the ms left to the first expiry at the
-- earliest, or false, false, 0; before finish. It reads every claim when
-- it knows of no live claim (a value that is not a claim is passed over
-- here: the next call reaps it, or reports it).
local function first()
  if used <= 0 then return false, false, 0 end
  if not nexto then
    if not all then
      all = {}
      local h = redis.call('HGETALL', KEYS[1])
      for i = 1, #h, 2 do
        if string.byte(h[i], 1) ~= 32 then all[h[i]] = h[i + 1] end
      end
      for o, v in pairs(changed) do
        if string.byte(o, 1) ~= 32 then all[o] = v or nil end
      end
    end
    nextdl = nil
    for o, v in pairs(all) do
      local w, _, _, dl = parse(v)
      if w and dl > now and (not nextdl or dl < nextdl) then nextdl, nexto, nextv = dl, o, short(v) end
    end
    if not nexto then return false, false, 0 end
  end
  return nexto, nextv, nextdl - now
end

-- finish makes the call's writes: it deletes the name's keys (its mark
-- too, when it has one) when it holds no claim and no waiter, and otherwise
-- writes the fields changed, and makes the keys live at least until exp
-- (with a quarter more, so that the calls that follow need not push it
-- again). A call that makes the name writes its mark first, in R: when R
-- holds a lock's record, finish writes nothing and returns that record
-- (the call is refused: see locked). A call that makes the name wrote
-- nothing else before (a grant of a name that holds nothing is written
-- here, but for its token, which is used up).
local function finish()
  if used <= 0 and qlen <= 0 then
    if existed and stored.kind then
      redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
    elseif existed then
      redis.call('DEL', KEYS[1], KEYS[3])
    end
    limit, kind = nil, nil
    return nil
  end
  local e = untilms
  if exp > e then e = exp + math.floor((exp - now) / 4) end
  local es = string.format('%d', e)
  if made then
    local mark = markPrefix .. kind
    if not redis.call('SET', KEYS[4], mark, 'NX', 'PXAT', es) then
      local v = redis.call('GET', KEYS[4])
      if string.sub(v, 1, #markPrefix) ~= markPrefix then return v end
      redis.call('SET', KEYS[4], mark, 'PXAT', es) -- the mark of the name before, whose keys live on
    end
  end
  local hset, hdel = {}, {}
  local function put(f, v)
    hset[#hset + 1], hset[#hset + 2] = f, v
  end
  for f, v in pairs(changed) do
    if v then put(f, v) else hdel[#hdel + 1] = f end
  end
  local nx = false
  if used > 0 and nextdl then
    nx = string.format('%d', nextdl)
    if nexto then nx = nx .. ' ' .. nexto .. ' ' .. nextv end
  end
  if nx and nx ~= stored.next then put(' next', nx) end
  if not nx and stored.next then hdel[#hdel + 1] = ' next' end
  local hw = qlen > 0 and headw and string.format('%d %d', headw, headdl)
  if hw and hw ~= stored.hw then put(' hw', hw) end
  if not hw and stored.hw then hdel[#hdel + 1] = ' hw' end
  local l = string.format('%d', limit)
  if l ~= stored.limit then put(' limit', l) end
  if kind and kind ~= stored.kind then put(' kind', kind) end
  if used ~= stored.used then put(' used', string.format('%d', used)) end
  if qlen ~= stored.qlen then put(' qlen', string.format('%d', qlen)) end
  if e ~= untilms then put(' until', string.format('%d', e)) end
  if #hdel > 0 then redis.call('HDEL', KEYS[1], unpack(hdel)) end
  if #hset > 0 then redis.call('HSET', KEYS[1], unpack(hset)) end
  if e ~= untilms then redis.call('PEXPIREAT', KEYS[1], es) end
  if qlen > 0 and (e ~= untilms or relist) then redis.call('PEXPIREAT', KEYS[3], es) end
  if e ~= untilms and stored.kind and not made then redis.call('PEXPIREAT', KEYS[4], es) end
  return nil
end

-- locked returns the LOCKED reply of v, the lock's record in R that
-- refused a call that would have made the name.
local function locked(v)
  return {7, 0, 0, 0, false, v, redis.call('PTTL', KEYS[4]), 0, 'lock'}
end

-- reply returns the reply code with n, and the live claim that expires
-- first (VALUE, QUEUED), and for a caller queued behind the head, the ms
-- left to the head's entry when known: it finishes the call.
local function reply(code, n)
  local o, v, pttl = first()
  local head = 0
  if code == 3 and n > 0 and headw and headdl > now then head = headdl - now end
  local lockv = finish()
  if lockv then return locked(lockv) end
  return {code, limit or 0, used, n, o, v, pttl, head, kind or false}
end

-- granted finishes the call and returns the GRANTED reply of the caller's
-- claim v (as a reply shows it), with pttl ms left.
local function granted(v, pttl)
  local lockv = finish()
  if lockv then return locked(lockv) end
  return {4, limit or 0, used, 0, owner, v, pttl, 0, kind or false}
end

-- done finishes the call and returns code, DONE or LOST.
local function done(code)
  finish()
  return {code, limit or 0, used, 0, false, false, 0, 0, kind or false}
end

-- failed finishes the call (what it did before a token could not be taken:
-- grants published, a claim released) and returns err.
local function failed(err)
  finish()
  return err
end

-- opening is how AcquireClaim and QueueClaim begin: it reads the name
-- (start) and serves its queue, and returns the reply when the call ends
-- there: VALUE when the caller's limit or kind is not the name's, GRANTED
-- when the caller was granted from the queue just now (its claim lives
-- ttl); nil when it goes on.
local function opening(ttl)
  local err = start()
  if err then return err end
  err = serve()
  if err then return failed(err) end
  if other() then return reply(2, 0) end
  if changed[owner] then return granted(short(changed[owner]), ttl) end
  return nil
end
