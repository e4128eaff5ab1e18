-- Shared head of every limiter script (the Rust side prepends it).
-- ARGV: limit, window_ms, cost, count_over_limit (0|1), now_ms ('' = Redis TIME), option.
-- Reply: {allowed (0|1), count, remaining, retry_after_ms, reset_after_ms}.
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

-- Integers are written with %d: Lua's default number format keeps only 14 digits.
local function int(x)
  return string.format('%d', x)
end

-- Allowed attempts are written; denied ones too when the rule counts over the limit. Cost 0 reads.
local function records(allowed)
  return cost > 0 and (allowed or over)
end

local function reply(allowed, count, retry, reset)
  local remaining = limit - count
  if remaining < 0 then
    remaining = 0
  end
  return { allowed and 1 or 0, count, remaining, retry, reset }
end
