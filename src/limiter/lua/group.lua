-- The near-duplicate group of one text (src/campaigns/groups.rs): the body of
-- `function(here, before, sig, fresh, expires, needed, bands)` (group_lookup.rs wraps it), run
-- as a script of its own (on a cluster and in `bench groups`) and inside the limiter's script
-- on a single server, where it runs before the rules that count the group (decide_head.lua).
-- here, before: the store of this generation and of the last one, a hash of band -> group and
-- of '#' .. group -> the group's signature (a band is 6 bytes, a signature field 9).
-- sig: the text's signature (a version byte, then each value's low byte); fresh: the id of a
-- new group (8 random bytes); expires: when this generation's hash expires (Unix seconds:
-- after the next generation, which reads them as its last); needed: the values that must agree
-- for a match (a number); bands: the text's bands (6 bytes each). Bands, ids and signatures are
-- bytes, not text: as hash fields and values of a few bytes each, every byte of a string counts.
-- Returns the group's id.
-- The bands of each generation are read in one call and the new ones written in one, with the
-- signature of a new group (a form that read and wrote each band on its own took 50 calls a
-- text; a text that starts a group, most texts, now takes 4). Nothing is read or written that
-- the answer does not need: a campaign's payload sent as it is, once its group holds all of its
-- bands in this generation, reads the bands and the group's signature, and writes nothing.
local this = redis.call('HMGET', here, unpack(bands))
-- Read at the first band whose group in this generation does not match.
local last = nil

-- The values are compared as numbers, each signature's bytes read in one call: compared as
-- substrings, each candidate cost 128 new strings, and the script took 0.25 ms of Redis a call
-- at 1,000 invites/s (0.16 ms after, docs/PERFORMANCE.md).
local values = #sig - 1
-- Read only when a candidate needs it: most texts find none.
local mine = nil

local function agreement(other)
  -- The same text again (a campaign's payload as it is): Lua's strings are interned, so this is
  -- a comparison of two pointers where reading and comparing took 128 values.
  if other == sig then
    return values
  end
  if not other or #other ~= #sig or string.byte(other, 1) ~= string.byte(sig, 1) then
    return 0
  end
  mine = mine or { string.byte(sig, 2, -1) }
  local theirs = { string.byte(other, 2, -1) }
  local same = 0
  for i = 1, values do
    if mine[i] == theirs[i] then
      same = same + 1
    end
  end
  return same
end

-- Candidates in band order, this generation's before the last one's, each tried once. A group
-- found only in the last generation keeps its signature there, to be carried into this one.
local tried, carried = {}, {}
local function matches(id)
  if not id or tried[id] then
    return false
  end
  tried[id] = true
  local other = redis.call('HGET', here, '#' .. id)
  if not other then
    other = redis.call('HGET', before, '#' .. id)
    carried[id] = other
  end
  return agreement(other) >= needed
end

local found = nil
for n = 1, #bands do
  if matches(this[n]) then
    found = this[n]
  else
    last = last or redis.call('HMGET', before, unpack(bands))
    if matches(last[n]) then
      found = last[n]
    end
  end
  if found then
    break
  end
end

-- The group keeps the signature of the text that started it, carried into each generation. A
-- key gets its expiry when written, the same time at every write of its generation.
local id = found or fresh
local claims = {}
if not found or carried[id] then
  claims[1], claims[2] = '#' .. id, carried[id] or sig
end
-- A band already taken in this generation keeps its group.
for n = 1, #bands do
  if not this[n] then
    claims[#claims + 1] = bands[n]
    claims[#claims + 1] = id
  end
end
if #claims > 0 then
  redis.call('HSET', here, unpack(claims))
  redis.call('EXPIREAT', here, expires)
end
return id
