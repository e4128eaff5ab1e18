-- Figma's counters: one hash per (rule, subject), 60 sub-windows per window, at most 61 fields:
-- fields '0'..'59' are a ring holding sub-windows head-59 .. head by index mod 60, and field 'm'
-- packs 'head:total:oldest' (newest sub-window index, running total of the window, count of
-- sub-window head-60, the one the window's edge cuts through and whose slot the head now uses).
-- A decision reads and writes only what changed; sub-windows that left the window are subtracted
-- from the total and deleted here, in the same script.
-- Time runs in a-units (ms * 60): a sub-window is exactly `window` a-units long.
-- option: 'harsh' | 'lenient' | 'weighted'.
local key = KEYS[1]
local RING = 60
local a = now * 60
local i = math.floor(a / window)
local slot = tostring(i % RING) -- string arguments spare Redis a number conversion
local st = redis.call('HMGET', key, 'm', slot)
local h, total, old = nil, 0, 0
if st[1] then
  local hs, ts, os = string.match(st[1], '^(%d+):(%d+):(%d+)$')
  h, total, old = tonumber(hs), tonumber(ts), tonumber(os)
end
local cur = tonumber(st[2]) or 0 -- the slot of sub-window i
local head_count = nil -- the head's count, when known without reading
local fresh = false -- a read (cost 0) found every stored field outside the window
local zeroed = {} -- ring slots whose sub-windows left (a read does not delete them)
if not h then
  h = i
  head_count = 0
elseif i > h then
  if i - h > RING then
    total, old = 0, 0
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
      end
    end
    -- Sub-window i-60 becomes the oldest and gives its slot to the new head.
    old = cur
    if cur ~= 0 then
      gone[#gone + 1] = i % RING
    end
    if cost > 0 and #gone > 0 then
      redis.call('HDEL', key, unpack(gone))
    end
  end
  cur = 0
  head_count = 0
  h = i
elseif i < h then
  -- A late event is judged at the start of the newest sub-window.
  a = h * window
else
  head_count = cur
end

local x = a - h * window
local count = total
if option == 'lenient' then
  count = total - old
elseif option == 'weighted' then
  count = total - math.floor(old * x / window)
end
local allowed = count + cost <= limit
local recorded = records(allowed) and i >= h - RING
local count_after = count
if recorded then
  total = total + cost
  count_after = count + cost
end
if cost > 0 then
  if total == 0 then
    redis.call('DEL', key)
  else
    local m = int(h) .. ':' .. int(total) .. ':'
    if recorded and i > h - RING then
      redis.call('HSET', key, slot, int(cur + cost), 'm', m .. int(old))
      -- The first write into a sub-window fixes when the key is no longer needed: when that
      -- sub-window leaves the window. Later writes into it cannot move that moment.
      if cur == 0 then
        local ttl = int(math.ceil(((i + RING + 1) * window - now * 60) / 60))
        if i == h then
          redis.call('PEXPIRE', key, ttl)
        else
          redis.call('PEXPIRE', key, ttl, 'GT') -- a late event never shortens the key's life
        end
      end
      if i == h then
        head_count = cur + cost
      end
    elseif recorded then
      old = old + cost
      redis.call('HSET', key, 'm', m .. int(old))
    else
      redis.call('HSET', key, 'm', m .. int(old))
    end
  end
end

local vals
local function value(j)
  if j == h - RING then
    return old
  end
  if j == h and head_count then
    return head_count
  end
  if fresh or j > h or j < h - RING or zeroed[j % RING] then
    return 0
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
local function to_ms(span)
  if span <= 0 then
    return 0
  end
  return math.ceil(span / 60)
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
      local lag = RING + 1
      local sum = total
      if option == 'lenient' then
        lag = RING
        sum = total - old
      end
      local k = h
      while sum > room do
        k = k + 1
        sum = sum - value(k - lag)
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
  local span = RING + 1
  if option == 'lenient' then
    span = RING
  end
  reset = to_ms((newest + span) * window - a)
end
return answer(allowed, count_after, retry, reset)
