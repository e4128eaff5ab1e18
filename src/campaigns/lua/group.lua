-- The near-duplicate group of one text (src/campaigns/groups.rs).
-- KEYS[1], KEYS[2]: band -> group, this generation and the last one.
-- KEYS[3], KEYS[4]: group -> signature, this generation and the last one.
-- ARGV[1]: the text's signature (a version byte, then 4 bytes per value); ARGV[2]: the id of a
-- new group; ARGV[3]: the keys' lifetime in seconds; ARGV[4]: the values that must agree for a
-- match; ARGV[5..]: the text's bands.
local sig = ARGV[1]
local needed = tonumber(ARGV[4])

local function agreement(other)
  if not other or #other ~= #sig or string.byte(other, 1) ~= string.byte(sig, 1) then
    return 0
  end
  local same = 0
  for i = 2, #sig, 4 do
    if string.sub(sig, i, i + 3) == string.sub(other, i, i + 3) then
      same = same + 1
    end
  end
  return same
end

local found = nil
local tried = {}
for b = 5, #ARGV do
  for k = 1, 2 do
    local id = redis.call('HGET', KEYS[k], ARGV[b])
    if id and not tried[id] then
      tried[id] = true
      local other = redis.call('HGET', KEYS[3], id) or redis.call('HGET', KEYS[4], id)
      if agreement(other) >= needed then
        found = id
        break
      end
    end
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
for b = 5, #ARGV do
  redis.call('HSETNX', KEYS[1], ARGV[b], id)
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[3])
return id
