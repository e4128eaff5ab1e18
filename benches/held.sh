#!/usr/bin/env bash
# Does holding an invite answer slower than sending it? A shadow-banned sender must not be able
# to tell from the latency.
#
#   benches/held.sh [SECONDS] [RATE] [ROUNDS]      (defaults: 10 s per run, 500 requests/s, 3)
#
# Starts a PostgreSQL and a Redis of its own (benches/servers.sh), then `sendguard serve` (release
# build) on a fresh database `sendguard_bench_held`, with 20,000 senders `held1…` shadow-banned
# and 20,000 senders `ok1…` active beforehand (both rows exist, so both paths update a row), mail
# to the file transport. Then, ROUNDS times: a paced
# wrk run of held traffic and one of queued traffic (held first in odd rounds, queued first in
# even ones), then both at once at half the rate each (what a banned sender comparing with an
# account of their own that is not banned would see). Prints each run's p50 and p99 and the
# medians over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
rate=${2:-500}
rounds=${3:-3}
threads=2
port=${BENCH_PORT:-18081}
redis_port=$((port + 2))
pg_port=$((port + 3))
redis_url=redis://127.0.0.1:$redis_port
db=sendguard_bench_held
# Without TLS, as benches/invites.sh measures: on loopback the cipher would only add noise.
db_url=postgres://postgres@127.0.0.1:$pg_port/$db?sslmode=disable
prefix=sgheld$$
# shellcheck source=benches/servers.sh
. benches/servers.sh

for cmd in wrk psql redis-cli redis-server; do
  command -v "$cmd" >/dev/null || { echo "benches/held.sh: $cmd is missing (Debian: wrk, postgresql-client, redis-tools, redis-server)" >&2; exit 1; }
done

bin=${SENDGUARD_BIN:-./target/release/sendguard}
[ -n "${SENDGUARD_BIN:-}" ] || cargo build --release -q
serve_pid=
mail=
cleanup() {
  [ -z "$serve_pid" ] || { kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; }
  stop_servers
  [ -z "$mail" ] || rm -rf "$mail" "$mail.log"
}
trap cleanup EXIT
start_postgres "$pg_port"
start_redis "$redis_port"
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE $db"
DATABASE_URL=$db_url $bin migrate >/dev/null
key=$(DATABASE_URL=$db_url $bin api-key create bench 2>/dev/null)
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d "$db" -c "
  INSERT INTO senders (app_id, id, state) SELECT 1, 'held' || n, 'shadow_banned' FROM generate_series(1, 20000) n;
  INSERT INTO senders (app_id, id, state) SELECT 1, 'ok' || n, 'active' FROM generate_series(1, 20000) n;"
mail=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)

DATABASE_URL=$db_url REDIS_URL=$redis_url SENDGUARD_KEY_PREFIX=$prefix \
  SENDGUARD_LISTEN=127.0.0.1:$port SENDGUARD_METRICS_LISTEN=127.0.0.1:0 SENDGUARD_MAIL_DIR=$mail \
  RUST_LOG=warn $bin serve >/dev/null 2>>"$mail.log" &
serve_pid=$!
for _ in $(seq 1 100); do
  $bin healthcheck --listen "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.2
done

export SENDGUARD_API_KEY=$key WRK_THREADS=$threads RATE=$rate SPAM_SHARE=0 RECIPIENTS=1000000
run() {
  SENDER_PREFIX=$1 wrk -t "$threads" -c 16 -d "${secs}s" -s benches/invites.lua \
    "http://127.0.0.1:$port" | grep '^RESULT'
}
# Held and queued traffic at the same time, half the rate each: two lines, held first.
run_together() {
  local held_out ok_out
  held_out=$(mktemp) ok_out=$(mktemp)
  RATE=$((rate / 2)) run held >"$held_out" &
  RATE=$((rate / 2)) run ok >"$ok_out"
  wait
  cat "$held_out" "$ok_out"
  rm -f "$held_out" "$ok_out"
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# p50 and p99 of each kind, by name: held, ok (alone), held+ and ok+ (together).
declare -A p50s p99s
row() {
  local kind=$1 round=$2 out=$3
  printf '%-7s %6s %9s %8s %8s %7s\n' "$kind" "$round" "$(field rps "$out")" \
    "$(field p50_ms "$out")" "$(field p99_ms "$out")" "$(field non2xx_or_errors "$out")"
  p50s[$kind]+="$(field p50_ms "$out") " p99s[$kind]+="$(field p99_ms "$out") "
}
echo "machine: $(nproc) cores; $(date -u +%F); $rate requests/s, $secs s per run, $rounds rounds"
echo "postgres: $(postgres_settings "$pg_port")"
printf '%-7s %6s %9s %8s %8s %7s\n' kind round rps p50_ms p99_ms failed
for round in $(seq 1 "$rounds"); do
  # The kinds alone take turns at going first, so that what the run before leaves behind (the
  # outbox still sending, the disk writing back) falls on each of them alike.
  order="held ok"
  [ $((round % 2)) = 1 ] || order="ok held"
  for kind in $order; do
    row "$kind" "$round" "$(run "$kind")"
  done
  both=$(run_together)
  row held+ "$round" "$(head -n 1 <<<"$both")"
  row ok+ "$round" "$(tail -n 1 <<<"$both")"
done
echo
for kind in held ok held+ ok+; do
  printf 'median  %-6s p50 %s ms, p99 %s ms\n' "$kind" \
    "$(tr ' ' '\n' <<<"${p50s[$kind]}" | grep . | median)" "$(tr ' ' '\n' <<<"${p99s[$kind]}" | grep . | median)"
done
echo "(held, ok: each kind alone; held+, ok+: both at once, half the rate each)"
statuses=$(psql -At -h 127.0.0.1 -p "$pg_port" -U postgres -d "$db" -c "SELECT status || '=' || count(*) FROM invites GROUP BY status ORDER BY 1" | tr '\n' ' ')
echo "invites by status: $statuses"
