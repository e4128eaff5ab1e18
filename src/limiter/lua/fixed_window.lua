-- One counter per fixed window: hash {w = window index, c = count}.
local t = now
local idx = math.floor(t / window)
local st = redis.call('HMGET', key, 'w', 'c')
local stored = tonumber(st[1])
local c = tonumber(st[2]) or 0
if stored and stored > idx then
  idx = stored
  t = stored * window
elseif stored ~= idx then
  c = 0
end
local allowed = c + cost <= limit
if records(allowed) then
  c = c + cost
end
if cost > 0 then
  redis.call('HSET', key, 'w', int(idx), 'c', int(c))
  redis.call('PEXPIRE', key, int(window))
end
local reset = (idx + 1) * window - t
local retry = 0
if not allowed then
  retry = reset
  if cost > limit then
    retry = window
  end
end
if c == 0 then
  reset = 0
end
return answer(allowed, c, retry, reset)
