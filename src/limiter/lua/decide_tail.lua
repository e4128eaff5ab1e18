-- The dispatcher: the rule of `args[n]` (the algorithm's code; then the cost, the option and
-- the packed rule) on the key at `keys[k]` (a sliding log's sequence key right after its own).
-- Answers the rule's answer and where the next rule's key is.
local function decide(keys, args, k, n)
  local code = args[n]
  local run = algorithm(code)
  if not run then
    return redis.error_reply('unknown algorithm code ' .. tostring(code)), k
  end
  local key, key2 = keys[k], nil
  k = k + 1
  if code == 'l' then
    key2 = keys[k]
    k = k + 1
  end
  return run(key, key2, args[n + 1], args[n + 2], tonumber(args[n + 3])), k
end

-- The function (FUNCTION is its name with the library's version, set by the loader): the time
-- in ms (this instance's clock, set to Redis TIME, see clock.rs), then four arguments per rule.
-- One rule's answer comes back as it is; several as an array in order.
redis.register_function {
  function_name = FUNCTION,
  callback = function(keys, args)
    now = tonumber(args[1])
    if #args == 5 then
      return (decide(keys, args, 1, 2))
    end
    local out, k = {}, 1
    for n = 2, #args, 4 do
      out[#out + 1], k = decide(keys, args, k, n)
    end
    return out
  end,
}
