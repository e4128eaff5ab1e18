# The servers of a benchmark, its own (sourced by benches/invites.sh, soak.sh and held.sh): a
# PostgreSQL configured as a small production server, a Redis, and Postfix's smtp-sink, each on a
# port of its own on 127.0.0.1 and removed when the benchmark ends (`stop_servers`).
#
#   PG_BIN          PostgreSQL's binaries (default /usr/lib/postgresql/15/bin)
#   BENCH_DIR       where the scratch folders go (default /var/tmp: a disk, as in production)
#   PG_SETTINGS     extra `name=value` settings, after the defaults below

pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
# A small production server: 4 GB of memory and 2 cores, autovacuum on (as a server that keeps
# up with deleted and updated rows runs it), commits flushed to disk.
pg_settings=(
  shared_buffers=1GB effective_cache_size=3GB work_mem=16MB maintenance_work_mem=256MB
  wal_buffers=16MB max_wal_size=2GB min_wal_size=512MB checkpoint_completion_target=0.9
  synchronous_commit=on autovacuum=on random_page_cost=1.1 max_connections=200
  # For the figures, not the server: the statements counted, and each autovacuum's CPU logged.
  shared_preload_libraries=pg_stat_statements log_autovacuum_min_duration=0
  ${PG_SETTINGS:-}
)

# Runs a command as the owner of the scratch folders: PostgreSQL refuses to run as root.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Starts PostgreSQL on port $1 in a fresh scratch folder; sets pg_dir and pg_pid.
pg_dir=
pg_pid=
start_postgres() {
  local port=$1 opts="" setting
  pg_dir=$(mktemp -d -p "${BENCH_DIR:-/var/tmp}" sendguard-bench-pg.XXXXXX)
  [ "$(id -u)" != 0 ] || chown postgres "$pg_dir"
  as_owner "$pg_bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
  for setting in "${pg_settings[@]}"; do opts+=" -c $setting"; done
  as_owner "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w -t 60 \
    -o "-c port=$port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$pg_dir$opts" start >/dev/null ||
    { cat "$pg_dir/log" >&2; return 1; }
  pg_pid=$(head -n 1 "$pg_dir/data/postmaster.pid")
  warm_wal "$port"
}

# A server that has run a while keeps finished WAL segments to reuse; a fresh one has a single
# segment and creates (zero-fills) each next one, stalling the commits that flush meanwhile.
# Writes max_wal_size of WAL (messages only, no table) and checkpoints twice, which leaves about
# max_wal_size / (1 + checkpoint_completion_target) of segments to reuse (1.1 GB here), so that
# the figures are those of a server in its steady state, not of its first gigabytes.
warm_wal() {
  local sql=(psql -q -At -h 127.0.0.1 -p "$1" -U postgres -d postgres)
  "${sql[@]}" -c "SELECT count(pg_logical_emit_message(false, 'warm-up', repeat('x', 1048576)))
    FROM generate_series(1, pg_size_bytes(current_setting('max_wal_size')) / 1048576)" >/dev/null &&
    "${sql[@]}" -c "CHECKPOINT" && "${sql[@]}" -c "SELECT pg_switch_wal()" >/dev/null &&
    "${sql[@]}" -c "CHECKPOINT"
}

# The settings the server runs with, as it reports them: printed beside the figures.
postgres_settings() {
  psql -q -At -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "SELECT string_agg(name || '=' || current_setting(name), ' ' ORDER BY name)
      FROM pg_settings WHERE name IN ('shared_buffers', 'effective_cache_size', 'work_mem',
        'maintenance_work_mem', 'wal_buffers', 'max_wal_size', 'min_wal_size',
        'checkpoint_completion_target', 'synchronous_commit', 'autovacuum', 'max_connections')"
}

# Starts a Redis without persistence on port $1; sets redis_pid.
redis_pid=
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pid=$!
  for _ in $(seq 1 50); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "redis-server did not start" >&2
  return 1
}

# Starts Postfix's smtp-sink on port $1, installing Postfix when it is missing (Debian, as
# root), and leaves no Postfix daemon running; sets sink_pid.
sink_pid=
start_smtp_sink() {
  local sink=/usr/sbin/smtp-sink
  if [ ! -x "$sink" ]; then
    [ "$(id -u)" = 0 ] || { echo "smtp-sink is missing: apt-get install postfix (as root)" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y postfix >/dev/null
  fi
  # The package starts its daemon on port 25 where it can: only the sink is wanted.
  if postfix status >/dev/null 2>&1; then postfix stop >/dev/null 2>&1 || true; fi
  # -u: as root, the sink drops to Postfix's user once it listens.
  if [ "$(id -u)" = 0 ]; then
    "$sink" -u postfix "127.0.0.1:$1" 1024 &
  else
    "$sink" "127.0.0.1:$1" 1024 &
  fi
  sink_pid=$!
  for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "smtp-sink did not start" >&2
  return 1
}

stop_servers() {
  [ -z "$sink_pid" ] || kill "$sink_pid" 2>/dev/null || true
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  if [ -n "$pg_dir" ]; then
    as_owner "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  fi
}

# CPU ticks (user + system) of a process.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Of the benchmark's PostgreSQL: the postmaster, every child, and what the postmaster reaped
# from children that exited.
pg_ticks() {
  local total=0 pid
  for pid in $pg_pid $(pgrep -P "$pg_pid"); do total=$((total + $(ticks "$pid"))); done
  echo $((total + $(awk '{print $16 + $17}' "/proc/$pg_pid/stat")))
}

# The sums and counts of the service's latency histograms and of its batches' sizes, as
# `name=value` pairs, from the metrics of the instance whose metrics are on $metrics_port.
waited() {
  curl -fs "http://127.0.0.1:$metrics_port/metrics" |
    awk '/^sendguard_((http_request|postgres|redis|sender_read)_seconds|batch_invites)_(sum|count)/ {
      name = $1; sub(/\{.*/, "", name); total[name] += $2 }
      END { for (n in total) printf "%s=%s ", n, total[n] }'
}

# Voluntary and involuntary context switches of every thread of process $1 so far: each is a
# wake-up, a thread that slept and ran again (or was made to wait).
wakeups() {
  cat /proc/"$1"/task/*/status 2>/dev/null |
    awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {n += $2} END {print n + 0}'
}

# The calls and microseconds of every command of the Redis on port $1 so far, as
# `command calls usec` lines (`INFO commandstats`).
redis_commands() {
  redis-cli -p "$1" info commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2 \3/p'
}

# What Redis did per invite between two `redis_commands` snapshots ($1 before, $2 after) for
# $3 invites: the scripts called and their time, and the commands the scripts ran inside that
# time (a script's own time counts its commands too).
redis_work() {
  awk -v n="$3" 'FNR == NR { c0[$1] = $2; u0[$1] = $3; next }
    { c = $2 - c0[$1]; u = $3 - u0[$1]
      if ($1 ~ /^(evalsha|eval|fcall)$/) { sc += c; su += u }
      else if ($1 !~ /^(info|ping|time|script)/) { ic += c; iu += u } }
    END { n = (n > 0 ? n : 1)
      printf "redis per invite: %.2f script calls, %.0f us in them, of which %.1f commands inside them, %.0f us\n", sc / n, su / n, ic / n, iu / n }' "$1" "$2"
}

# What the database of port $1, database $2, did for the $3 invites of a run, and what vacuum
# cost: statements per invite (pg_stat_statements, created in the database before the run),
# updates of `invites` and the share of them that were heap-only, the dead rows left per
# delivered invite, and the CPU of every autovacuum of the run (from the server's log).
database_work() {
  local port=$1 database=$2 invites=$3
  psql -q -At -h 127.0.0.1 -p "$port" -U postgres -d "$database" -v invites="$invites" <<'SQL'
SELECT format('statements per invite: %s (transactions %s)',
    round(sum(calls)::numeric / greatest(:invites, 1), 2),
    round((SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::numeric
        / greatest(:invites, 1), 2))
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SELECT format('  %s%% of statement time: %s calls, %s ms each: %s', round((100 * total_exec_time
        / sum(total_exec_time) OVER ())::numeric, 1), calls, round((total_exec_time / calls)::numeric, 3),
    left(regexp_replace(query, '\s+', ' ', 'g'), 90))
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 6;
SELECT format('invites: %s updates, %s%% of them heap-only; dead rows now %s, vacuumed %s times',
    sum(n_tup_upd), round(100.0 * sum(n_tup_hot_upd) / greatest(sum(n_tup_upd), 1), 1),
    sum(n_dead_tup), sum(autovacuum_count))
FROM pg_stat_user_tables WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'invites'::regclass);
SELECT format('outbox: %s rows deleted, %s dead now, vacuumed %s times, %s kB',
    n_tup_del, n_dead_tup, autovacuum_count, pg_total_relation_size(relid) / 1024)
FROM pg_stat_user_tables WHERE relname = 'outbox';
SELECT format('%s: %s updates, %s%% heap-only, %s inserts, %s deleted, %s dead now', relname,
    n_tup_upd, round(100.0 * n_tup_hot_upd / greatest(n_tup_upd, 1), 1), n_tup_ins, n_tup_del,
    n_dead_tup)
FROM pg_stat_user_tables WHERE relname IN ('senders', 'pending_flags', 'idempotency_keys')
ORDER BY relname;
SELECT format('dead rows left in invites'' indexes per delivered invite: %s',
    round((sum(n_tup_upd) - sum(n_tup_hot_upd))::numeric
        / greatest((SELECT count(*) FROM invites WHERE status = 'sent'), 1), 3))
FROM pg_stat_user_tables WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'invites'::regclass);
SQL
  awk -v n="$invites" '/automatic vacuum of table/ { runs++ }
    /system usage: CPU:/ { for (i = 1; i <= NF; i++) { if ($i == "user:") u += $(i + 1); if ($i == "system:") s += $(i + 1) } }
    END { printf "autovacuum: %d runs, %.2f s of CPU, %.1f ms per 1,000 invites\n", runs, u + s, (u + s) * 1e6 / (n > 0 ? n : 1) }' "$pg_dir/log"
}

# The floors at an everyday rate: what the least an invite could ask of each process costs that
# process at $1 requests a second, spread over connections as the run spreads its invites (wrk's
# $WRK_THREADS threads, default 2, and $WRK_CONNECTIONS connections, default 20; Postgres and
# Redis one at a time, as one writer and one multiplexed connection see them), each for $2
# seconds, in the run's own servers and instance. Prints `name microseconds` lines of CPU per
# request:
#   http      sendguard (pid $3, listening on 127.0.0.1:$4) answering `GET /healthz`, which
#             reads nothing: its HTTP stack, runtime and wake-ups alone;
#   postgres  every PostgreSQL process (port $5, `pg_pid`), for a single-row insert committed on
#             its own (`pgbench`, in a scratch database);
#   redis     Redis (port $6, `redis_pid`), for a `PING`.
# Each is read from /proc over the same stretch as its requests, idle work included; a floor
# whose requests did not run (none answered) prints `-`.
floors() {
  local rate=$1 seconds=$2 pid=$3 port=$4 pg_port=$5 rport=$6 hz n a b out
  hz=$(getconf CLK_TCK)
  # `name microseconds`: $2 ticks of CPU over $3 requests.
  per_request() {
    awk -v name="$1" -v t="$2" -v n="${3:-0}" -v hz="$hz" \
      'BEGIN { if (n > 0) printf "%s %.1f\n", name, t * 1e6 / hz / n; else print name, "-" }'
  }
  a=$(ticks "$pid")
  out=$(FLOOR=healthz RATE=$rate wrk -t "${WRK_THREADS:-2}" -c "${WRK_CONNECTIONS:-20}" -d "${seconds}s" \
    -s benches/invites.lua "http://127.0.0.1:$port" | grep '^RESULT')
  b=$(ticks "$pid")
  n=$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$out")
  per_request http $((b - a)) "$n"
  psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "CREATE DATABASE floor"
  psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d floor \
    -c "CREATE TABLE floor (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), body text)"
  echo "INSERT INTO floor (body) VALUES ('an invitation to a document');" >"$pg_dir/floor.sql"
  a=$(pg_ticks)
  "$pg_bin/pgbench" -n -h 127.0.0.1 -p "$pg_port" -U postgres -c 1 -j 1 -M prepared -R "$rate" \
    -T "$seconds" -f "$pg_dir/floor.sql" floor >/dev/null
  b=$(pg_ticks)
  n=$(psql -q -At -h 127.0.0.1 -p "$pg_port" -U postgres -d floor -c "SELECT count(*) FROM floor")
  psql -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c "DROP DATABASE floor"
  per_request postgres $((b - a)) "$n"
  a=$(ticks "$redis_pid")
  n=$(python3 - "$rport" "$rate" "$seconds" <<'PY2'
import socket, sys, time
port, rate, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
conn = socket.create_connection(("127.0.0.1", port))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
step, at = 1.0 / rate, time.monotonic()
end, sent = at + seconds, 0
while at < end:
    wait = at - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    conn.sendall(b"*1\r\n$4\r\nPING\r\n")
    if conn.recv(16) != b"+PONG\r\n":
        sys.exit("redis did not answer PONG")
    sent, at = sent + 1, at + step
print(sent)
PY2
)
  b=$(ticks "$redis_pid")
  per_request redis $((b - a)) "$n"
}

# The message the product prefills, listed as the standard text of the app of $2 (with the
# sendguard binary $1): it never counts as a campaign however many senders send it
# (benches/invites.lua sends it as 45% of the messages).
standard_text() {
  export STANDARD_TEXT="You have been invited to join the team workspace. Accept to see the shared documents, comment on them and get updates when they change."
  DATABASE_URL=$2 $1 app update default --standard-text "$STANDARD_TEXT" >/dev/null
}

# The traffic of a run of $1 invites in all: senders and recipients scale with it, unless set.
# Each sender sends about 20 (sender-hourly allows 60 an hour, the distinct recipients' rule 100
# a day), and recipients are ten times the invites, so that hardly one gets a fourth invite in a
# day (recipient-daily, 3). TRAFFIC=suppressed: the few recipients of the runs before, most
# invites suppressed.
traffic_for() {
  local total=$1
  if [ "${TRAFFIC:-delivered}" = suppressed ]; then
    export SENDERS=${SENDERS:-20000} RECIPIENTS=${RECIPIENTS:-5000}
  else
    export SENDERS=${SENDERS:-$(((total / 20) > 20000 ? total / 20 : 20000))}
    export RECIPIENTS=${RECIPIENTS:-$(((total * 10) > 1000000 ? total * 10 : 1000000))}
  fi
}

# Outbox depth and the age in seconds of its oldest queued invite, of database $2 on port $1.
outbox_state() {
  psql -q -At -F ' ' -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "SELECT count(*),
      round(coalesce(extract(epoch FROM now() - min(created_at)), 0)::numeric, 1)
      FROM outbox"
}

# Emails delivered so far by the instance whose metrics are on port $1.
delivered_count() {
  curl -fs "http://127.0.0.1:$1/metrics" |
    awk '/^sendguard_invites_total\{status="sent"\}/ {print $2; found = 1} END {if (!found) print 0}'
}
