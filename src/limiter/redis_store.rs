//! The Redis store: one Lua script per decision, sent as EVALSHA.
//!
//! Scripts are loaded once when the store connects (on every node of a cluster). A batch of
//! decisions goes out in one round trip; a decision answered NOSCRIPT (the server restarted, its
//! script cache was flushed, or a slot moved to a node that never saw the script) is sent again as
//! EVAL, which also loads the script there, so nothing is counted twice or lost. Every key of one
//! decision carries the subject's hash tag, so a script never spans two cluster slots.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::{
    Algorithm, Check, Decision, EdgeMode, LimitKey, LimiterError, MAX_LIMIT, MAX_WINDOW_MS, Quota,
    RedisConnection,
};

const PRELUDE: &str = include_str!("lua/prelude.lua");
const HELPERS: &str = include_str!("lua/helpers.lua");

/// How the store reaches Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// A single server or a cluster ([`super::RedisTarget`]).
    pub url: String,
    /// Bound on every call: a slow Redis turns into an error instead of a stuck request.
    pub timeout: Duration,
}

impl RedisSettings {
    pub fn new(url: impl Into<String>) -> Self {
        RedisSettings {
            url: url.into(),
            timeout: Duration::from_millis(500),
        }
    }
}

struct Script {
    source: String,
    sha: String,
}

impl Script {
    /// The prelude, the script's fast path (which returns before any helper closure is created),
    /// the helpers and the script's body, as one chunk.
    fn new(fast: &str, body: &str) -> Script {
        let source = format!("{PRELUDE}\n{fast}\n{HELPERS}\n{body}");
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Script { source, sha }
    }
}

/// One script per algorithm family.
struct Scripts {
    hash_counters: Script,
    fixed_window: Script,
    sliding_window: Script,
    token_bucket: Script,
    sliding_log: Script,
    distinct: Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            hash_counters: Script::new(
                include_str!("lua/hash_counters_fast.lua"),
                include_str!("lua/hash_counters.lua"),
            ),
            fixed_window: Script::new("", include_str!("lua/fixed_window.lua")),
            sliding_window: Script::new("", include_str!("lua/sliding_window.lua")),
            token_bucket: Script::new("", include_str!("lua/token_bucket.lua")),
            sliding_log: Script::new("", include_str!("lua/sliding_log.lua")),
            distinct: Script::new("", include_str!("lua/distinct.lua")),
        }
    }

    fn all(&self) -> [&Script; 6] {
        [
            &self.hash_counters,
            &self.fixed_window,
            &self.sliding_window,
            &self.token_bucket,
            &self.sliding_log,
            &self.distinct,
        ]
    }

    /// The script of an algorithm and the option argument it reads.
    fn for_algorithm(&self, algorithm: Algorithm) -> (&Script, &'static str) {
        match algorithm {
            Algorithm::HashCounters(EdgeMode::Harsh) => (&self.hash_counters, "harsh"),
            Algorithm::HashCounters(EdgeMode::Lenient) => (&self.hash_counters, "lenient"),
            Algorithm::HashCounters(EdgeMode::Weighted) => (&self.hash_counters, "weighted"),
            Algorithm::FixedWindow => (&self.fixed_window, ""),
            Algorithm::SlidingWindow => (&self.sliding_window, ""),
            Algorithm::TokenBucket { strict } => {
                (&self.token_bucket, if strict { "strict" } else { "" })
            }
            Algorithm::SlidingLog => (&self.sliding_log, ""),
            // The option slot carries the member instead (see `command`).
            Algorithm::Distinct => (&self.distinct, ""),
        }
    }
}

#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConnection,
    scripts: Arc<Scripts>,
}

impl RedisStore {
    /// Connects and loads every script.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, LimiterError> {
        let conn = RedisConnection::open(settings).await?;
        let store = RedisStore {
            conn,
            scripts: Arc::new(Scripts::new()),
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// A connection for other commands (benchmarks, inspection in tests).
    pub fn connection(&self) -> RedisConnection {
        self.conn.clone()
    }

    async fn load_scripts(&self) -> Result<(), LimiterError> {
        // One command at a time: a cluster sends SCRIPT LOAD to every node, not a pipeline.
        for script in self.scripts.all() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&script.source)
                .query_async(&mut self.conn.clone())
                .await?;
            if script.sha != sha {
                return Err(LimiterError::BadReply(format!(
                    "SCRIPT LOAD returned {sha}, expected {}",
                    script.sha
                )));
            }
        }
        Ok(())
    }

    fn command(&self, check: &Check<'_>, at_ms: Option<u64>, by_source: bool) -> Cmd {
        let (script, option) = self.scripts.for_algorithm(check.quota.algorithm);
        let mut cmd = if by_source {
            let mut c = redis::cmd("EVAL");
            c.arg(&script.source);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&script.sha);
            c
        };
        let key = check.key.as_str();
        if check.quota.algorithm == Algorithm::SlidingLog {
            cmd.arg(2).arg(key).arg(format!("{key}:seq"));
        } else {
            cmd.arg(1).arg(key);
        }
        let q = check.quota;
        cmd.arg(check.cost);
        match check.member {
            Some(member) => cmd.arg(&member.to_le_bytes()[..]),
            None => cmd.arg(option),
        };
        cmd.arg(packed_rule(q));
        // Without a timestamp the script reads Redis TIME.
        if let Some(at) = at_ms {
            cmd.arg(at);
        }
        cmd
    }

    pub async fn check_batch(
        &self,
        checks: &[Check<'_>],
        at_ms: Option<u64>,
    ) -> Result<Vec<Decision>, LimiterError> {
        let mut replies = if let [check] = checks {
            // A single decision goes out as a plain command: no pipeline to build or unpack.
            let mut conn = self.conn.clone();
            vec![
                self.command(check, at_ms, false)
                    .query_async::<Value>(&mut conn)
                    .await,
            ]
        } else {
            let cmds: Vec<Cmd> = checks
                .iter()
                .map(|check| self.command(check, at_ms, false))
                .collect();
            self.conn.send_all(cmds).await?
        };
        // A decision that did not run is sent again, alone: as EVAL where the node lacks the
        // script, after a pause where its slot is moving between nodes. Decisions that ran are
        // never sent twice, so a batch that partly failed counts nothing twice.
        for attempt in 1..=RESENDS {
            let again: Vec<(usize, bool)> = replies
                .iter()
                .enumerate()
                .filter_map(|(n, reply)| match reply {
                    Err(e) if is_noscript(e) => Some((n, true)),
                    Err(e) if is_moving(e) => Some((n, false)),
                    _ => None,
                })
                .collect();
            if again.is_empty() {
                break;
            }
            if again.iter().any(|&(_, by_source)| !by_source) {
                tokio::time::sleep(MOVE_PAUSE * attempt).await;
            }
            let cmds: Vec<Cmd> = again
                .iter()
                .map(|&(n, by_source)| self.command(&checks[n], at_ms, by_source))
                .collect();
            let retried = self.conn.send_all(cmds).await?;
            for ((n, _), reply) in again.into_iter().zip(retried) {
                replies[n] = reply;
            }
        }
        checks
            .iter()
            .zip(replies)
            .map(|(check, reply)| parse_reply(check.quota, reply?))
            .collect()
    }

    pub async fn clear(&self, keys: &[(&LimitKey, &Quota)]) -> Result<(), LimiterError> {
        let mut cmds = Vec::with_capacity(keys.len());
        for (key, quota) in keys {
            let mut del = redis::cmd("DEL");
            del.arg(key.as_str());
            if quota.algorithm == Algorithm::SlidingLog {
                // Same hash tag, same slot: one command.
                del.arg(format!("{}:seq", key.as_str()));
            }
            cmds.push(del);
        }
        for reply in self.conn.send_all(cmds).await? {
            reply?;
        }
        Ok(())
    }
}

// A packed rule stays below 2^53, where a Lua number is still an exact integer.
const _: () = assert!(MAX_LIMIT < 1 << 20 && MAX_WINDOW_MS < 1 << 32);

/// `limit * 2^33 + count_over_limit * 2^32 + window_ms`: one argument instead of three, because
/// each argument costs the script a table slot, a string and a number conversion (prelude.lua).
fn packed_rule(q: &Quota) -> u64 {
    (q.limit << 33) | (u64::from(q.count_over_limit) << 32) | q.window_ms
}

/// NOSCRIPT: the script did not run, so sending it again counts it once.
fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// A cluster's answer while a slot moves (or its nodes still disagree where it is): the
/// command did not run, and will run once the move settles.
fn is_moving(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

/// Times a decision that did not run is sent again, and the pause before each (times the
/// attempt) while its slot moves.
const RESENDS: u32 = 4;
const MOVE_PAUSE: Duration = Duration::from_millis(25);

/// Parses a script's `{allowed, count, remaining, retry_after_ms, reset_after_ms}`, or the single
/// integer `count * 2^32 + reset_after_ms` of an attempt a fast path allowed (one integer costs
/// Redis far less to hand back than an array).
fn parse_reply(quota: &Quota, reply: Value) -> Result<Decision, LimiterError> {
    let bad = |reply: &Value| LimiterError::BadReply(format!("{reply:?}"));
    if let Value::Int(packed) = reply {
        let packed = u64::try_from(packed).map_err(|_| bad(&reply))?;
        let count = packed >> 32;
        return Ok(Decision {
            allowed: true,
            count,
            limit: quota.limit,
            remaining: quota.limit.saturating_sub(count),
            retry_after_ms: 0,
            reset_after_ms: packed & 0xffff_ffff,
        });
    }
    let values: Vec<i64> = redis::from_redis_value(reply.clone()).map_err(|_| bad(&reply))?;
    let field = |n: usize| -> Result<u64, LimiterError> {
        values
            .get(n)
            .and_then(|v| u64::try_from(*v).ok())
            .ok_or_else(|| bad(&reply))
    };
    Ok(Decision {
        allowed: field(0)? == 1,
        count: field(1)?,
        limit: quota.limit,
        remaining: field(2)?,
        retry_after_ms: field(3)?,
        reset_after_ms: field(4)?,
    })
}
