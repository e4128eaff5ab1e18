-- Every rule of one subject decided in one call: all its keys share the subject's hash tag, so
-- they live in one cluster slot. ARGV[1] is the time in ms (the caller's clock, set to Redis
-- TIME, see clock.rs), then four arguments per rule (decide_tail.lua). The algorithms follow
-- as local functions; each mirrors src/limiter/algorithms.rs.
local now = tonumber(ARGV[1])
