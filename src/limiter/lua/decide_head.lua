-- Several rules decided in one call: every rule of an invite on a single server, every rule of
-- one subject on a cluster (its keys share the subject's hash tag, so they live in one slot).
-- ARGV[1] is the time in ms (the caller's clock, set to Redis TIME, see clock.rs), then four
-- arguments per rule: the algorithm's code, the cost, the option and the packed rule; its key
-- in KEYS in the same order (a sliding log's sequence key right after its own). One rule's
-- answer comes back as it is; several as an array in order.
-- The dispatcher is a loop in the script's body. An algorithm's function (each mirrors
-- src/limiter/algorithms.rs) is made when a rule of the call first asks for it and kept in the
-- algorithm's `made_` local, which redis_store.rs declares above: every function or table the
-- body makes is an allocation on every call, and the ones that used to wrap the dispatch cost a
-- fast-path decision 8-19% of its time in Redis.
local now = ARGV[1] + 0
-- `out` is made only for several rules.
local out, k = nil, 1
for n = 2, #ARGV, 4 do
  local code, run = ARGV[n], nil
