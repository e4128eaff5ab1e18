-- The near-duplicate group of one text (src/campaigns/groups.rs).
-- KEYS[1], KEYS[2]: band -> group, this generation and the last one.
-- KEYS[3], KEYS[4]: group -> signature, this generation and the last one.
-- ARGV[1]: the text's signature (a version byte, then 4 bytes per value); ARGV[2]: the id of a
-- new group; ARGV[3]: the keys' lifetime in seconds; ARGV[4]: the values that must agree for a
-- match; ARGV[5..]: the text's bands.
-- The bands of each generation are read in one call and the new ones written in one (16 bands
-- took 50 calls).
local sig = ARGV[1]
local needed = tonumber(ARGV[4])
local bands = { unpack(ARGV, 5) }
local this = redis.call('HMGET', KEYS[1], unpack(bands))
local last = redis.call('HMGET', KEYS[2], unpack(bands))

-- The values are compared as numbers, each signature unpacked in one call: compared as
-- substrings, each candidate cost 128 new strings, and the script took 0.25 ms of Redis a call
-- at 1,000 invites/s (0.16 ms now, docs/PERFORMANCE.md).
local values = (#sig - 1) / 4
local layout = '<' .. string.rep('I4', values)
local mine = { struct.unpack(layout, sig, 2) }

local function agreement(other)
  if not other or #other ~= #sig or string.byte(other, 1) ~= string.byte(sig, 1) then
    return 0
  end
  local theirs = { struct.unpack(layout, other, 2) }
  local same = 0
  for i = 1, values do
    if mine[i] == theirs[i] then
      same = same + 1
    end
  end
  return same
end

-- Candidates in band order, this generation's before the last one's, each tried once.
local tried = {}
local function matches(id)
  if not id or tried[id] then
    return false
  end
  tried[id] = true
  local other = redis.call('HGET', KEYS[3], id) or redis.call('HGET', KEYS[4], id)
  return agreement(other) >= needed
end

local found = nil
for n = 1, #bands do
  if matches(this[n]) then
    found = this[n]
  elseif matches(last[n]) then
    found = last[n]
  end
  if found then
    break
  end
end

-- The group keeps the signature of the text that started it, carried into each generation.
local id = found or ARGV[2]
if redis.call('HEXISTS', KEYS[3], id) == 0 then
  local kept = sig
  if found then
    kept = redis.call('HGET', KEYS[4], id) or sig
  end
  redis.call('HSET', KEYS[3], id, kept)
end
-- A band already taken in this generation keeps its group.
local claims = {}
for n = 1, #bands do
  if not this[n] then
    claims[#claims + 1] = bands[n]
    claims[#claims + 1] = id
  end
end
if #claims > 0 then
  redis.call('HSET', KEYS[1], unpack(claims))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
return id
