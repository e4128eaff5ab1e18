-- The dispatcher: four arguments per rule after the time (the algorithm's code, the cost, the
-- option and the packed rule), its key in KEYS in the same order (a sliding log's sequence key
-- right after its own). One rule's answer comes back as it is; several as an array in order.
local k = 1
local function decide(n)
  local code, cost_arg, option, rule = ARGV[n], ARGV[n + 1], ARGV[n + 2], tonumber(ARGV[n + 3])
  local key = KEYS[k]
  k = k + 1
  if code == 'h' then
    return hash_counters(key, nil, cost_arg, option, rule)
  elseif code == 'd' then
    return distinct(key, nil, cost_arg, option, rule)
  elseif code == 'f' then
    return fixed_window(key, nil, cost_arg, option, rule)
  elseif code == 's' then
    return sliding_window(key, nil, cost_arg, option, rule)
  elseif code == 't' then
    return token_bucket(key, nil, cost_arg, option, rule)
  elseif code == 'l' then
    local seq = KEYS[k]
    k = k + 1
    return sliding_log(key, seq, cost_arg, option, rule)
  end
  return redis.error_reply('unknown algorithm code ' .. tostring(code))
end
if #ARGV == 5 then
  return decide(2)
end
local out = {}
for n = 2, #ARGV, 4 do
  out[#out + 1] = decide(n)
end
return out
