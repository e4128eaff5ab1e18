-- The head of one rule's function (the Rust side wraps prelude, the fast path if the algorithm
-- has one, helpers.lua and the algorithm's body in `function(key, key2, cost_arg, option, rule)`,
-- made by the dispatcher's branch of its code; decide_head.lua and decide_tail.lua around them
-- make the script).
-- rule packs limit * 2^24 + quiet * 2^23 + count_over_limit * 2^22 + window_secs (every
-- argument costs Redis a table slot and a string, every number a strtod); quiet: a denied
-- decision's wait is not read, and is answered as 0. A function returns {allowed (0|1), count,
-- remaining, retry_after_ms, reset_after_ms}, all integers, or for an attempt a fast path
-- allowed (or a read found nothing), the single integer count * 2^32 + reset_after_ms.
-- Each algorithm mirrors src/limiter/algorithms.rs: same state, same integer arithmetic.
-- The caller's numbers are read by arithmetic (`x + 0`, one strtod) rather than tonumber, which
-- parses its argument twice; `(x - x % d) / d` is math.floor(x / d) exactly (Lua's % floors),
-- without a global lookup and a C call. On a fast-path decision the two cut Redis' instructions
-- per call by an eighth (docs/PERFORMANCE.md).
local cost = cost_arg + 0
local window = rule % 4194304 * 1000
local limit = (rule - rule % 16777216) / 16777216
local flags = (rule - rule % 4194304) / 4194304 % 4
local over, quiet = flags % 2 == 1, flags >= 2
