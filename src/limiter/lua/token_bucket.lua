-- A token bucket of `limit` tokens refilled at `limit` per window: hash {u = deficit in
-- tokens * window_ms, t = last update}. One millisecond gives back `limit` units, exactly.
-- option 'strict': a denied attempt forfeits the refill, so the bucket stays empty while
-- traffic goes on.
local st = redis.call('HMGET', key, 'u', 't')
local used = tonumber(st[1]) or 0
local updated = tonumber(st[2]) or 0
local elapsed = now - updated
if elapsed < 0 then
  elapsed = 0
end
local refilled = 0
if elapsed < math.ceil(used / limit) then
  refilled = used - elapsed * limit
end
local need = cost * window
local capacity = limit * window
local allowed = refilled + need <= capacity
local after = refilled
if option == 'strict' and not allowed and cost > 0 then
  after = used
end
if records(allowed) then
  after = after + need
end
if cost > 0 then
  if updated < now then
    updated = now
  end
  redis.call('HSET', key, 'u', int(after), 't', int(updated))
  local ttl = math.ceil(after / limit)
  if ttl < window then
    ttl = window
  end
  redis.call('PEXPIRE', key, int(ttl + 1))
end
local retry = 0
if not allowed then
  if cost > limit then
    retry = window
  else
    retry = math.ceil((after + need - capacity) / limit)
  end
end
local remaining = math.floor((capacity - after) / window)
if remaining < 0 then
  remaining = 0
end
return reply(allowed, math.ceil(after / window), remaining, retry, math.ceil(after / limit))
