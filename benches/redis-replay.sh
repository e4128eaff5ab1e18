#!/usr/bin/env bash
# What each script call of delivered traffic costs Redis, measured apart from the load.
#
#   benches/redis-replay.sh [RATE] [WARMUP_SECONDS]   (defaults: 1000 invites/s, 45 s)
#   SENDGUARD_BIN=path benches/redis-replay.sh ...    (that binary instead of a release build)
#   REPLAY_REPEAT (default 3) times each call is sent again; BENCH_DIR as benches/servers.sh.
#
# Under load, the scripts' times Redis reports are wall time: on a machine whose cores are
# shared with Postgres, the service and the load generator, they include every moment Redis
# waited for a core. So:
#   1. `benches/soak.sh 1 RATE` runs (its own servers, delivered traffic), and after
#      WARMUP_SECONDS, 2 s of its Redis's `MONITOR` and a snapshot of its data are kept;
#   2. a Redis of the bench's own is started on that snapshot, with nothing else running, and
#      `sendguard bench replay` sends the captured script calls again one at a time, then to a
#      script that only returns, timing them by `INFO commandstats`.
# It prints, for the limiter's script and the campaign group script: the time of a call in
# Redis, the same call to a script that only returns (reading its keys and arguments), the
# commands the script runs and their time, what is left to the script's own Lua, and Redis's
# CPU a call with its socket (one client, one call at a time: a wake-up each).
# The snapshot is taken a moment after the capture, so a replayed call meets its keys as the
# traffic left them, a little later than when it ran.
set -euo pipefail
cd "$(dirname "$0")/.."

rate=${1:-1000}
warmup=${2:-45}
repeat=${REPLAY_REPEAT:-3}
port=18280
soak_redis=$((port + 2))
own_redis=$((port + 10))

for cmd in redis-cli redis-server; do
  command -v "$cmd" >/dev/null || { echo "benches/redis-replay.sh: $cmd is missing (Debian: redis-tools, redis-server)" >&2; exit 1; }
done
bin=${SENDGUARD_BIN:-./target/release/sendguard}
[ -n "${SENDGUARD_BIN:-}" ] || cargo build --release -q
work=$(mktemp -d -p "${BENCH_DIR:-/var/tmp}" sendguard-replay.XXXXXX)
soak_pid=
own_pid=
cleanup() {
  [ -z "$soak_pid" ] || kill "$soak_pid" 2>/dev/null || true
  [ -z "$own_pid" ] || kill "$own_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

BENCH_PORT=$port SOAK_STEP=30 SENDGUARD_BIN=$bin benches/soak.sh 1 "$rate" >"$work/soak.log" 2>&1 &
soak_pid=$!
# The soak's Redis answers once its servers are up; the traffic starts after the service does.
for _ in $(seq 1 600); do
  grep -q '^ *at_s' "$work/soak.log" && break
  kill -0 "$soak_pid" 2>/dev/null || { cat "$work/soak.log" >&2; exit 1; }
  sleep 0.5
done
sleep "$warmup"
timeout 2 redis-cli -p "$soak_redis" monitor >"$work/capture" || true
redis-cli -p "$soak_redis" --rdb "$work/dump.rdb" >/dev/null 2>&1
wait "$soak_pid" || { cat "$work/soak.log" >&2; exit 1; }
soak_pid=
echo "the soak the calls were captured from:"
grep -A 3 '^ *at_s' "$work/soak.log"
grep '^redis per invite' "$work/soak.log" || true

redis-server --port "$own_redis" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$work" --dbfilename dump.rdb >/dev/null &
own_pid=$!
for _ in $(seq 1 100); do
  [ "$(redis-cli -p "$own_redis" ping 2>/dev/null)" = PONG ] && break
  sleep 0.2
done
echo "captured: $(grep -c '"EVALSHA"' "$work/capture") script calls in 2 s; replayed $repeat times each:"
"$bin" bench replay --redis-url "redis://127.0.0.1:$own_redis" --capture "$work/capture" --repeat "$repeat"
