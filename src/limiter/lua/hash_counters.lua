-- Figma's counters: one hash per (rule, subject), 60 sub-windows per window in a ring of 61
-- fields named by ring index, plus 't' (running total of the ring) and 'h' (newest sub-window).
-- A decision reads and writes only the fields that changed; sub-windows that left the window
-- are subtracted from the total and deleted here, in the same script.
-- Time runs in a-units (ms * 60): a sub-window is exactly `window` a-units long.
-- option: 'harsh' | 'lenient' | 'weighted'.
local key = KEYS[1]
local RING = 61
local a = now * 60
local i = math.floor(a / window)
local st = redis.call('HMGET', key, 't', 'h', (i - 60) % RING, i % RING)
local total = tonumber(st[1]) or 0
local h = tonumber(st[2])
local old = tonumber(st[3]) or 0
local cur = tonumber(st[4]) or 0
local fresh = false -- every stored field has left the window (cost 0 leaves them in place)
if not h then
  h = i
elseif i > h then
  if i - h >= RING then
    fresh = true
    total, old, cur = 0, 0, 0
    if cost > 0 then
      redis.call('DEL', key)
    end
  else
    local gone = {}
    for j = h - 60, i - 61 do
      gone[#gone + 1] = j % RING
    end
    local vals = redis.call('HMGET', key, unpack(gone))
    for n = 1, #gone do
      total = total - (tonumber(vals[n]) or 0)
    end
    if cost > 0 then
      redis.call('HDEL', key, unpack(gone))
    end
    cur = 0 -- sub-window i is new; its field was among the ones that left
  end
  h = i
elseif i < h then
  -- A late event is judged at the start of the newest sub-window.
  a = h * window
  old = tonumber(redis.call('HGET', key, (h - 60) % RING)) or 0
end

local x = a - h * window
local count = total
if option == 'lenient' then
  count = total - old
elseif option == 'weighted' then
  count = total - math.floor(old * x / window)
end
local allowed = count + cost <= limit
local recorded = records(allowed) and i >= h - 60
local count_after = count
if recorded then
  total = total + cost
  count_after = count + cost
end
if cost > 0 then
  if total == 0 then
    redis.call('DEL', key)
  else
    if recorded then
      redis.call('HSET', key, i % RING, int(cur + cost), 't', int(total), 'h', int(h))
    else
      redis.call('HSET', key, 't', int(total), 'h', int(h))
    end
    redis.call('PEXPIRE', key, int(math.ceil(window * RING / 60)))
  end
end

local vals
local function value(j)
  if fresh or j > h or j < h - 60 then
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

local function to_ms(span)
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
      local full = total - value(h - 60)
      local k = h
      while true do
        local oldest = value(k - 60)
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
        full = full - value(k - 60)
        if k > h + RING then
          at = k * window
          break
        end
      end
    else
      local lag = RING
      local sum = total
      if option == 'lenient' then
        lag = RING - 1
        sum = total - value(h - 60)
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
  -- The newest sub-window with a count leaves last; usually it is the current one.
  local newest = h
  local head_count
  if i == h then
    head_count = cur
    if recorded then
      head_count = cur + cost
    end
  else
    head_count = value(h)
  end
  if head_count == 0 then
    newest = h - 1
    while newest > h - 60 and value(newest) == 0 do
      newest = newest - 1
    end
  end
  local span = RING
  if option == 'lenient' then
    span = RING - 1
  end
  reset = to_ms((newest + span) * window - a)
end
return reply(allowed, count_after, retry, reset)
