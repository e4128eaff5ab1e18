-- wrk script for POST /api/v1/invites with realistic traffic (benches/invites.sh runs it).
--
-- Many senders (SENDERS, default 20,000, named SENDER_PREFIX followed by a number, default "u")
-- invite recipients drawn from a pool (RECIPIENTS, default 5,000; the benchmarks scale both with
-- the run, benches/servers.sh) so some addresses repeat. Ordinary senders are established
-- accounts (`sender_created_at` a year back) and write realistic messages: a shared standard
-- text, personal notes, some with a link, some none (TRAFFIC=suppressed: the bare invites of the
-- runs before, without message or account age). SPAM_SHARE of requests (default 0.02) come from five spammers far over their hourly
-- limit. Each ordinary sender invites from one address of its own, as a user of an app does
-- from their browser, and the spammers from a new address each time, as through rotating
-- proxies (SENDER_IPS=random gives every invite a random address, the traffic of the runs before
-- 2026-11-26, in which every invite made new IP keys in Redis). RATE > 0 paces the whole run at
-- that many requests per second: each thread hands out send times on a fixed schedule
-- (RATE / WRK_THREADS per second), and a request whose time has passed goes at once, so slow
-- answers do not lower the rate.

local key = os.getenv("SENDGUARD_API_KEY") or error("SENDGUARD_API_KEY is not set")
local senders = tonumber(os.getenv("SENDERS") or "20000")
local recipients = tonumber(os.getenv("RECIPIENTS") or "5000")
local rate = tonumber(os.getenv("RATE") or "0")
local sender_prefix = os.getenv("SENDER_PREFIX") or "u"
local spam_share = tonumber(os.getenv("SPAM_SHARE") or "0.02")
local random_ips = os.getenv("SENDER_IPS") == "random"
local bare = os.getenv("TRAFFIC") == "suppressed"
-- FLOOR=healthz: `GET /healthz` instead of invites, on the same schedule (benches/servers.sh,
-- `floors`: the service's cheapest request at the run's rate).
local floor = os.getenv("FLOOR") == "healthz"

-- The texts of ordinary invites, by share: the product's standard text (which the app lists as
-- such, so that it never counts as a campaign; invites.sh passes it in STANDARD_TEXT), personal
-- notes in each sender's own words, the same with a link to a popular site, and no message.
local standard = os.getenv("STANDARD_TEXT") or "You have been invited to the team workspace."
local openers = { "Hi!", "Hello,", "Hey there,", "Good morning!", "Quick one:", "Hi all," }
local words = {
  "budget", "plan", "draft", "photos", "agenda", "notes", "sketches", "figures", "timeline",
  "schedule", "proposal", "report", "slides", "minutes", "recipe", "itinerary", "roster",
  "checklist", "invoice", "poster", "survey", "contract", "mockups", "roadmap", "summary",
  "review", "comments", "playlist", "menu", "seating", "tickets", "quotes", "estimates",
  "translations", "captions", "diagrams", "wireframes", "results", "scores", "maps",
}
local verbs = { "see", "check", "edit", "update", "sign", "review", "fix", "share", "print" }
local days = { "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "the weekend", "tonight" }
local sites = { "docs.example.org", "wiki.example.com", "example.net" }
-- A note in a sender's own words: few senders write alike.
local function personal()
  return string.format("%s can you %s the %s and the %s before %s? I also added %s %s.",
    openers[math.random(#openers)], verbs[math.random(#verbs)], words[math.random(#words)],
    words[math.random(#words)], days[math.random(#days)], words[math.random(#words)],
    words[math.random(#words)])
end
local function message()
  local pick = math.random()
  if pick < 0.45 then
    return standard
  elseif pick < 0.80 then
    return personal()
  elseif pick < 0.95 then
    return string.format("%s https://%s/d/%d", personal(), sites[math.random(#sites)],
      math.random(1, 1000000))
  end
  return nil
end

wrk.method = "POST"
wrk.path = "/api/v1/invites"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. key

local thread_count = tonumber(os.getenv("WRK_THREADS") or "1")
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
end

local ffi = require("ffi")
ffi.cdef[[
  typedef struct { long tv_sec; long tv_nsec; } timespec;
  int clock_gettime(int clock, timespec *ts);
]]
local ts = ffi.new("timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local step_ms, next_ms = 0, 0

function init(args)
  math.randomseed(os.time() * 1000 + (id or 0))
  if rate > 0 then
    step_ms = 1000 * thread_count / rate
    next_ms = now_ms()
  end
end

function delay()
  if step_ms == 0 then
    return 0
  end
  local slot = next_ms
  next_ms = next_ms + step_ms
  local wait = slot - now_ms()
  return wait > 0 and wait or 0
end

local function random_ip()
  return string.format("10.%d.%d.%d", math.random(0, 255), math.random(0, 255), math.random(1, 254))
end

function request()
  if floor then
    return wrk.format("GET", "/healthz", {}, "")
  end
  local sender, ip, text, established
  if math.random() < spam_share then
    sender, ip = "spammer" .. math.random(1, 5), random_ip()
    text = string.format("Claim your prize now at https://prize.example.com/c/%d", math.random(1, 1000000))
  else
    established = true
    text = message()
    local n = math.random(1, senders)
    sender = sender_prefix .. n
    -- 172.16.0.0/12 holds a million senders' own addresses, apart from the spammers' 10/8.
    ip = random_ips and random_ip() or
      string.format("172.%d.%d.%d", 16 + math.floor(n / 65536) % 16, math.floor(n / 256) % 256, n % 256)
  end
  local body = string.format(
    '{"sender_id":"%s","recipient":"r%d@example.com","sender_ip":"%s","resource":"doc-%d"',
    sender, math.random(1, recipients), ip, math.random(1, 100000))
  if not bare then
    -- The texts hold no quote or backslash: they go into the JSON as they are.
    if text then
      body = body .. ',"message":"' .. text .. '"'
    end
    if established then
      body = body .. ',"sender_created_at":"2025-01-15T09:30:00Z"'
    end
  end
  return wrk.format(nil, nil, nil, body .. "}")
end

function done(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local errors = summary.errors
  local failed = errors.connect + errors.read + errors.write + errors.timeout + errors.status
  io.write(string.format(
    "RESULT requests=%d seconds=%.2f rps=%.1f non2xx_or_errors=%d p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f\n",
    summary.requests, seconds, summary.requests / seconds, failed,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000))
end
