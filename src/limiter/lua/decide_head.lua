-- Several rules decided in one call: every rule of an invite on a single server, every rule of
-- one subject on a cluster (its keys share the subject's hash tag, so they live in one slot).
-- ARGV[1] is the time in ms (the caller's clock, set to Redis TIME, see clock.rs); ARGV[2] the
-- number of arguments of a text's group look-up that follow (0: none); then four arguments
-- per rule: the algorithm's code, the cost, the option and the packed rule; its key in KEYS in
-- the same order (a sliding log's sequence key right after its own). One rule's answer comes
-- back as it is; several as an array in order.
-- A group look-up (single server only, src/campaigns/groups.rs) runs first, on KEYS[1] and
-- KEYS[2], the rules' keys after them. Its arguments: how many keys take the group's id, then
-- for each its place in KEYS and the byte after which its id starts (the new group's id, 16
-- hexadecimal digits, stands there until the group is known), then the group function's
-- arguments. Its answer leads the array: the group's id (8 bytes), then the rules' answers.
-- The dispatcher is a loop in the script's body. An algorithm's function (each mirrors
-- src/limiter/algorithms.rs) is made when a rule of the call first asks for it and kept in the
-- algorithm's `made_` local, which redis_store.rs declares above: every function or table the
-- body makes is an allocation on every call, and the ones that used to wrap the dispatch cost a
-- fast-path decision 8-19% of its time in Redis. For the same reason the group function
-- (`group`, group.lua) is made only in a call that looks a group up: the Rust
-- side puts it between this file and decide_group.lua.
local now = ARGV[1] + 0
local first = 3 + ARGV[2]
-- `out` is made only for several rules or a group.
local out, k = nil, 1
if first > 3 then
