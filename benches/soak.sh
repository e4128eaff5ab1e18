#!/usr/bin/env bash
# Paced load with delivery for a long stretch, to see what drifts.
#
#   benches/soak.sh MINUTES RATE                  (e.g. 60 1000: an hour at 1,000 invites/s)
#   SENDGUARD_BIN=path benches/soak.sh ...        (that binary instead of a release build here)
#   SOAK_STEP=seconds                             (one line every so many seconds; default 60)
#   SOAK_FLOORS=seconds                           (each floor's length; default 15, 0: none)
#   BENCH_PORT, TRAFFIC, SENDERS, RECIPIENTS, PG_SETTINGS, BENCH_DIR: as benches/invites.sh.
#
# Starts the servers of benches/servers.sh (its own PostgreSQL configured as a small production
# server, Redis and Postfix's smtp-sink), then `sendguard serve` on a fresh database with mail
# through SMTP to the sink, and runs wrk at RATE requests/s (benches/invites.lua, traffic that
# mostly delivers, scaled to MINUTES × RATE invites) one step after the other. After each step it
# prints the step's throughput, p99 and failed requests, the emails delivered per second,
# sendguard's resident memory and open files, Redis's memory, the database's size, the outbox's
# depth and the age of its oldest queued invite. Before the load it measures the floors at RATE
# (benches/servers.sh, `floors`): what a `GET /healthz` costs sendguard, a single-row insert
# Postgres and a `PING` Redis at that rate; at the end, the run's CPU per invite against them.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:?usage: benches/soak.sh MINUTES RATE}
rate=${2:?usage: benches/soak.sh MINUTES RATE}
step=${SOAK_STEP:-60}
threads=2
port=${BENCH_PORT:-18180}
metrics_port=$((port + 1))
redis_port=$((port + 2))
pg_port=$((port + 3))
smtp_port=$((port + 4))
db=sendguard_soak
export PGSSLMODE=disable
db_url=postgres://postgres@127.0.0.1:$pg_port/$db?sslmode=disable
# shellcheck source=benches/servers.sh
. benches/servers.sh

for cmd in wrk psql redis-cli redis-server curl python3; do
  command -v "$cmd" >/dev/null || { echo "benches/soak.sh: $cmd is missing (Debian: wrk, postgresql-client, redis-tools, redis-server, curl, python3)" >&2; exit 1; }
done
bin=${SENDGUARD_BIN:-./target/release/sendguard}
[ -n "${SENDGUARD_BIN:-}" ] || cargo build --release -q

serve_pid=
cleanup() {
  [ -z "$serve_pid" ] || { kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; }
  stop_servers
}
trap cleanup EXIT
start_postgres "$pg_port"
start_redis "$redis_port"
start_smtp_sink "$smtp_port"
pgsql() { psql -q -At -h 127.0.0.1 -p "$pg_port" -U postgres -d "$db" "$@"; }
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE $db"
DATABASE_URL=$db_url $bin migrate >/dev/null
pgsql -c "CREATE EXTENSION pg_stat_statements"
key=$(DATABASE_URL=$db_url $bin api-key create soak 2>/dev/null)
standard_text "$bin" "$db_url"
pgsql -c "SELECT sendguard_invite_weeks(now() - interval '90 days', 2)" >/dev/null
log=$pg_dir/serve.log
DATABASE_URL=$db_url REDIS_URL=redis://127.0.0.1:$redis_port SENDGUARD_SMTP_URL=smtp://127.0.0.1:$smtp_port \
  SENDGUARD_LISTEN=127.0.0.1:$port SENDGUARD_METRICS_LISTEN=127.0.0.1:$metrics_port RUST_LOG=warn \
  SENDGUARD_PUBLIC_URL=https://sendguard.example.com $bin serve >/dev/null 2>>"$log" &
serve_pid=$!
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$log" >&2; exit 1; }

traffic_for $((minutes * 60 * rate))
export SENDGUARD_API_KEY=$key WRK_THREADS=$threads WRK_CONNECTIONS=20 RATE=$rate
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | tail -n 1; }
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); $(date -u +%F); $minutes min at $rate/s, a line every $step s"
echo "postgres: $(postgres_settings "$pg_port")"
echo "traffic: ${TRAFFIC:-delivered}, $SENDERS senders, $RECIPIENTS recipients; mail through SMTP to smtp-sink"
floor_secs=${SOAK_FLOORS:-15}
declare -A floor=()
if [ "$floor_secs" -gt 0 ]; then
  while read -r name us; do floor[$name]=$us; done < <(floors "$rate" "$floor_secs" "$serve_pid" \
    "$port" "$pg_port" "$redis_port")
  echo "floors at $rate/s, CPU a request, $floor_secs s each: sendguard ${floor[http]} us a GET /healthz, postgres ${floor[postgres]} us a single-row insert, redis ${floor[redis]} us a PING"
fi
printf '%6s %9s %11s %7s %8s %7s %8s %6s %9s %9s %7s %8s %14s %9s\n' \
  at_s accepted/s delivered/s p99_ms p99.9_ms failed rss_mb files redis_mb pg_mb outbox oldest_s \
  "cpu_ms/1k s,p,r" wakeups/s
hz=$(getconf CLK_TCK)
started=$(date +%s)
steps=$(((minutes * 60 + step - 1) / step))
total_s=0 total_p=0 total_r=0 total_n=0
invites0=$(pgsql -c "SELECT count(*) FROM invites")
metrics0=$(waited)
redis_commands "$redis_port" >"$pg_dir/redis0"
for _ in $(seq 1 "$steps"); do
  d0=$(delivered_count "$metrics_port")
  s0=$(ticks "$serve_pid"); p0=$(pg_ticks); r0=$(ticks "$redis_pid"); w0=$(wakeups "$serve_pid")
  t0=$(date +%s.%N)
  out=$(wrk -t "$threads" -c "$WRK_CONNECTIONS" -d "${step}s" -s benches/invites.lua "http://127.0.0.1:$port" | grep '^RESULT')
  t1=$(date +%s.%N)
  s1=$(ticks "$serve_pid"); p1=$(pg_ticks); r1=$(ticks "$redis_pid"); w1=$(wakeups "$serve_pid")
  elapsed=$(echo "$t1 - $t0" | bc)
  total_s=$((total_s + s1 - s0)) total_p=$((total_p + p1 - p0)) total_r=$((total_r + r1 - r0))
  total_n=$((total_n + $(field requests "$out")))
  delivered=$(awk -v d=$(($(delivered_count "$metrics_port") - d0)) -v t="$elapsed" 'BEGIN { printf "%.0f", d / t }')
  # CPU in ms per 1,000 invites accepted in the step, for sendguard, PostgreSQL and Redis.
  cpu=$(awk -v n="$(field requests "$out")" -v hz="$hz" -v s=$((s1 - s0)) -v p=$((p1 - p0)) -v r=$((r1 - r0)) \
    'BEGIN { k = 1e6 / hz / (n > 0 ? n : 1); printf "%.0f,%.0f,%.0f", s * k, p * k, r * k }')
  rss=$(awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$serve_pid/status")
  files=$(find "/proc/$serve_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  redis_mb=$(redis-cli -p "$redis_port" info memory | tr -d '\r' | awk -F: '/^used_memory:/ {printf "%.0f", $2 / 1048576}')
  pg_mb=$(pgsql -c "SELECT round(pg_database_size(current_database()) / 1048576.0)")
  read -r depth oldest < <(outbox_state "$pg_port" "$db")
  printf '%6d %9.0f %11s %7s %8s %7s %8s %6s %9s %9s %7s %8s %14s %9.0f\n' $(($(date +%s) - started)) "$(field rps "$out")" "$delivered" \
    "$(field p99_ms "$out")" "$(field p999_ms "$out")" "$(field non2xx_or_errors "$out")" "$rss" "$files" "$redis_mb" "$pg_mb" \
    "$depth" "$oldest" "$cpu" "$(echo "($w1 - $w0) / $elapsed" | bc)"
done
metrics1=$(waited)
if [ "$floor_secs" -gt 0 ]; then
  # The run's CPU per invite over the floor's per request: how many of the cheapest requests
  # an invite costs each process.
  awk -v hz="$hz" -v n="$total_n" -v s="$total_s" -v p="$total_p" -v r="$total_r" \
    -v fs="${floor[http]}" -v fp="${floor[postgres]}" -v fr="${floor[redis]}" 'function x(us, f) { return f > 0 ? sprintf("%.2fx", us / f) : "-" }
    BEGIN { k = 1e6 / hz / (n > 0 ? n : 1)
      printf "CPU per invite against the floors: sendguard %.0f us (%s), postgres %.0f us (%s), redis %.0f us (%s)\n",
        s * k, x(s * k, fs), p * k, x(p * k, fp), r * k, x(r * k, fr) }'
fi
redis_commands "$redis_port" >"$pg_dir/redis1"
invites=$(($(pgsql -c "SELECT count(*) FROM invites") - invites0))
echo "delivered share of all invites: $(pgsql -c "SELECT round(100.0 * count(*) FILTER (WHERE status = 'sent') / greatest(count(*), 1), 1) FROM invites")%"
# The batch statements' sizes over the run: invites per commit of the writer.
awk -v a="$(field sendguard_batch_invites_sum "$metrics1")" -v b="$(field sendguard_batch_invites_sum "$metrics0")" \
  -v ca="$(field sendguard_batch_invites_count "$metrics1")" -v cb="$(field sendguard_batch_invites_count "$metrics0")" \
  'BEGIN { printf "invites per commit of the writer: %.2f\n", (ca > cb ? (a - b) / (ca - cb) : 0) }'
database_work "$pg_port" "$db" "$invites"
redis_work "$pg_dir/redis0" "$pg_dir/redis1" "$invites"
