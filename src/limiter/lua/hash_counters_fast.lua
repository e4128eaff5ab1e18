-- Figma's counters: one hash per (rule, subject), 60 sub-windows per window, at most 61 fields,
-- all integers (turning numbers into strings and back costs Lua more than the Redis commands):
--   'm'        (head mod HEADS) * TOTALS + total: the newest sub-window ("head") and the running
--              total of the 61 sub-windows head-60 .. head. A key lives about 61 sub-windows, far
--              fewer than HEADS, so the head is recovered from the current time unambiguously.
--   '0'..'59'  a ring, by sub-window index mod 60: the plain counts of sub-windows head-59 ..
--              head-1. The head's own slot packs base * OLDEST + oldest, where base is the total
--              without the head's count and oldest the count of sub-window head-60, the one the
--              window's edge cuts through. The head's count is total - base.
-- So a counted attempt in the newest sub-window changes only 'm': one HINCRBY, whose answer
-- carries the whole decision under the harsh edge (lenient and weighted read the head's slot for
-- the oldest count), and one more takes it back when it is denied and its wait is not read; a
-- read of a key that does not exist is one HGET. Everything else reads the
-- state, prunes the sub-windows that left the window and writes it back. A head is only ever
-- written together with the expiry that outlives it, so the fast path never touches the expiry.
-- Time runs in a-units (ms * 60): a sub-window is exactly `window` a-units long.
-- option: 'harsh' | 'lenient' | 'weighted'.
local RING = 60
local HEADS = 1048576 -- 2^20
local TOTALS = 4294967296 -- 2^32
local OLDEST = 67108864 -- 2^26
local a = now * 60
local i = (a - a % window) / window
local span = RING + 1 -- sub-windows a count stays in the window
if option == 'lenient' then
  span = RING
end

-- 'm' as it was before this call (both branches below read it), false when the key had no state.
local m_before = nil
if cost > 0 then
  -- The cost goes as the caller's string: a Lua number would be formatted with sprintf.
  local mv = redis.call('HINCRBY', key, 'm', cost_arg)
  if mv == cost then
    m_before = false
    if cost <= limit then
      -- A new key: its head is this sub-window, which leaves the window last.
      redis.call('HSET', key, 'm', (i % HEADS) * TOTALS + cost)
      redis.call('PEXPIRE', key, math.ceil(((i + RING + 1) * window - a) / 60))
      return cost * TOTALS + math.ceil(((i + span) * window - a) / 60)
    end
  else
    m_before = mv - cost
    if (mv - mv % TOTALS) / TOTALS == i % HEADS then
      local count = mv % TOTALS
      if option ~= 'harsh' then
        local s = i % RING
        local name
        if s < 10 then
          name = string.char(48 + s)
        else
          name = string.char(48 + (s - s % 10) / 10, 48 + s % 10)
        end
        local old = (tonumber(redis.call('HGET', key, name)) or 0) % OLDEST
        if option == 'lenient' then
          count = count - old
        else
          count = count - math.floor(old * (a - i * window) / window)
        end
      end
      if count <= limit then
        return count * TOTALS + math.ceil(((i + span) * window - a) / 60)
      end
      if quiet then
        -- Denied, and no one reads its wait: counted over the limit, the attempt stays in
        -- 'm' like an allowed one; otherwise its cost is taken back, as the general path would
        -- write 'm'. Either way nothing else in the key changes.
        if over then
          return { 0, count, 0, 0, 0 }
        end
        redis.call('HINCRBY', key, 'm', '-' .. cost_arg)
        count = count - cost
        return { 0, count, limit > count and limit - count or 0, 0, 0 }
      end
    end
  end
else
  -- A read of a key that holds nothing, as most signals of most senders do: nothing counted,
  -- nothing to wait for, which the packed answer says as 0.
  m_before = tonumber(redis.call('HGET', key, 'm')) or false
  if not m_before then
    return 0
  end
end
