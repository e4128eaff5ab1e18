-- For `sendguard bench limiter` only: distinct members in a sliding window with HyperLogLogs,
-- one per sub-window (1/60 of the window) under KEYS[1], merged by PFCOUNT over the 61 that the
-- window covers. It builds key names itself, so it is not cluster-safe: the bench measures it
-- against the exact count on one server, to choose between them (docs/PERFORMANCE.md).
-- ARGV: member, window_ms.
local base = KEYS[1]
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local a = (t[1] * 1000 + math.floor(t[2] / 1000)) * 60
local i = math.floor(a / window)
local current = base .. ':' .. i
redis.call('PFADD', current, ARGV[1])
redis.call('PEXPIRE', current, math.ceil(((i + 61) * window - a) / 60))
local keys = {}
for j = i - 60, i do
  keys[#keys + 1] = base .. ':' .. j
end
return redis.call('PFCOUNT', unpack(keys))
