-- Figma's counters: one hash per (rule, subject), 60 sub-windows per window, at most 61 fields,
-- all integers (turning numbers into strings and back costs Lua more than the Redis commands):
--   '0'..'59'  a ring with the counts of sub-windows head-59 .. head, by index mod 60; the head's
--              own field packs oldest * OLDEST + head count, where oldest is the count of
--              sub-window head-60, the one the window's edge cuts through, whose slot the head uses;
--   'm'        (head mod HEADS) * TOTALS + total, the running total of the window. A key lives
--              about 61 sub-windows, far fewer than HEADS, so the head is recovered from the
--              current time without ambiguity.
-- The common case (a counted attempt in the newest sub-window) is two HINCRBYs; everything else
-- reads the state, prunes the sub-windows that left the window and writes it back.
-- Time runs in a-units (ms * 60): a sub-window is exactly `window` a-units long.
-- option: 'harsh' | 'lenient' | 'weighted'.
local key = KEYS[1]
local RING = 60
local HEADS = 1048576 -- 2^20
local TOTALS = 4294967296 -- 2^32
local OLDEST = 67108864 -- 2^26
local a = now * 60
local i = math.floor(a / window)
local slot = i % RING
local span = RING + 1 -- sub-windows a count stays in the window
if option == 'lenient' then
  span = RING
end

local function edge_count(total, old, x)
  if option == 'lenient' then
    return total - old
  elseif option == 'weighted' then
    return total - math.floor(old * x / window)
  end
  return total
end

if cost > 0 then
  local mv = redis.call('HINCRBY', key, 'm', cost)
  if mv ~= cost and math.floor(mv / TOTALS) == i % HEADS then
    local total = mv % TOTALS - cost
    local sv = redis.call('HINCRBY', key, slot, cost)
    local count = edge_count(total, math.floor(sv / OLDEST), a - i * window)
    if count + cost <= limit then
      if sv % OLDEST == cost then
        -- The first write into a sub-window fixes when the key is no longer needed: when that
        -- sub-window leaves the window. Later writes into it cannot move that moment.
        redis.call('PEXPIRE', key, math.ceil(((i + RING + 1) * window - a) / 60))
      end
      return answer(true, count + cost, 0, math.ceil(((i + span) * window - a) / 60))
    end
    redis.call('HINCRBY', key, slot, -cost)
    redis.call('HINCRBY', key, 'm', -cost)
  elseif mv == cost then
    redis.call('HDEL', key, 'm') -- the key was new: undo what the increment created
  else
    redis.call('HINCRBY', key, 'm', -cost)
  end
end

-- The general path, with the state as it was before this call.
local st = redis.call('HMGET', key, 'm', slot)
local h = nil
local total, old, head_count = 0, 0, 0
local mv = tonumber(st[1])
if mv then
  total = mv % TOTALS
  local d = (i - math.floor(mv / TOTALS)) % HEADS
  if d > HEADS / 2 then
    d = d - HEADS
  end
  h = i - d
  local hv = tonumber(st[2]) or 0
  if h ~= i then
    hv = tonumber(redis.call('HGET', key, h % RING)) or 0
  end
  old = math.floor(hv / OLDEST)
  head_count = hv % OLDEST
end
local cur = 0 -- the count of sub-window i before this attempt, where it is written
local zeroed = {} -- ring slots whose sub-windows left the window (a read does not delete them)
local plain_slot, plain_count = nil, 0 -- the former head's slot, whose packed oldest left
local fresh = false -- a read found every stored field outside the window
local deletes = {}
if not h then
  h = i
elseif i > h then
  if i - h > RING then
    total, old, head_count = 0, 0, 0
    if cost > 0 then
      redis.call('DEL', key)
    else
      fresh = true
    end
  else
    total = total - old
    local gone = {}
    for j = h - RING + 1, i - RING - 1 do
      gone[#gone + 1] = j % RING
      zeroed[j % RING] = true
    end
    if #gone > 0 then
      local vals = redis.call('HMGET', key, unpack(gone))
      for n = 1, #gone do
        total = total - (tonumber(vals[n]) or 0)
        deletes[#deletes + 1] = gone[n]
      end
    end
    -- Sub-window i-60 becomes the oldest: it is the former head when i-h is 60, otherwise the
    -- plain count in the slot the new head takes.
    if i - h == RING then
      old = head_count
    else
      old = tonumber(st[2]) or 0
      plain_slot, plain_count = h % RING, head_count
    end
    head_count = 0
  end
  h = i
elseif i < h then
  -- A late event is judged at the start of the newest sub-window.
  a = h * window
  if i > h - RING then
    cur = tonumber(st[2]) or 0
  end
else
  cur = head_count
end

local count = edge_count(total, old, a - h * window)
local allowed = count + cost <= limit
local recorded = records(allowed) and i >= h - RING
local count_after = count
if recorded then
  total = total + cost
  count_after = count + cost
  if i == h then
    head_count = head_count + cost
  elseif i == h - RING then
    old = old + cost
  end
end
if cost > 0 then
  if total == 0 then
    redis.call('DEL', key)
  else
    local args = { key, 'm', (h % HEADS) * TOTALS + total, h % RING, old * OLDEST + head_count }
    if recorded and i < h and i > h - RING then
      args[#args + 1] = slot
      args[#args + 1] = cur + cost
    end
    if plain_slot then
      if plain_count > 0 then
        args[#args + 1] = plain_slot
        args[#args + 1] = plain_count
      else
        deletes[#deletes + 1] = plain_slot
      end
    end
    if #deletes > 0 then
      redis.call('HDEL', key, unpack(deletes))
    end
    redis.call('HSET', unpack(args))
    if recorded and cur == 0 and i > h - RING then
      local ttl = math.ceil(((i + RING + 1) * window - now * 60) / 60)
      if i == h then
        redis.call('PEXPIRE', key, ttl)
      else
        redis.call('PEXPIRE', key, ttl, 'GT') -- a late event never shortens the key's life
      end
    end
  end
end

local vals
local function value(j)
  if j == h - RING then
    return old
  elseif j == h then
    return head_count
  elseif fresh or j > h or j < h - RING or zeroed[j % RING] then
    return 0
  elseif j % RING == plain_slot then
    return plain_count
  end
  if not vals then
    local fields = {}
    for n = 0, RING - 1 do
      fields[n + 1] = n
    end
    vals = redis.call('HMGET', key, unpack(fields))
  end
  return tonumber(vals[(j % RING) + 1]) or 0
end

-- An a-unit span in whole milliseconds, rounded up; nothing left to wait is 0.
local function to_ms(span_a)
  if span_a <= 0 then
    return 0
  end
  return math.ceil(span_a / 60)
end

local retry = 0
if not allowed then
  if cost > limit then
    retry = window
  else
    local room = limit - cost
    local at
    if option == 'weighted' then
      local full = total - old
      local k = h
      while true do
        local oldest = value(k - RING)
        local need = full + oldest - room
        if need <= 0 then
          at = k * window
          break
        end
        if oldest > 0 and need <= oldest then
          local dx = math.ceil(need * window / oldest)
          if dx < window then
            at = k * window + dx
            break
          end
        end
        k = k + 1
        full = full - value(k - RING)
        if k > h + RING + 1 then
          at = k * window
          break
        end
      end
    else
      local sum = total
      if option == 'lenient' then
        sum = total - old
      end
      local k = h
      while sum > room do
        k = k + 1
        sum = sum - value(k - span)
      end
      at = k * window
    end
    retry = to_ms(at - a)
  end
end

local reset = 0
if total > 0 then
  -- The newest sub-window with a count leaves last; usually it is the head.
  local newest = h
  while newest > h - RING and value(newest) == 0 do
    newest = newest - 1
  end
  reset = to_ms((newest + span) * window - a)
end
return answer(allowed, count_after, retry, reset)
