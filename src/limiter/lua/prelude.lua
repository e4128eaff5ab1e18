-- Shared head of every limiter script (the Rust side prepends it, then the script's fast path if
-- it has one, then helpers.lua, then the script's body).
-- ARGV: cost, option, rule[, now_ms], where rule packs limit * 2^33 + count_over_limit * 2^32 +
-- window_ms (every argument costs Redis a table slot and a string, every number a strtod);
-- without now_ms the clock is Redis TIME.
-- Reply: {allowed (0|1), count, remaining, retry_after_ms, reset_after_ms}, all integers, or for
-- an attempt a fast path allowed, the single integer count * 2^32 + reset_after_ms.
-- Each script mirrors src/limiter/algorithms.rs: same state, same integer arithmetic.
local cost = tonumber(ARGV[1])
local option = ARGV[2]
local rule = tonumber(ARGV[3])
local window = rule % 4294967296
local limit = math.floor(rule / 8589934592)
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
