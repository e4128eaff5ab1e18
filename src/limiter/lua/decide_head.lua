-- The limiter's Redis function library: every rule of one subject decided in one call, its
-- keys all under the subject's hash tag, so in one cluster slot. The algorithms follow as local
-- functions of the library, each made once per load, when a rule first asks for it; each
-- mirrors src/limiter/algorithms.rs. decide_tail.lua registers the function that dispatches.
local now -- the call's time in ms, set before any algorithm runs
