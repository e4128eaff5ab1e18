  local key, key2 = KEYS[k], nil
  k = k + 1
  if code == 'l' then
    key2 = KEYS[k]
    k = k + 1
  end
  local answer = run(key, key2, ARGV[n + 1], ARGV[n + 2], ARGV[n + 3] + 0)
  if not out and n + 3 == #ARGV then
    return answer
  end
  out = out or {}
  out[#out + 1] = answer
end
return out or {}
