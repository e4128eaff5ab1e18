//! `sendguard bench limiter`: decisions per second of each Redis script next to a plain `PING`
//! from the same client in the same run, and the Redis bytes one hourly key takes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{
    Algorithm, Check, KeyPrefix, LimitKey, LimiterError, Quota, RedisConnection, RedisSettings,
    RedisStore, RedisTarget,
};
use crate::limiter::simulate::to_table;

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub redis: RedisSettings,
    pub clients: usize,
    pub duration: Duration,
    /// Distinct subjects the decisions are spread over.
    pub subjects: u64,
}

#[derive(Debug, Clone)]
pub struct BenchRow {
    pub algorithm: String,
    pub clients: usize,
    pub decisions: u64,
    pub decisions_per_sec: f64,
    pub ping_per_sec: f64,
    pub bytes_per_key: Option<u64>,
}

impl BenchRow {
    pub fn ratio_to_ping(&self) -> f64 {
        self.decisions_per_sec / self.ping_per_sec
    }
}

/// What each client task does in a loop.
#[derive(Clone, Copy)]
enum Work {
    Ping,
    /// A script that only returns: the ceiling of any EVALSHA.
    Noop,
    Decide(Algorithm),
    /// Distinct recipients counted with HyperLogLogs, the alternative to the exact count.
    DistinctHll,
}

/// The limit of the distinct-recipient rule the bench measures (the default rule's), and the
/// recipients each sender cycles over: every key holds as many members as the limit allows.
const DISTINCT_LIMIT: u64 = 100;

const HLL_SCRIPT: &str = include_str!("lua/distinct_hll.lua");

/// The member a bench decision counts: one of the sender's recipients, spread over the whole
/// u32 range as a hashed address is (the golden-ratio multiplier).
fn bench_member(n: u64) -> u32 {
    (n % DISTINCT_LIMIT + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) as u32
}

/// PING and decisions take turns in rounds this long: on a shared machine the speed of both
/// drifts within seconds (other tenants' load shows as CPU steal), and short turns make each
/// ratio compare like with like.
pub const ROUND: Duration = Duration::from_millis(200);

/// `PING`s answered in `span`, each store's client sending one at a time: the ceiling other
/// benches compare a script with, measured in turns with it.
pub async fn pings(stores: &[RedisStore], span: Duration) -> Result<u64, LimiterError> {
    let keys = vec![Arc::from([]); stores.len()];
    measure(stores, &keys, Work::Ping, Span::Time(span)).await
}

pub async fn run(cfg: &BenchConfig) -> Result<Vec<BenchRow>, LimiterError> {
    // PING, MEMORY USAGE and the SCAN that removes the bench's keys each reach one node.
    if matches!(RedisTarget::parse(&cfg.redis.url)?, RedisTarget::Cluster(_)) {
        return Err(LimiterError::Config(
            "bench limiter measures one Redis server, not a cluster".into(),
        ));
    }
    let prefix = KeyPrefix::new(&format!("sgbench{}", std::process::id()))
        .map_err(LimiterError::InvalidQuota)?;
    let mut stores = Vec::with_capacity(cfg.clients);
    for _ in 0..cfg.clients {
        stores.push(RedisStore::connect(&cfg.redis).await?);
    }
    let mut rows = Vec::new();
    let mut works = vec![("noop_script".to_string(), Work::Noop)];
    works.extend(
        Algorithm::ALL
            .into_iter()
            .chain([Algorithm::Distinct])
            .map(|a| (a.to_string(), Work::Decide(a))),
    );
    works.push(("distinct:hyperloglog".to_string(), Work::DistinctHll));
    for (name, work) in works {
        let keys = client_keys(&prefix, cfg, work);
        if let Work::Decide(_) | Work::DistinctHll = work {
            // Untimed: every sender's key exists before the clock starts, so the rounds measure
            // busy senders, not the first write of each.
            measure(&stores, &keys, work, Span::OnePass).await?;
        }
        let rounds = (cfg.duration.as_secs_f64() / ROUND.as_secs_f64())
            .ceil()
            .max(1.0) as u32;
        let span = cfg.duration / rounds;
        let (mut ping, mut decisions) = (0, 0);
        for _ in 0..rounds {
            ping += pings(&stores, span).await?;
            decisions += measure(&stores, &keys, work, Span::Time(span)).await?;
        }
        let bytes_per_key = match work {
            Work::Decide(a) => Some(hourly_key_bytes(&stores[0], &prefix, a).await?),
            Work::DistinctHll => Some(hll_bytes(&stores[0], &prefix).await?),
            _ => None,
        };
        rows.push(BenchRow {
            algorithm: name,
            clients: cfg.clients,
            decisions,
            decisions_per_sec: decisions as f64 / cfg.duration.as_secs_f64(),
            ping_per_sec: ping as f64 / cfg.duration.as_secs_f64(),
            bytes_per_key,
        });
    }
    cleanup(&stores[0], &prefix).await?;
    Ok(rows)
}

/// The keys each client cycles over: its own share of the subjects, so clients rarely share a
/// key. Built before any timing starts.
fn client_keys(prefix: &KeyPrefix, cfg: &BenchConfig, work: Work) -> Vec<Arc<[LimitKey]>> {
    (0..cfg.clients as u64)
        .map(|n| match work {
            Work::Decide(a) => (n..cfg.subjects)
                .step_by(cfg.clients)
                .map(|s| prefix.key(&format!("sender:b{s}"), "bench", &bench_quota(a)))
                .collect(),
            Work::DistinctHll => (n..cfg.subjects)
                .step_by(cfg.clients)
                .map(|s| {
                    prefix.key(
                        &format!("sender:b{s}"),
                        "hll",
                        &bench_quota(Algorithm::Distinct),
                    )
                })
                .collect(),
            _ => Arc::from([]),
        })
        .collect()
}

/// How long each client keeps going.
#[derive(Clone, Copy)]
enum Span {
    Time(Duration),
    /// One decision on each of the client's keys (bounded by a minute all the same).
    OnePass,
}

/// Runs `work` from every client; returns how many calls completed.
async fn measure(
    stores: &[RedisStore],
    keys: &[Arc<[LimitKey]>],
    work: Work,
    span: Span,
) -> Result<u64, LimiterError> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now()
        + match span {
            Span::Time(d) => d,
            Span::OnePass => Duration::from_secs(60),
        };
    let mut tasks = Vec::with_capacity(stores.len());
    for (store, keys) in stores.iter().zip(keys) {
        let store = store.clone();
        let done = done.clone();
        let keys = keys.clone();
        let calls = match span {
            Span::Time(_) => usize::MAX,
            Span::OnePass => keys.len(),
        };
        tasks.push(tokio::spawn(async move {
            let mut conn = store.connection();
            let noop = redis::Script::new("return 1");
            let hll = redis::Script::new(HLL_SCRIPT);
            let mut next = keys.iter().cycle().take(calls);
            let mut n: u64 = 0;
            while Instant::now() < deadline {
                n += 1;
                match work {
                    Work::Ping => {
                        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
                    }
                    Work::Noop => {
                        let _: i64 = noop.invoke_async(&mut conn).await?;
                    }
                    Work::Decide(a) => {
                        let Some(key) = next.next() else { break };
                        let quota = bench_quota(a);
                        let member = (a == Algorithm::Distinct).then(|| bench_member(n));
                        let check = Check {
                            member,
                            ..Check::new(key, &quota, 1)
                        };
                        store.check_batch(&[check], None).await?;
                    }
                    Work::DistinctHll => {
                        let Some(key) = next.next() else { break };
                        let _: i64 = hll
                            .key(key.as_str())
                            .arg(&bench_member(n).to_le_bytes()[..])
                            .arg(3_600_000)
                            .invoke_async(&mut conn)
                            .await?;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), LimiterError>(())
        }));
    }
    join_clients(tasks).await?;
    Ok(done.load(Ordering::Relaxed))
}

/// Waits for every client's task: the first error, or a task that panicked, fails the run.
pub async fn join_clients(
    tasks: Vec<tokio::task::JoinHandle<Result<(), LimiterError>>>,
) -> Result<(), LimiterError> {
    for task in tasks {
        task.await
            .map_err(|e| LimiterError::BadReply(format!("bench task failed: {e}")))??;
    }
    Ok(())
}

/// An hourly rule with a limit nobody reaches: the benchmark measures the allowed path (the
/// distinct count at its default limit, which the recipients each sender cycles over fill).
fn bench_quota(algorithm: Algorithm) -> Quota {
    let limit = if algorithm == Algorithm::Distinct {
        DISTINCT_LIMIT
    } else {
        1_000_000
    };
    Quota::new(limit, 3600, algorithm)
}

/// `MEMORY USAGE` of one hourly key after a request in every minute of an hour.
async fn hourly_key_bytes(
    store: &RedisStore,
    prefix: &KeyPrefix,
    algorithm: Algorithm,
) -> Result<u64, LimiterError> {
    let quota = bench_quota(algorithm);
    let key = prefix.key("sender:memory", "bench", &quota);
    let start = (super::now_ms() / 3_600_000) * 3_600_000;
    for minute in 0..60u64 {
        // A few requests per minute, as a busy sender sends them.
        for n in 0..5u64 {
            let check = Check {
                member: (algorithm == Algorithm::Distinct).then(|| bench_member(minute * 5 + n)),
                ..Check::new(&key, &quota, 1)
            };
            store
                .check_batch(&[check], Some(start + minute * 60_000 + n * 1000))
                .await?;
        }
    }
    let mut bytes = key_bytes(store, key.as_str()).await?;
    if algorithm == Algorithm::SlidingLog {
        bytes += key_bytes(store, &format!("{}:seq", key.as_str())).await?;
    }
    Ok(bytes)
}

/// `MEMORY USAGE` of a key, every element counted (0 when it does not exist).
pub async fn key_bytes(store: &RedisStore, key: &str) -> Result<u64, LimiterError> {
    let used: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut store.connection())
        .await?;
    Ok(used.unwrap_or(0))
}

/// `MEMORY USAGE` of every sub-window HyperLogLog of one sender after as many distinct
/// recipients as the exact count holds, spread over an hour (as `hourly_key_bytes` sends them).
async fn hll_bytes(store: &RedisStore, prefix: &KeyPrefix) -> Result<u64, LimiterError> {
    let base = prefix.key("sender:memory", "hll", &bench_quota(Algorithm::Distinct));
    let mut conn = store.connection();
    let start = (super::now_ms() / 3_600_000) * 3_600_000;
    let mut bytes = 0;
    for minute in 0..60u64 {
        let sub = format!(
            "{}:{}",
            base.as_str(),
            (start + minute * 60_000) * 60 / 3_600_000
        );
        for n in 0..5u64 {
            let _: i64 = redis::cmd("PFADD")
                .arg(&sub)
                .arg(&bench_member(minute * 5 + n).to_le_bytes()[..])
                .query_async(&mut conn)
                .await?;
        }
        bytes += key_bytes(store, &sub).await?;
    }
    Ok(bytes)
}

/// Calls of one command and the microseconds Redis spent in them, scripts' commands included.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

/// Every command's [`CommandStat`] so far (`INFO commandstats`), by its lower-case name.
pub async fn command_stats(
    conn: &RedisConnection,
) -> Result<HashMap<String, CommandStat>, LimiterError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn.clone())
        .await?;
    let field = |stats: &str, name: &str| -> u64 {
        stats
            .split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let stat = CommandStat {
                calls: field(stats, "calls"),
                usec: field(stats, "usec"),
            };
            Some((name.to_owned(), stat))
        })
        .collect())
}

/// Deletes every key under `prefix`.
pub async fn cleanup(store: &RedisStore, prefix: &KeyPrefix) -> Result<(), LimiterError> {
    let mut conn = store.connection();
    let pattern = format!("{}:*", prefix.as_str());
    let mut cursor: u64 = 0;
    // SCAN until the cursor comes back to 0; bounded by the number of keys the run wrote.
    for _ in 0..1_000_000 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            let () = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut conn)
                .await?;
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    Ok(())
}

pub const CSV_HEADER: &str =
    "algorithm,clients,decisions,decisions_per_sec,ping_per_sec,ratio_to_ping,bytes_per_key";

fn cells(r: &BenchRow) -> Vec<String> {
    vec![
        r.algorithm.clone(),
        r.clients.to_string(),
        r.decisions.to_string(),
        format!("{:.0}", r.decisions_per_sec),
        format!("{:.0}", r.ping_per_sec),
        format!("{:.2}", r.ratio_to_ping()),
        r.bytes_per_key.map(|b| b.to_string()).unwrap_or_default(),
    ]
}

pub fn to_csv(rows: &[BenchRow]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in rows {
        out.push_str(&cells(r).join(","));
        out.push('\n');
    }
    out
}

pub fn to_text(rows: &[BenchRow]) -> String {
    let header: Vec<&str> = CSV_HEADER.split(',').collect();
    let body: Vec<Vec<String>> = rows.iter().map(cells).collect();
    to_table(&header, &body)
}
