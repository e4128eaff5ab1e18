-- The general path of hash_counters (hash_counters_fast.lua holds the layout and the fast path):
-- a new sub-window, a denied attempt, a late event or a read. When an attempt reached here, 'm'
-- already carries its cost; every write below rewrites 'm' or deletes the key, so that is undone.

-- A ring slot's field name, without number formatting: '0' .. '59'.
local function field(s)
  if s < 10 then
    return string.char(48 + s)
  end
  return string.char(48 + (s - s % 10) / 10, 48 + s % 10)
end

local function edge_count(total, old, x)
  if option == 'lenient' then
    return total - old
  elseif option == 'weighted' then
    return total - math.floor(old * x / window)
  end
  return total
end

local h = nil
local total, base, old, head_count = 0, 0, 0, 0
local head_stored = nil -- what the head's slot holds now, nil when absent
local cur = 0 -- a late event: the count of its sub-window before this attempt
local zeroed = {} -- ring slots whose sub-windows left the window (a read does not delete them)
local plain_slot, plain_count = nil, 0 -- after a move, the former head's slot and its count
local fresh = false -- a read found every stored count outside the window
local moved = false -- the head moves to sub-window i with this write
local deletes = {}
if m_before then
  total = m_before % TOTALS
  local d = (i - math.floor(m_before / TOTALS)) % HEADS
  if d > HEADS / 2 then
    d = d - HEADS
  end
  h = i - d
end
if not h then
  h = i
  moved = true
elseif i - h > RING then
  -- Everything stored left the window.
  total = 0
  if cost > 0 then
    redis.call('DEL', key)
  else
    fresh = true
  end
  h = i
  moved = true
else
  -- One read: the head's slot, the slot of sub-window i, and the slots that leave the window.
  local names = { field(h % RING) }
  if (i > h and i - h < RING) or (i < h and i > h - RING) then
    names[2] = field(i % RING)
  end
  local first_gone = #names + 1
  for j = h - RING + 1, i - RING - 1 do
    names[#names + 1] = field(j % RING)
    zeroed[j % RING] = true
  end
  local vals = redis.call('HMGET', key, unpack(names))
  local hv = tonumber(vals[1]) or 0
  base = math.floor(hv / OLDEST)
  old = hv % OLDEST
  head_count = total - base
  head_stored = tonumber(vals[1])
  if i > h then
    -- The head moves to i: sub-windows before i-60 leave, i-60 becomes the oldest.
    total = total - old
    for n = first_gone, #names do
      total = total - (tonumber(vals[n]) or 0)
      deletes[#deletes + 1] = names[n]
    end
    if i - h == RING then
      old = head_count
    else
      old = tonumber(vals[2]) or 0
      head_stored = tonumber(vals[2])
      plain_slot, plain_count = h % RING, head_count
    end
    head_count = 0
    base = total
    h = i
    moved = true
  elseif i < h then
    -- A late event is judged at the start of the newest sub-window.
    a = h * window
    if i > h - RING then
      cur = tonumber(vals[2]) or 0
    end
  end
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
  else
    base = base + cost
    if i == h - RING then
      old = old + cost
    end
  end
end
if cost > 0 then
  if total == 0 then
    redis.call('DEL', key)
  else
    local args = { key, 'm', (h % HEADS) * TOTALS + total }
    local hv = base * OLDEST + old
    if hv > 0 then
      if hv ~= head_stored then
        args[#args + 1] = field(h % RING)
        args[#args + 1] = hv
      end
    elseif head_stored then
      deletes[#deletes + 1] = field(h % RING)
    end
    if recorded and i < h and i > h - RING then
      args[#args + 1] = field(i % RING)
      args[#args + 1] = cur + cost
    end
    if plain_slot then
      if plain_count > 0 then
        args[#args + 1] = field(plain_slot)
        args[#args + 1] = plain_count
      else
        deletes[#deletes + 1] = field(plain_slot)
      end
    end
    if #deletes > 0 then
      redis.call('HDEL', key, unpack(deletes))
    end
    redis.call('HSET', unpack(args))
    if moved then
      -- The new head leaves the window last: the key lives exactly until then.
      redis.call('PEXPIRE', key, math.ceil(((h + RING + 1) * window - a) / 60))
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
    -- Only the slots stored: a key over its limit usually holds a few, and naming all 60 would
    -- cost Redis sixty strings on every denied attempt.
    vals = {}
    local all = redis.call('HGETALL', key)
    for n = 1, #all, 2 do
      local s = tonumber(all[n])
      if s then
        vals[s] = all[n + 1]
      end
    end
  end
  return tonumber(vals[j % RING]) or 0
end

-- An a-unit span in whole milliseconds, rounded up; nothing left to wait is 0.
local function to_ms(span_a)
  if span_a <= 0 then
    return 0
  end
  return math.ceil(span_a / 60)
end

local retry = 0
if not allowed and not quiet then
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
      -- After `span` sub-windows every count has left; the bound keeps a damaged key from
      -- holding Redis in an endless loop.
      while sum > room and k < h + span do
        k = k + 1
        sum = sum - value(k - span)
      end
      at = k * window
    end
    retry = to_ms(at - a)
  end
end

local reset = 0
if total > 0 and (allowed or not quiet) then
  -- The newest sub-window with a count leaves last; usually it is the head.
  local newest = h
  while newest > h - RING and value(newest) == 0 do
    newest = newest - 1
  end
  reset = to_ms((newest + span) * window - a)
end
return answer(allowed, count_after, retry, reset)
