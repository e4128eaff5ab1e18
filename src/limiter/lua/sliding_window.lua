-- The sliding-window counter: hash {w = window index, c = this window, p = previous window};
-- the previous window counts by the share of it the sliding window still covers.
local t = now
local idx = math.floor(t / window)
local st = redis.call('HMGET', key, 'w', 'c', 'p')
local stored = tonumber(st[1])
local c = tonumber(st[2]) or 0
local p = tonumber(st[3]) or 0
if stored and stored > idx then
  idx = stored
  t = stored * window
elseif stored == idx then
  -- same window
elseif stored and stored + 1 == idx then
  p = c
  c = 0
else
  p = 0
  c = 0
end
local x = t - idx * window
local count = c + p - math.floor(p * x / window)
local allowed = count + cost <= limit
local count_after = count
if records(allowed) then
  c = c + cost
  count_after = count + cost
end
if cost > 0 then
  redis.call('HSET', key, 'w', int(idx), 'c', int(c), 'p', int(p))
  redis.call('PEXPIRE', key, int(2 * window))
end
local retry = 0
if not allowed then
  if cost > limit then
    retry = window
  else
    local room = limit - cost
    local at
    local need = c + p - room
    if c <= room and p > 0 and need <= p then
      local dx = math.ceil(need * window / p)
      if dx < window then
        at = idx * window + dx
      end
    end
    if not at then
      need = c - room
      if need <= 0 then
        at = (idx + 1) * window
      else
        local dx = math.ceil(need * window / c)
        if dx < window then
          at = (idx + 1) * window + dx
        else
          at = (idx + 2) * window
        end
      end
    end
    retry = at - t
  end
end
local reset = 0
if c > 0 then
  reset = (idx + 2) * window - t
elseif p > 0 then
  reset = (idx + 1) * window - t
end
return answer(allowed, count_after, retry, reset)
