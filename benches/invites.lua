-- wrk script for POST /api/v1/invites with realistic traffic (benches/invites.sh runs it).
--
-- Many senders (SENDERS, default 20,000) invite recipients drawn from a smaller pool (RECIPIENTS,
-- default 5,000) so some addresses repeat; 2% of requests come from five spammers far over their
-- hourly limit. RATE > 0 paces the whole run at that many requests per second: each connection
-- waits between requests, and every thread corrects the wait once a second from what it achieved.

local key = os.getenv("SENDGUARD_API_KEY") or error("SENDGUARD_API_KEY is not set")
local senders = tonumber(os.getenv("SENDERS") or "20000")
local recipients = tonumber(os.getenv("RECIPIENTS") or "5000")
local rate = tonumber(os.getenv("RATE") or "0")

wrk.method = "POST"
wrk.path = "/api/v1/invites"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. key

local connections = tonumber(os.getenv("CONNECTIONS") or "1")
local thread_count = tonumber(os.getenv("WRK_THREADS") or "1")
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
end

local interval_ms, per_thread_rate, second, answered = 0, 0, 0, 0

function init(args)
  math.randomseed(os.time() * 1000 + (id or 0))
  if rate > 0 then
    per_thread_rate = rate / thread_count
    interval_ms = connections * 1000 / rate
    second = os.time()
  end
end

function delay()
  return interval_ms
end

function request()
  local sender
  if math.random() < 0.02 then
    sender = "spammer" .. math.random(1, 5)
  else
    sender = "u" .. math.random(1, senders)
  end
  local body = string.format(
    '{"sender_id":"%s","recipient":"r%d@example.com","sender_ip":"10.%d.%d.%d","resource":"doc-%d"}',
    sender, math.random(1, recipients), math.random(0, 255), math.random(0, 255),
    math.random(1, 254), math.random(1, 100000))
  return wrk.format(nil, nil, nil, body)
end

if rate > 0 then
  function response(status, headers, body)
    answered = answered + 1
    local now = os.time()
    if now > second then
      local achieved = answered / (now - second)
      if achieved > 0 then
        interval_ms = interval_ms * achieved / per_thread_rate
      end
      second, answered = now, 0
    end
  end
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
