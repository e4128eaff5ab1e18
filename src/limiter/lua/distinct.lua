-- Distinct members (recipients, domains) in a sliding window, counted exactly up to the limit:
-- one hash per (rule, subject) whose fields are the members (the caller's 4-byte hashes, in
-- the option argument) and whose values are the sub-window (1/60 of the window) each was last
-- seen in, modulo 128, plus
--   '#'  the newest sub-window ('head') and the number of members: head * 2^12 + count.
-- Every member kept was last seen at most 60 sub-windows before the head (an attempt that moves
-- the head deletes the others), so its sub-window is the one at or below the head with that
-- remainder; a value under 128 takes 2 bytes of a hash's listpack where the whole index takes 5
-- or 6.
-- A member counts while its last sighting is one of the 61 sub-windows head-60 .. head (the edge
-- as `harsh` counts it: never more lenient than an exact window). At most limit + 1 members are
-- kept: past that the count is "over", whatever the true number, so memory per key is bounded.
-- When the head moves, members that left the window are deleted and the expiry is set to outlive
-- the new head; within one sub-window a decision is one HMGET and at most one HSET.
-- Time runs in a-units (ms * 60): a sub-window is exactly `window` a-units long.
local member = option -- the caller's 4-byte hash of the recipient or domain
local SPAN = 61
local COUNTS = 4096 -- 2^12: above MAX_DISTINCT_LIMIT + 1
local MOD = 128 -- above SPAN: a stored remainder names one sub-window of the last 128
local a = now * 60
local i = math.floor(a / window)

-- The sub-window a stored remainder `v` stands for, at or below sub-window `top`.
local function at(v, top)
  return top - (top - tonumber(v)) % MOD
end

local st = redis.call('HMGET', key, '#', member)
local packed = tonumber(st[1])
local head, count = i, 0
local seen = nil
if packed then
  head = math.floor(packed / COUNTS)
  count = packed % COUNTS
  if st[2] then
    seen = at(st[2], head)
  end
end
-- A late event (time stepped back) is judged at the newest sub-window.
if head > i then
  i = head
  a = i * window
end
if seen and seen < i - SPAN + 1 then
  seen = nil
end
if packed and head < i then
  -- The head moves: members that left the window no longer count, and an attempt deletes them
  -- (a read changes nothing).
  local all = redis.call('HGETALL', key)
  local gone = {}
  count = 0
  for n = 1, #all, 2 do
    local f = all[n]
    if f ~= '#' then
      if at(all[n + 1], head) < i - SPAN + 1 then
        gone[#gone + 1] = f
      else
        count = count + 1
      end
    end
  end
  if cost > 0 and #gone > 0 then
    redis.call('HDEL', key, unpack(gone))
  end
end

-- A read (cost 0) only counts; an attempt adds its member when it is new.
local fresh = cost > 0 and not seen
local after = count
if fresh then
  after = count + 1
end
local allowed = after <= limit
-- A new member is kept when allowed, or as the one member past the limit of a rule that counts
-- on; beyond that it would change nothing the count can say.
local keep = fresh and (allowed or (over and count == limit))
if fresh and not keep then
  after = count
end

if cost > 0 then
  local moved = not packed or head ~= i
  if keep or (seen and seen ~= i) then
    redis.call('HSET', key, member, i % MOD, '#', i * COUNTS + after)
  elseif packed and moved then
    redis.call('HSET', key, '#', i * COUNTS + after)
  end
  -- Whenever the head moves, the key is kept until the new head leaves the window.
  if moved and (keep or seen or packed) then
    redis.call('PEXPIRE', key, math.ceil(((i + SPAN) * window - a) / 60))
  end
end

-- The window frees up when its oldest member leaves; only denied attempts need to know when.
local retry = 0
local reset = 0
if after > 0 then
  reset = math.ceil(((i + SPAN) * window - a) / 60)
end
if not allowed then
  -- The head as stored now: an attempt moved it to `i`, a read left it.
  local top = head
  if cost > 0 then
    top = i
  end
  local oldest = i
  local all = redis.call('HGETALL', key)
  for n = 1, #all, 2 do
    if all[n] ~= '#' then
      local v = at(all[n + 1], top)
      if v < oldest and v >= i - SPAN + 1 then
        oldest = v
      end
    end
  end
  retry = math.ceil(((oldest + SPAN) * window - a) / 60)
  if retry < 1 then
    retry = 1
  end
end
return answer(allowed, after, retry, reset)
