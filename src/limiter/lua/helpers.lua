-- Helpers shared by every script, defined after any fast path: creating a closure costs the
-- script time on every call, so a path that returns early should not pay for them.

-- Integers as strings: tostring is exact below 10^14 (Lua prints 14 digits) and cheaper than
-- string.format, which larger values (token bucket deficits) need.
local function int(x)
  if x < 1e14 and x > -1e14 then
    return tostring(x)
  end
  return string.format('%d', x)
end

-- Allowed attempts are written; denied ones too when the rule counts over the limit. Cost 0 reads.
local function records(allowed)
  return cost > 0 and (allowed or over)
end

local function reply(allowed, count, remaining, retry, reset)
  if quiet and not allowed then
    retry, reset = 0, 0
  end
  return { allowed and 1 or 0, count, remaining, retry, reset }
end

-- The reply of the counting algorithms: remaining is what is left of the limit.
local function answer(allowed, count, retry, reset)
  local remaining = limit - count
  if remaining < 0 then
    remaining = 0
  end
  return reply(allowed, count, remaining, retry, reset)
end
