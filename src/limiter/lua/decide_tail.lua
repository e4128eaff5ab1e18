-- The dispatcher: four arguments per rule after the time (the algorithm's code, the cost, the
-- option and the packed rule), its key in KEYS in the same order (a sliding log's sequence key
-- right after its own). One rule's answer comes back as it is; several as an array in order.
local k = 1
local function decide(n)
  local code = ARGV[n]
  local run = algorithm(code)
  if not run then
    return redis.error_reply('unknown algorithm code ' .. tostring(code))
  end
  local key, key2 = KEYS[k], nil
  k = k + 1
  if code == 'l' then
    key2 = KEYS[k]
    k = k + 1
  end
  return run(key, key2, ARGV[n + 1], ARGV[n + 2], tonumber(ARGV[n + 3]))
end
if #ARGV == 5 then
  return decide(2)
end
local out = {}
for n = 2, #ARGV, 4 do
  out[#out + 1] = decide(n)
end
return out
