-- Shared head of every limiter script (the Rust side prepends it).
-- ARGV: limit, window_ms, cost, count_over_limit (0|1), now_ms ('' = Redis TIME), option.
-- Reply: {allowed (0|1), count, remaining, retry_after_ms, reset_after_ms}, all integers.
-- Each script mirrors src/limiter/algorithms.rs: same state, same integer arithmetic.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local over = ARGV[4] == '1'
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local option = ARGV[6]

-- Integers as strings: tostring is exact below 10^14 (Lua prints 14 digits) and cheaper than
-- string.format, which larger values (token bucket deficits) need.
local function int(x)
  if x < 1e14 and x > -1e14 then
    return tostring(x)
  end
  return string.format('%d', x)
end

-- Allowed attempts are written; denied ones too when the rule counts over the limit. Cost 0 reads.
local function records(allowed)
  return cost > 0 and (allowed or over)
end

local function reply(allowed, count, remaining, retry, reset)
  return { allowed and 1 or 0, count, remaining, retry, reset }
end

-- The reply of the counting algorithms: remaining is what is left of the limit.
local function answer(allowed, count, retry, reset)
  local remaining = limit - count
  if remaining < 0 then
    remaining = 0
  end
  return reply(allowed, count, remaining, retry, reset)
end
