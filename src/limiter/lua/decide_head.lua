-- Several rules decided in one call: every rule of an invite on a single server, every rule of
-- one subject on a cluster (its keys share the subject's hash tag, so they live in one slot).
-- ARGV[1] is the time in ms (the caller's clock, set to Redis TIME, see clock.rs), then four
-- arguments per rule (decide_tail.lua). The algorithms follow as local functions; each mirrors
-- src/limiter/algorithms.rs.
local now = tonumber(ARGV[1])
