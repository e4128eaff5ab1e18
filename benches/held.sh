#!/usr/bin/env bash
# Does holding an invite answer slower than sending it? A shadow-banned sender must not be able
# to tell from the latency.
#
#   benches/held.sh [SECONDS] [RATE] [ROUNDS]      (defaults: 10 s per run, 500 requests/s, 3)
#
# Starts `sendguard serve` (release build) on a fresh database `sendguard_bench_held`, with
# 20,000 senders `held1…` shadow-banned and 20,000 senders `ok1…` active beforehand (both rows
# exist, so both paths update a row), mail to the file transport. Then alternates paced wrk
# runs of held traffic and queued traffic, ROUNDS of each, and prints each run's p50 and p99
# and the median over the rounds.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
rate=${2:-500}
rounds=${3:-3}
threads=2
port=${BENCH_PORT:-18081}
redis_url=${REDIS_URL:-redis://127.0.0.1:6379}
db=sendguard_bench_held
db_url=postgres://postgres@127.0.0.1:5432/$db
prefix=sgheld$$

for cmd in wrk psql redis-cli; do
  command -v "$cmd" >/dev/null || { echo "benches/held.sh: $cmd is missing (Debian: wrk, postgresql-client, redis-tools)" >&2; exit 1; }
done

cargo build --release -q
bin=./target/release/sendguard
psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
DATABASE_URL=$db_url $bin migrate >/dev/null
key=$(DATABASE_URL=$db_url $bin api-key create bench 2>/dev/null)
psql -q -h 127.0.0.1 -U postgres -d "$db" -c "
  INSERT INTO senders (app_id, id, state) SELECT 1, 'held' || n, 'shadow_banned' FROM generate_series(1, 20000) n;
  INSERT INTO senders (app_id, id, state) SELECT 1, 'ok' || n, 'active' FROM generate_series(1, 20000) n;"
mail=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)

DATABASE_URL=$db_url REDIS_URL=$redis_url SENDGUARD_KEY_PREFIX=$prefix \
  SENDGUARD_LISTEN=127.0.0.1:$port SENDGUARD_METRICS_LISTEN=127.0.0.1:0 SENDGUARD_MAIL_DIR=$mail \
  RUST_LOG=warn $bin serve >/dev/null 2>>"$mail.log" &
serve_pid=$!
cleanup() {
  kill "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
  redis-cli -u "$redis_url" --scan --pattern "$prefix:*" | xargs -r -n 500 redis-cli -u "$redis_url" unlink >/dev/null
  rm -rf "$mail" "$mail.log"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  $bin healthcheck --listen "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.2
done

export SENDGUARD_API_KEY=$key WRK_THREADS=$threads RATE=$rate SPAM_SHARE=0 RECIPIENTS=1000000
run() {
  SENDER_PREFIX=$1 wrk -t "$threads" -c 16 -d "${secs}s" -s benches/invites.lua \
    "http://127.0.0.1:$port" | grep '^RESULT'
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

held_p50=() held_p99=() queued_p50=() queued_p99=()
echo "machine: $(nproc) cores; $(date -u +%F); $rate requests/s, $secs s per run, $rounds rounds"
printf '%-7s %6s %9s %8s %8s %7s\n' kind round rps p50_ms p99_ms failed
for round in $(seq 1 "$rounds"); do
  for kind in held ok; do
    out=$(run "$kind")
    printf '%-7s %6s %9s %8s %8s %7s\n' "$kind" "$round" "$(field rps "$out")" \
      "$(field p50_ms "$out")" "$(field p99_ms "$out")" "$(field non2xx_or_errors "$out")"
    if [ "$kind" = held ]; then
      held_p50+=("$(field p50_ms "$out")") held_p99+=("$(field p99_ms "$out")")
    else
      queued_p50+=("$(field p50_ms "$out")") queued_p99+=("$(field p99_ms "$out")")
    fi
  done
done
echo
printf 'median  held:   p50 %s ms, p99 %s ms\n' "$(printf '%s\n' "${held_p50[@]}" | median)" "$(printf '%s\n' "${held_p99[@]}" | median)"
printf 'median  queued: p50 %s ms, p99 %s ms\n' "$(printf '%s\n' "${queued_p50[@]}" | median)" "$(printf '%s\n' "${queued_p99[@]}" | median)"
statuses=$(psql -At -h 127.0.0.1 -U postgres -d "$db" -c "SELECT status || '=' || count(*) FROM invites GROUP BY status ORDER BY 1" | tr '\n' ' ')
echo "invites by status: $statuses"
