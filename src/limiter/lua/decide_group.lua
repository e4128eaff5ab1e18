-- After the group function (see decide_head.lua): the look-up, its group's id written into
-- the keys that count it, then the loop over the rules, which decide_tail.lua closes.
  local from = ARGV[3] * 2 + 4
  local fresh = ARGV[from + 1]
  local id = group(KEYS[1], KEYS[2], ARGV[from], fresh, ARGV[from + 2], ARGV[from + 3] + 0,
    { unpack(ARGV, from + 4, first - 1) })
  if id ~= fresh then
    local hex = string.format('%02x%02x%02x%02x%02x%02x%02x%02x', string.byte(id, 1, 8))
    for n = 4, from - 1, 2 do
      local at, place = ARGV[n + 1] + 0, ARGV[n] + 0
      local key = KEYS[place]
      KEYS[place] = string.sub(key, 1, at) .. hex .. string.sub(key, at + 17)
    end
  end
  out, k = { id }, 3
end
for n = first, #ARGV, 4 do
  local code, run = ARGV[n], nil
