-- The exact sliding log: a sorted set of attempts scored by time (one member per unit of cost),
-- and a sequence key that keeps members unique.
local seq = key2 -- the sequence key, under the same hash tag
local cutoff = now - window
if cutoff < 0 then
  cutoff = 0
end
if cost > 0 then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cutoff))
end
local live = '(' .. int(cutoff)
local count = redis.call('ZCOUNT', key, live, '+inf')
local allowed = count + cost <= limit
local count_after = count
if records(allowed) then
  local last = redis.call('INCRBY', seq, cost)
  local args = {}
  for n = last - cost + 1, last do
    args[#args + 1] = int(now)
    args[#args + 1] = int(n)
  end
  redis.call('ZADD', key, unpack(args))
  count_after = count + cost
end
if cost > 0 then
  redis.call('PEXPIRE', key, int(window))
  redis.call('PEXPIRE', seq, int(window))
end
local retry = 0
if not allowed then
  if cost > limit then
    retry = window
  else
    local must_leave = count_after + cost - limit
    local nth = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', must_leave - 1, 1)
    retry = tonumber(nth[2]) + window - now
    if retry < 0 then
      retry = 0
    end
  end
end
local reset = 0
local newest = redis.call('ZREVRANGEBYSCORE', key, '+inf', live, 'WITHSCORES', 'LIMIT', 0, 1)
if newest[2] then
  reset = tonumber(newest[2]) + window - now
  if reset < 0 then
    reset = 0
  end
end
return answer(allowed, count_after, retry, reset)
