#!/usr/bin/env bash
# The whole service against the ceiling of a durable record on this machine, in one run.
#
#   benches/invites.sh [SECONDS] [CONNECTIONS]      (defaults: 15 s per phase, 32 connections)
#   SENDGUARD_BIN=path benches/invites.sh ...       (that binary instead of a release build here)
#   TRACE_WAL_FLUSH=1 benches/invites.sh ...        (as root, with perf: how long the WAL flushes
#                                                    of the writer and of the other Postgres
#                                                    processes took in the paced phase)
#   BENCH_PORT, and RECIPIENTS, SENDERS, RATE as benches/invites.lua reads them, change the
#   defaults of the ports and of the traffic. TRAFFIC=suppressed: the traffic of the runs
#   before (5,000 recipients, most invites suppressed) instead of traffic that mostly delivers.
#   PG_SETTINGS, BENCH_DIR, PG_BIN: see benches/servers.sh.
#   CEILING_CLIENTS, SATURATION_CONNECTIONS  (defaults "16 64" and "32 64 128"; "" skips them) the
#                                             other concurrencies of step 5.
#
# Starts a PostgreSQL of its own configured as a small production server (autovacuum on; its
# settings are printed with the figures), a Redis server of its own (keys under the default
# prefix `sg`, so that their bytes are those of a deployment's keys) and Postfix's smtp-sink
# (benches/servers.sh), then `sendguard serve` (release build) on a fresh database with the weeks
# of `invites` that 90 days' retention keeps, mail through the pooled SMTP transport to the sink.
# The traffic mostly delivers: senders and recipients scale with the run (benches/servers.sh,
# `traffic_for`), established senders, realistic messages (benches/invites.lua). Then:
#   1. ceiling    pgbench inserting one invite-shaped row per transaction (same table, indexes
#                 and JSON decision as `invites`), CONNECTIONS clients;
#   2. saturation wrk, CONNECTIONS connections, realistic traffic (benches/invites.lua); once
#                 the outbox has delivered what saturation left in it, the ceiling again: the
#                 ratio is to the higher of the two ceilings;
#   3. paced      wrk at 1,000 requests/s, for latency at a fixed load, and how many WAL
#                 segments Postgres created meanwhile (each one stalls every commit); then the
#                 same on the file transport (hourly folders on the scratch disk);
#   4. global-hot saturation again with SENDGUARD_GLOBAL_FLUSH_MS=0: the `global` rule counted in
#                 Redis on every invite (one hot key) instead of in process and flushed;
#   5. sweep      each side at other concurrencies, after what one invite costs is measured:
#                 pgbench with CEILING_CLIENTS, the service with SATURATION_CONNECTIONS. With
#                 CONNECTIONS closed-loop clients the service can leave CPU idle while every
#                 request waits on Redis or on the writer, and pgbench can lose to its own
#                 contention at many clients: the best ratio is the service's best rate at any
#                 concurrency against pgbench's best.
# For each phase it prints throughput (accepted invites and delivered emails per second),
# latency, the outbox's depth and the age of its oldest queued invite at the phase's end, and the
# CPU share (of all cores) used by sendguard, PostgreSQL, Redis and the load generator, then what
# one invite costs.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-15}
conns=${2:-32}
threads=2
port=${BENCH_PORT:-18080}
metrics_port=$((port + 1))
redis_port=$((port + 2))
pg_port=$((port + 3))
smtp_port=$((port + 4))
redis_url=redis://127.0.0.1:$redis_port
db=sendguard_bench
# Without TLS on both sides: pgbench (libpq) would use TLS by default wherever the server has
# `ssl = on`, as Debian's has, and the service by its own default too, each paying the cipher on
# loopback. One transport for both, so that the ratio compares the work and not the encryption.
export PGSSLMODE=disable
db_url=postgres://postgres@127.0.0.1:$pg_port/$db?sslmode=disable
prefix=sg
hz=$(getconf CLK_TCK)
cores=$(nproc)
# shellcheck source=benches/servers.sh
. benches/servers.sh

[ "${TRACE_WAL_FLUSH:-0}" != 1 ] || command -v perf >/dev/null ||
  { echo "benches/invites.sh: TRACE_WAL_FLUSH=1 needs perf (Debian: linux-perf)" >&2; exit 1; }
for cmd in wrk pgbench psql redis-cli redis-server curl; do
  command -v "$cmd" >/dev/null || { echo "benches/invites.sh: $cmd is missing (Debian: wrk, postgresql-client, redis-tools, redis-server, curl)" >&2; exit 1; }
done

# SENDGUARD_BIN: a binary built elsewhere (another commit's, to compare two builds in turn).
bin=${SENDGUARD_BIN:-./target/release/sendguard}
[ -n "${SENDGUARD_BIN:-}" ] || cargo build --release -q
mail=
cleanup() {
  stop_serve
  [ -z "${trace_pid:-}" ] || kill "$trace_pid" 2>/dev/null || true
  rm -f "${trace_file:-}"
  stop_servers
  [ -z "$mail" ] || rm -rf "$mail" "$mail.log"
}
trap cleanup EXIT
start_postgres "$pg_port"
start_redis "$redis_port"
start_smtp_sink "$smtp_port"
psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE $db"
DATABASE_URL=$db_url $bin migrate >/dev/null
key=$(DATABASE_URL=$db_url $bin api-key create bench 2>/dev/null)
standard_text "$bin" "$db_url"
# The file transport's folder, on the same disk as the database (its run writes hourly folders).
mail=$(mktemp -d -p "$pg_dir")
pgsql() { psql -q -At -h 127.0.0.1 -p "$pg_port" -U postgres -d "$db" "$@"; }
# The weeks of `invites` an installation with the default 90 days' retention holds: a statement
# that does not name an invite's week searches every one of them.
pgsql -c "SELECT sendguard_invite_weeks(now() - interval '90 days', 2)" >/dev/null

# `serve` with global rules flushed every $1 ms (0: every invite counts in Redis), mail through
# SMTP to the sink, or with $2 = file to the file transport.
serve_pid=
start_serve() {
  local smtp=smtp://127.0.0.1:$smtp_port
  [ "${2:-smtp}" != file ] || smtp=
  env ${smtp:+SENDGUARD_SMTP_URL=$smtp} \
    DATABASE_URL=$db_url REDIS_URL=$redis_url SENDGUARD_KEY_PREFIX=$prefix SENDGUARD_GLOBAL_FLUSH_MS=$1 \
    SENDGUARD_LISTEN=127.0.0.1:$port SENDGUARD_METRICS_LISTEN=127.0.0.1:$metrics_port SENDGUARD_MAIL_DIR=$mail RUST_LOG=warn \
    SENDGUARD_PUBLIC_URL=https://sendguard.example.com $bin serve >/dev/null 2>>"$mail.log" &
  serve_pid=$!
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  cat "$mail.log" >&2
  exit 1
}
stop_serve() {
  [ -n "$serve_pid" ] || return 0
  kill "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
}
# The run's traffic: six load phases of $secs seconds at up to 20,000 invites a second.
traffic_for $((6 * secs * 20000))
start_serve 200

# Busy ticks of the whole machine (all cores), from /proc/stat.
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# Runs a load command and prints the CPU shares (0-1 of all cores) of sendguard, PostgreSQL,
# Redis, the load generator and the whole machine on its last line, after the command's output,
# and before it the emails delivered per second and the outbox at the end (depth, oldest in s).
measured() {
  local s0 p0 r0 b0 t0 t1 load_pid d0
  d0=$(delivered_count "$metrics_port")
  s0=$(ticks "$serve_pid"); p0=$(pg_ticks); r0=$(ticks "$redis_pid"); b0=$(busy_ticks); t0=$(date +%s.%N)
  "$@" &
  load_pid=$!
  local l=0
  while kill -0 "$load_pid" 2>/dev/null; do
    l=$(ticks "$load_pid")
    sleep 0.5
  done
  wait "$load_pid"
  t1=$(date +%s.%N)
  read -r depth oldest < <(outbox_state "$pg_port" "$db")
  awk -v d=$(($(delivered_count "$metrics_port") - d0)) -v t="$(echo "$t1 - $t0" | bc)" -v q="$depth" -v o="$oldest" \
    'BEGIN { printf "DELIVERED per_sec=%.1f outbox=%d oldest_s=%s\n", d / t, q, o }'
  awk -v t="$(echo "$t1 - $t0" | bc)" -v hz="$hz" -v n="$cores" \
    -v s=$(($(ticks "$serve_pid") - s0)) -v p=$(($(pg_ticks) - p0)) -v r=$(($(ticks "$redis_pid") - r0)) -v l="$l" \
    -v b=$(($(busy_ticks) - b0)) \
    'BEGIN { c = t * hz * n; printf "CPU sendguard=%.2f postgres=%.2f redis=%.2f load=%.2f machine=%.2f\n", s / c, p / c, r / c, l / c, b / c }'
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2" | tail -n 1; }

# 1. The ceiling: the same row, one per transaction, into a plain table with the columns and
#    indexes of `invites` (its partitions' indexes, on one table). Measured before the saturation
#    phase and again right after it: a machine's speed can drift by a third within minutes. The
#    ratio is taken against the higher of the two, so that a ceiling measured in a slow moment
#    never flatters it.
#    Prints pgbench's transactions/s, then its CPU line.
ceiling_phase() {
  local clients=$1 script out tps
  pgsql -c "CREATE TABLE ceiling (LIKE invites INCLUDING DEFAULTS INCLUDING INDEXES)"
  script=$(mktemp)
  cat >"$script" <<'SQL'
\set n random(1, 20000)
\set r random(1, 5000)
INSERT INTO ceiling (id, api_key_id, app_id, sender_id, recipient, recipient_domain, sender_ip,
    resource, status, decision)
VALUES (gen_random_uuid(), 1, 1, 'u' || :n, 'r' || :r || '@example.com', 'example.com', '10.1.2.3',
    'doc-' || :n, 'queued',
    '{"rules": [["global-minute", 60548, 10000, 60, "exceeded"], ["ip-hourly", 7, 300, 3600, "ok"], ["new-sender-links", 0, 0, 86400, "ok"], ["recipient-daily", 3, 3, 86400, "ok"], ["sender-bounces-daily", 0, 10, 86400, "ok"], ["sender-complaints-daily", 0, 2, 86400, "ok"], ["sender-daily", 7, 500, 86400, "ok"], ["sender-distinct-recipients-daily", 7, 100, 86400, "ok"], ["sender-hourly", 7, 60, 3600, "ok"]], "action": "monitor", "reason": "rules"}');
SQL
  out=$(measured pgbench -h 127.0.0.1 -p "$pg_port" -U postgres -n -M prepared -c "$clients" -j "$threads" -T "$secs" -f "$script" "$db" 2>&1)
  rm -f "$script"
  pgsql -c "DROP TABLE ceiling"
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
  [ -n "$tps" ] || { echo "pgbench failed:" >&2; echo "$out" >&2; return 1; }
  echo "$tps"
  grep '^CPU' <<<"$out"
}
first_ceiling=$(ceiling_phase "$conns")

# 2. Saturation, then 3. a fixed 1,000 requests/s.
before=$(pgsql -c "SELECT count(*) FROM invites")
# Script calls Redis served (EVALSHA and EVAL), for the calls per invite.
script_calls() {
  redis-cli -u "$redis_url" info commandstats | tr -d '\r' |
    awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ {n += $3} END {print n + 0}'
}
calls_before=$(script_calls)
# Reads of client sockets Redis made: how many invites' calls arrive in one read.
redis_reads() { redis-cli -u "$redis_url" info stats | tr -d '\r' | awk -F: '/^total_reads_processed:/ {print $2}'; }
reads_before=$(redis_reads)
# The service's own latency histograms, for where a request waits, and the size of its
# batches: summed over the phase.
waits_before=$(waited)
# WAL written, for its bytes per invite (the cluster's: nothing else writes during the phase).
wal_lsn() { pgsql -c "SELECT pg_current_wal_lsn()"; }
wal_before=$(wal_lsn)
export SENDGUARD_API_KEY=$key WRK_THREADS=$threads
sat_out=$(measured wrk -t "$threads" -c "$conns" -d "${secs}s" -s benches/invites.lua "http://127.0.0.1:$port")
after=$(pgsql -c "SELECT count(*) FROM invites")
calls_after=$(script_calls)
reads_after=$(redis_reads)
waits_after=$(waited)
wal_bytes=$(pgsql -c "SELECT pg_wal_lsn_diff('$(wal_lsn)', '$wal_before')::bigint")
# What saturation accepted faster than the outbox delivers waits there. The second ceiling and
# the paced phases measure pgbench alone and the service at 1,000/s, not the service catching up,
# so each starts once the outbox is empty (waiting at most 5 minutes); how long that took is the
# backlog's own figure. Prints the invites waiting at the start, the seconds taken and those left.
drain_outbox() {
  local waiting depth started
  started=$(date +%s)
  read -r waiting _ < <(outbox_state "$pg_port" "$db")
  depth=$waiting
  for _ in $(seq 1 600); do
    [ "$depth" -gt 0 ] || break
    sleep 0.5
    read -r depth _ < <(outbox_state "$pg_port" "$db")
  done
  echo "$waiting $(($(date +%s) - started)) $depth"
}
read -r backlog drain_secs backlog_left < <(drain_outbox)
second_ceiling=$(ceiling_phase "$conns")
ceiling=$(awk -v a="$(head -n 1 <<<"$first_ceiling")" -v b="$(head -n 1 <<<"$second_ceiling")" 'BEGIN { print (a > b ? a : b) }')
# WAL segments in pg_wal: one more for each segment Postgres had to create rather than reuse
# (net of any a checkpoint removed meanwhile).
wal_segments() { pgsql -c "SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"; }
segments_before=$(wal_segments)
# Cumulative counts of the service's latency histograms at 5 and 10 ms, and their totals, for
# which stage the paced phase's slow requests waited in.
tails() {
  curl -fs "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^sendguard_(http_request|postgres|redis|sender_read)_seconds_(bucket|count)/ {
      name = $1; sub(/\{.*/, "", name); sub(/_seconds_(bucket|count)$/, "", name)
      if ($1 ~ /_count/) n[name] += $2
      else if ($1 ~ /le="0.005"/) five[name] += $2
      else if ($1 ~ /le="0.01"/) ten[name] += $2 }
      END { for (k in n) printf "%s_n=%s %s_5=%s %s_10=%s ", k, n[k], k, five[k], k, ten[k] }'
}
tails_before=$(tails)
# Every answer waits for its batch's commit, and so for the disk's flush of the WAL: when the
# paced phase's tail is long, the flushes (fdatasync and fsync of every Postgres process, traced
# by `perf trace`) show whether the disk was slow: the writer's connections' own, and the other
# processes' (the outbox, the WAL writer, the checkpointer), whose flush a commit may wait for
# instead of flushing itself. Tracing costs each flush a little; off unless asked for.
trace_file=
trace_pid=
if [ "${TRACE_WAL_FLUSH:-0}" = 1 ]; then
  writers=$(pgsql -c "SELECT string_agg(pid::text, ',') FROM pg_stat_activity
      WHERE datname = current_database() AND application_name = 'sendguard-batches'")
  [ -n "$writers" ] || { echo "benches/invites.sh: no sendguard-batches connection to trace" >&2; exit 1; }
  trace_file=$(mktemp)
  timeout $((secs + 5)) perf trace -a -e fdatasync,fsync -o "$trace_file" 2>>"$mail.log" &
  trace_pid=$!
  # perf takes a moment to attach; the phase starts once it has.
  sleep 1
  kill -0 "$trace_pid" 2>/dev/null || { echo "benches/invites.sh: perf trace did not start (root and perf are needed):" >&2; cat "$mail.log" >&2; exit 1; }
fi
paced_out=$(RATE=1000 measured wrk -t "$threads" -c 20 -d "${secs}s" -s benches/invites.lua "http://127.0.0.1:$port")
segments_created=$(($(wal_segments) - segments_before))
if [ -n "$trace_file" ]; then
  kill -INT "$trace_pid" 2>/dev/null || true
  wait "$trace_pid" 2>/dev/null || true
fi
tails_after=$(tails)
# The same paced load with mail to the file transport (hourly folders on the scratch disk).
read -r _ _ paced_left < <(drain_outbox)
stop_serve
start_serve 200 file
file_out=$(RATE=1000 measured wrk -t "$threads" -c 20 -d "${secs}s" -s benches/invites.lua "http://127.0.0.1:$port")
# 4. Saturation again with the global rule counted in Redis on every invite (one hot key).
stop_serve
start_serve 0
exact_out=$(measured wrk -t "$threads" -c "$conns" -d "${secs}s" -s benches/invites.lua "http://127.0.0.1:$port")

exact=$(grep '^RESULT' <<<"$exact_out")
sat=$(grep '^RESULT' <<<"$sat_out")
paced=$(grep '^RESULT' <<<"$paced_out")
sat_rps=$(field rps "$sat")
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); $(date -u +%F); $secs s per phase"
echo "postgres: $(postgres_settings "$pg_port")"
echo "traffic: ${TRAFFIC:-delivered}, $SENDERS senders, $RECIPIENTS recipients; mail through SMTP to smtp-sink (paced-file: the file transport)"
echo
header() {
  printf '%-15s %9s %9s %6s %7s %7s %8s %7s %7s %7s   %s\n' phase accepted/s delivered/s ratio p50_ms p99_ms p99.9_ms failed outbox oldest_s "cpu share (of $cores cores)"
}
# A phase's row: name, accepted per second, ratio, and the measured output (RESULT, DELIVERED
# and CPU lines).
row() {
  local result delivered
  result=$(grep '^RESULT' <<<"$4" || true)
  delivered=$(grep '^DELIVERED' <<<"$4" || true)
  printf '%-15s %9.0f %11s %6s %7s %7s %8s %7s %7s %7s   %s\n' "$1" "$2" "$(field per_sec "$delivered" | sed 's/^$/-/')" "$3" \
    "$(field p50_ms "$result" | sed 's/^$/-/')" "$(field p99_ms "$result" | sed 's/^$/-/')" "$(field p999_ms "$result" | sed 's/^$/-/')" \
    "$(field non2xx_or_errors "$result" | sed 's/^$/-/')" "$(field outbox "$delivered" | sed 's/^$/-/')" "$(field oldest_s "$delivered" | sed 's/^$/-/')" \
    "$(grep '^CPU' <<<"$4" | sed 's/^CPU //')"
}
ratio() { printf '%.2f' "$(echo "$1 / $ceiling" | bc -l)"; }
header
for run in "$first_ceiling" "$second_ceiling"; do
  row ceiling "$(head -n 1 <<<"$run")" "$(ratio "$(head -n 1 <<<"$run")")" "$(tail -n 1 <<<"$run")"
done
row saturation "$sat_rps" "$(ratio "$sat_rps")" "$sat_out"
row "paced@1000" "$(field rps "$paced")" - "$paced_out"
row "paced-file" "$(field rps "$(grep '^RESULT' <<<"$file_out")")" - "$file_out"
exact_rps=$(field rps "$exact")
row "global-hot" "$exact_rps" "$(ratio "$exact_rps")" "$exact_out"
echo "outbox after saturation: $backlog invites waiting, delivered in ${drain_secs} s ($backlog_left left) before the paced phases; after paced@1000: $paced_left left"

# What one invite costs: Redis bytes per active sender, Postgres bytes per invite, CPU per 1,000.
invites=$(pgsql -c "SELECT count(*) FROM invites")
senders=$(pgsql -c "SELECT count(*) FROM senders")
# Every week of invites, and the idempotency keys (the bench sends none).
table_bytes=$(pgsql -c "SELECT sum(pg_total_relation_size(inhrelid)) + pg_total_relation_size('idempotency_keys')
    FROM pg_inherits WHERE inhparent = 'invites'::regclass")
# Counter keys by the kind of their subject (`{prefix}:{kind:...}:...`), one in 50 of each kind
# sampled with MEMORY USAGE: the IP and recipient keys grow with the traffic's IPs and
# recipients, not with its senders.
declare -A kind_keys kind_sampled kind_bytes
while read -r k; do
  kind=${k#*\{}
  kind=${kind%%[:\}]*}
  n=$((${kind_keys[$kind]:-0} + 1))
  kind_keys[$kind]=$n
  if [ $((n % 50)) -eq 1 ]; then
    # Nothing when the key expired since the scan: the next one of its kind is sampled.
    bytes=$(redis-cli -u "$redis_url" memory usage "$k")
    if [ -n "$bytes" ]; then
      kind_sampled[$kind]=$((${kind_sampled[$kind]:-0} + 1))
      kind_bytes[$kind]=$((${kind_bytes[$kind]:-0} + bytes))
    else
      kind_keys[$kind]=$((n - 1))
    fi
  fi
done < <(redis-cli -u "$redis_url" --scan --pattern "$prefix:*")
# Estimated bytes of every key of a kind: its sampled mean times its keys.
kind_total() { echo $((${kind_bytes[$1]:-0} * ${kind_keys[$1]:-0} / ${kind_sampled[$1]:-1})); }
sat_cpu=$(grep '^CPU' <<<"$sat_out")
echo
echo "invites recorded: $invites ($((after - before)) in the saturation phase), senders: $senders"
# What the rules made of them: with few recipients (RECIPIENTS), most invites after the first
# few thousand are suppressed by the recipient rule and never reach the outbox.
echo "invites by status: $(pgsql -c "SELECT string_agg(status || ' ' || n, ', ' ORDER BY n DESC)
    FROM (SELECT status, count(*) AS n FROM invites GROUP BY status) s")"
echo "postgres bytes per invite (table + indexes + TOAST): $((table_bytes / invites))"
echo "postgres WAL bytes per invite in the saturation phase: $((wal_bytes / ((after - before) > 0 ? (after - before) : 1)))"
awk -v c=$((calls_after - calls_before)) -v n=$((after - before)) \
  'BEGIN { printf "redis script calls per invite in the saturation phase: %.2f\n", c / (n > 0 ? n : 1) }'
awk -v r=$((reads_after - reads_before)) -v n=$((after - before)) \
  'BEGIN { printf "redis socket reads per invite in the saturation phase: %.2f\n", r / (n > 0 ? n : 1) }'
per_sender() { echo $(($1 / (senders > 0 ? senders : 1))); }
all_kinds=0
for kind in "${!kind_keys[@]}"; do all_kinds=$((all_kinds + $(kind_total "$kind"))); done
echo "redis bytes per active sender: $(per_sender "$all_kinds")" \
  "(its own keys $(per_sender "$(kind_total sender)"); IP keys $(per_sender "$(kind_total ip)")," \
  "$(awk -v k="${kind_keys[ip]:-0}" -v n="$senders" 'BEGIN { printf "%.1f", k / (n > 0 ? n : 1) }') per sender;" \
  "recipient keys $(per_sender "$(kind_total recipient)");" \
  "$(kind_total global) bytes of global keys)"
# The mean of a histogram over the saturation phase, times $2.
mean_of() {
  awk -v b="$(field "${1}_sum" "$waits_before")" -v a="$(field "${1}_sum" "$waits_after")" \
    -v cb="$(field "${1}_count" "$waits_before")" -v ca="$(field "${1}_count" "$waits_after")" -v x="$2" \
    'BEGIN { printf "%.2f", (ca > cb ? (a - b) * x / (ca - cb) : 0) }'
}
mean_ms() { mean_of "$1" 1000; }
# Mean time per request in the saturation phase: the whole request (invites route and every
# other), the writer (queue, batch statement, commit) and the rules' Redis calls; the reads of
# senders' standings the cache missed (not every request makes one); and how many invites each
# commit wrote.
sender_reads=$(awk -v a="$(field sendguard_sender_read_seconds_count "$waits_after")" \
  -v b="$(field sendguard_sender_read_seconds_count "$waits_before")" -v n=$((after - before)) \
  'BEGIN { printf "%.2f", (a - b) / (n > 0 ? n : 1) }')
echo "mean ms per request at saturation: whole request $(mean_ms sendguard_http_request_seconds)," \
  "waiting on the writer $(mean_ms sendguard_postgres_seconds), on Redis $(mean_ms sendguard_redis_seconds);" \
  "per sender read $(mean_ms sendguard_sender_read_seconds) ($sender_reads reads per invite)"
echo "invites per commit at saturation: $(mean_of sendguard_batch_invites 1)"
# Per stage of a request in the paced phase: the share of its waits over 5 and over 10 ms.
over() {
  awk -v n0="$(field "${1}_n" "$tails_before")" -v n1="$(field "${1}_n" "$tails_after")" \
    -v a0="$(field "${1}_5" "$tails_before")" -v a1="$(field "${1}_5" "$tails_after")" \
    -v b0="$(field "${1}_10" "$tails_before")" -v b1="$(field "${1}_10" "$tails_after")" \
    'BEGIN { n = n1 - n0; if (n <= 0) { printf "none"; exit }
      printf "%.2f%% over 5 ms, %.2f%% over 10 ms (of %d)", 100 * (n - (a1 - a0)) / n, 100 * (n - (b1 - b0)) / n, n }'
}
echo "paced phase, slow waits: whole request $(over sendguard_http_request); on the writer $(over sendguard_postgres);" \
  "on Redis $(over sendguard_redis); of sender reads $(over sendguard_sender_read)"
echo "WAL segments created during the paced phase (net): $segments_created"
if [ -n "$trace_file" ]; then
  # A flush: `<ms since start> (<duration> ms): postgres/<pid> fdatasync(fd: N) = 0`; one that
  # another event interrupted is a line without a duration (`( ): … fdatasync(fd: N) ...`) and
  # then one with it (`( N ms): postgres/<pid>  ... [continued]: fdatasync()) = 0`). Tracing
  # every CPU, perf sometimes prints such a flush once more with a negative duration wrapped
  # around 2^64 ns (about 1.8e13 ms): not a flush of its own, skipped.
  awk -v writers=",$writers," '
    / postgres\/[0-9]+ .*f(data)?sync\(/ && /^ *[0-9.]+ \( *[0-9.]+ ms\)/ {
      d = $0; sub(/^[^(]*\( */, "", d); sub(/ ms\).*/, "", d); d += 0
      if (d > 1e9) next
      pid = $0; sub(/^.*postgres\//, "", pid); sub(/ .*/, "", pid)
      k = index(writers, "," pid ",") ? "w" : "o"
      n[k]++; s[k] += d; if (d > 5) f[k]++; if (d > 10) t[k]++; if (d > m[k]) m[k] = d
    }
    function line(k, what) {
      printf "%s in the paced phase: %d, mean %.3f ms, %d over 5 ms, %d over 10 ms, the longest %.1f ms%s\n",
        what, n[k], (n[k] ? s[k] / n[k] : 0), f[k], t[k], m[k], (n[k] ? "" : " (nothing traced)")
    }
    END { line("w", "the writer'"'"'s WAL flushes"); line("o", "other Postgres processes'"'"' flushes") }' "$trace_file"
fi
awk -v rps="$sat_rps" -v n="$cores" \
  -v s="$(field sendguard "$sat_cpu")" -v p="$(field postgres "$sat_cpu")" -v r="$(field redis "$sat_cpu")" \
  'BEGIN { printf "cpu ms per 1,000 invites at saturation: sendguard %.0f, postgres %.0f, redis %.0f\n", s * n * 1e6 / rps, p * n * 1e6 / rps, r * n * 1e6 / rps }'

# 5. Each side at its other concurrencies, with the global rule flushed again. pgbench's clients
#    and the service's connections to Postgres must fit under max_connections.
stop_serve
start_serve 200
max_connections=$(pgsql -c "SHOW max_connections")
best_ceiling=$ceiling
best_ceiling_at=$conns
# Step 2's rate counts as the sweep's do: only when every answer was a success.
best_rps=0
best_at=none
if [ "$(field non2xx_or_errors "$sat")" = 0 ]; then
  best_rps=$sat_rps
  best_at=$conns
fi
sweep_names=()
sweep_rates=()
sweep_outs=()
for clients in ${CEILING_CLIENTS-16 64}; do
  if [ "$clients" -gt $((max_connections - 30)) ]; then
    echo "benches/invites.sh: pgbench with $clients clients skipped (max_connections $max_connections)" >&2
    continue
  fi
  run=$(ceiling_phase "$clients")
  tps=$(head -n 1 <<<"$run")
  sweep_names+=("ceiling@$clients") sweep_rates+=("$tps") sweep_outs+=("$(tail -n 1 <<<"$run")")
  if awk -v a="$tps" -v b="$best_ceiling" 'BEGIN { exit !(a > b) }'; then best_ceiling=$tps; best_ceiling_at=$clients; fi
done
for c in ${SATURATION_CONNECTIONS-32 64 128}; do
  out=$(measured wrk -t "$threads" -c "$c" -d "${secs}s" -s benches/invites.lua "http://127.0.0.1:$port")
  run=$(grep '^RESULT' <<<"$out")
  rps=$(field rps "$run")
  sweep_names+=("saturation@$c") sweep_rates+=("$rps") sweep_outs+=("$out")
  # A run with failed answers is no rate the service sustains.
  if [ "$(field non2xx_or_errors "$run")" = 0 ] && awk -v a="$rps" -v b="$best_rps" 'BEGIN { exit !(a > b) }'; then
    best_rps=$rps
    best_at=$c
  fi
done
if [ ${#sweep_names[@]} -gt 0 ]; then
  echo
  echo "other concurrencies (ratio to the highest ceiling of the run, $(printf '%.0f' "$best_ceiling")/s with $best_ceiling_at clients):"
  ceiling=$best_ceiling
  header
  for i in "${!sweep_names[@]}"; do
    row "${sweep_names[$i]}" "${sweep_rates[$i]}" "$(ratio "${sweep_rates[$i]}")" "${sweep_outs[$i]}"
  done
  if [ "$best_at" = none ]; then
    echo "best ratio: none (every run of the service had failed answers)"
  else
    awk -v r="$best_rps" -v c="$best_ceiling" -v at="$best_at" -v cat="$best_ceiling_at" \
      'BEGIN { printf "best ratio: %.2f (the service with %s connections against pgbench with %s clients)\n", r / c, at, cat }'
  fi
fi
# Share of the run's invites that were delivered (queued, then sent), and the outbox at the end.
echo
echo "delivered share of all invites: $(pgsql -c "SELECT round(100.0 * count(*) FILTER (WHERE status = 'sent') / greatest(count(*), 1), 1) FROM invites")%;" \
  "outbox at the end (depth, oldest in s): $(outbox_state "$pg_port" "$db")"
