//! The rate-limit engine: one interface for a decision, several algorithms, two stores.
//!
//! A decision takes a [`Quota`] (limit, window, algorithm, options), a key (subject and rule)
//! and a cost, counts atomically and answers with a [`Decision`]. The Redis store decides a
//! batch of rules in one Lua script call (on a cluster one call per subject); the in-process
//! store runs the same state machines from [`algorithms`] behind a mutex.

pub mod algorithms;
pub mod bench;
mod clock;
mod connection;
mod distinct;
mod group_lookup;
mod keys;
mod memory;
mod redis_store;
pub mod replay;
pub mod simulate;

use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

pub use connection::{RedisConnection, RedisSettings, RedisTarget};
pub use distinct::MAX_DISTINCT_LIMIT;
pub use group_lookup::{FoldedGroup, GroupLookup, SCRIPT as GROUP_SCRIPT, group_id, group_id_of};
pub use keys::{KeyPrefix, LimitKey, rule_code};
pub use memory::MemoryStore;
pub use redis_store::{RedisStore, script_source};

/// Sub-windows per window for `hash_counters` (docs/DESIGN.md §3).
pub const SUB_WINDOWS: u64 = 60;

/// Ceiling of an a-unit span (a millisecond is `SUB_WINDOWS` a-units) in milliseconds, for
/// `hash_counters` and the distinct counts alike.
fn to_ms(a_units: i64) -> u64 {
    let n = SUB_WINDOWS as i64;
    ((a_units + n - 1) / n).max(0) as u64
}

/// How `hash_counters` treats the oldest sub-window, the one the window's edge cuts through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EdgeMode {
    /// Count the oldest sub-window in full: never more lenient than an exact window.
    #[default]
    Harsh,
    /// Drop the oldest sub-window: up to one sub-window of old requests leaves early.
    Lenient,
    /// Count the oldest sub-window by the fraction of it still inside the window.
    Weighted,
}

/// A rate-limit algorithm with its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    HashCounters(EdgeMode),
    FixedWindow,
    SlidingWindow,
    /// `strict`: a denied attempt forfeits the refill, so the bucket stays empty while traffic goes on.
    TokenBucket {
        strict: bool,
    },
    SlidingLog,
    /// Distinct members (recipients, domains) in a sliding window, exact up to the limit: the
    /// algorithm of rules that count distinct things, whatever else the rule names.
    Distinct,
}

impl Algorithm {
    /// Every windowed counting algorithm and variant, in a stable order (simulations and
    /// benchmarks use it); distinct counts are compared on their own.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::HashCounters(EdgeMode::Harsh),
        Algorithm::HashCounters(EdgeMode::Lenient),
        Algorithm::HashCounters(EdgeMode::Weighted),
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket { strict: false },
        Algorithm::TokenBucket { strict: true },
        Algorithm::SlidingLog,
    ];

    /// The algorithm family in a key's code ([`keys`]): a change of algorithm or window starts
    /// fresh counters.
    fn key_code(self) -> &'static str {
        match self {
            Algorithm::HashCounters(_) => "hr",
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingWindow => "sw",
            Algorithm::TokenBucket { .. } => "tb",
            Algorithm::SlidingLog => "sl",
            Algorithm::Distinct => "de",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::HashCounters(EdgeMode::Harsh) => "hash_counters",
            Algorithm::HashCounters(EdgeMode::Lenient) => "hash_counters:lenient",
            Algorithm::HashCounters(EdgeMode::Weighted) => "hash_counters:weighted",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket { strict: false } => "token_bucket",
            Algorithm::TokenBucket { strict: true } => "token_bucket:strict",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Distinct => "distinct",
        })
    }
}

impl FromStr for Algorithm {
    type Err = String;

    /// Parses the names printed by `Display` (`hash_counters`, `hash_counters:weighted`, …).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.to_string() == s)
            .ok_or_else(|| format!("unknown algorithm `{s}`"))
    }
}

/// What a rule asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    pub limit: u64,
    pub window_ms: u64,
    pub algorithm: Algorithm,
    /// Record attempts even when they are over the limit (shadow-ban rules: a spammer who keeps
    /// going stays over).
    pub count_over_limit: bool,
    /// A denied decision says how long to wait (`retry_after_ms`, `reset_after_ms`). Off where
    /// no answer shows the wait (rules whose action is not `reject`): their denied decisions
    /// carry 0 for both, and the Redis script denies an attempt in the current sub-window with
    /// one command instead of reading the key's sub-windows for a wait nobody reads. A
    /// spammer's attempts are mostly denied ones.
    pub reports_wait: bool,
}

impl Quota {
    pub fn new(limit: u64, window_secs: u64, algorithm: Algorithm) -> Self {
        Quota {
            limit,
            window_ms: window_secs * 1000,
            algorithm,
            count_over_limit: false,
            reports_wait: true,
        }
    }

    pub fn counting_over_limit(mut self) -> Self {
        self.count_over_limit = true;
        self
    }

    pub fn without_wait(mut self) -> Self {
        self.reports_wait = false;
        self
    }

    /// `decision` as this quota reports it: a denied one without its wait when the wait is
    /// not reported.
    pub fn reported(&self, decision: Decision) -> Decision {
        if decision.allowed || self.reports_wait {
            return decision;
        }
        Decision {
            retry_after_ms: 0,
            reset_after_ms: 0,
            ..decision
        }
    }

    /// Rejects quotas no algorithm can serve. A limit of 0 (any occurrence is over) suits every
    /// algorithm but the token bucket, whose refill it would stop.
    pub fn validate(&self) -> Result<(), LimiterError> {
        let (min, max) = match self.algorithm {
            Algorithm::TokenBucket { .. } => (1, MAX_LIMIT),
            Algorithm::Distinct => (0, MAX_DISTINCT_LIMIT),
            _ => (0, MAX_LIMIT),
        };
        if !(min..=max).contains(&self.limit) {
            return Err(LimiterError::InvalidQuota(format!(
                "limit must be between {min} and {max} for {}",
                self.algorithm
            )));
        }
        if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&self.window_ms)
            || !self.window_ms.is_multiple_of(1000)
        {
            return Err(LimiterError::InvalidQuota(format!(
                "window must be whole seconds between {} s and {} s",
                MIN_WINDOW_MS / 1000,
                MAX_WINDOW_MS / 1000
            )));
        }
        Ok(())
    }
}

/// Bounds that keep every algorithm's arithmetic exact in Lua's doubles (below 2^53).
pub const MAX_LIMIT: u64 = 1_000_000;
pub const MIN_WINDOW_MS: u64 = 1_000;
pub const MAX_WINDOW_MS: u64 = 30 * 86_400_000;
/// Largest cost of one decision.
pub const MAX_COST: u64 = 10_000;

/// The answer of one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The window's count after this decision (including its cost when it was recorded).
    pub count: u64,
    pub limit: u64,
    pub remaining: u64,
    /// When the same request would be allowed if nothing else arrived; 0 when allowed. A cost
    /// larger than the limit can never pass: it is told to wait a whole window.
    pub retry_after_ms: u64,
    /// When everything counted so far has left the window.
    pub reset_after_ms: u64,
}

/// One decision of a batch.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    pub key: &'a LimitKey,
    pub quota: &'a Quota,
    pub cost: u64,
    /// What a distinct count counts (a hash of the recipient or domain); `None` elsewhere.
    pub member: Option<u32>,
}

impl<'a> Check<'a> {
    /// A decision of a counting algorithm.
    pub fn new(key: &'a LimitKey, quota: &'a Quota, cost: u64) -> Self {
        Check {
            key,
            quota,
            cost,
            member: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error("invalid quota: {0}")]
    InvalidQuota(String),
    #[error("invalid cost {0}: must be at most {MAX_COST}")]
    InvalidCost(u64),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("REDIS_URL: {0}")]
    Config(String),
    #[error("unexpected reply from a limiter script: {0}")]
    BadReply(String),
    /// A group look-up that cannot ride in the rules' call: on a cluster, or with a check whose
    /// key lacks the id standing in for the group. A caller's bug either way.
    #[error("a group look-up in the rules' call: {0}")]
    Fold(String),
    /// A replay of captured calls that cannot be measured (`bench replay`).
    #[error("bench replay: {0}")]
    Replay(String),
}

/// Where counters live. Both stores give the same answers for the same calls.
#[derive(Clone)]
pub enum Limiter {
    Redis(RedisStore),
    Memory(MemoryStore),
}

impl Limiter {
    /// One decision. `at_ms` replays history; `None` uses the store's clock (Redis' time).
    pub async fn check(
        &self,
        key: &LimitKey,
        quota: &Quota,
        cost: u64,
        at_ms: Option<u64>,
    ) -> Result<Decision, LimiterError> {
        let mut out = self
            .check_batch(&[Check::new(key, quota, cost)], at_ms)
            .await?;
        out.pop()
            .ok_or_else(|| LimiterError::BadReply("empty batch reply".into()))
    }

    /// Several decisions in one round trip: one script call on a single server, one call per
    /// subject, concurrent, on a cluster; answers in the order of `checks`.
    pub async fn check_batch(
        &self,
        checks: &[Check<'_>],
        at_ms: Option<u64>,
    ) -> Result<Vec<Decision>, LimiterError> {
        validate(checks)?;
        match self {
            Limiter::Redis(store) => store.check_batch(checks, at_ms).await,
            Limiter::Memory(store) => Ok(store.check_batch(checks, at_ms)),
        }
    }

    /// [`Limiter::check_batch`] with a text's group looked up first in the same script call;
    /// answers the decisions and the group's id.
    pub async fn check_folded(
        &self,
        checks: &[Check<'_>],
        at_ms: Option<u64>,
        group: &FoldedGroup<'_>,
    ) -> Result<(Vec<Decision>, String), LimiterError> {
        validate(checks)?;
        let Limiter::Redis(store) = self else {
            return Err(not_foldable());
        };
        match store.decide(checks, at_ms, Some(group)).await? {
            (decisions, Some(id)) => Ok((decisions, id)),
            (_, None) => Err(LimiterError::BadReply("no group id".into())),
        }
    }

    /// Whether the store answers (an in-process store always does).
    pub async fn ping(&self) -> Result<(), LimiterError> {
        match self {
            Limiter::Redis(store) => {
                let mut conn = store.connection();
                redis::cmd("PING").query_async::<String>(&mut conn).await?;
                Ok(())
            }
            Limiter::Memory(_) => Ok(()),
        }
    }

    /// Whether Redis has run every call sent before this one, those that timed out included:
    /// it answers a connection's commands in order, so a `PING` answered on the connection the
    /// calls took says so (on a cluster, for the node it reaches). A count made again for a call
    /// that timed out (a deferred invite, a complaint) waits for this: sent into a stalled
    /// server each second, each would be added once the server moved on, and one invite or
    /// complaint counted once a second of the stall; this way twice (the call that timed out
    /// and the one made again), more only when Redis stalls again between the `PING` and the
    /// count.
    pub async fn drained(&self) -> bool {
        self.ping().await.is_ok()
    }

    /// Forgets the counters of these keys (a lifted ban starts from zero).
    pub async fn clear(&self, keys: &[(&LimitKey, &Quota)]) -> Result<(), LimiterError> {
        match self {
            Limiter::Redis(store) => store.clear(keys).await,
            Limiter::Memory(store) => {
                store.clear(keys);
                Ok(())
            }
        }
    }
}

/// A folded look-up sent where it cannot fold: a bug of the caller's, which asks first
/// whether the store folds (the campaign groups' `folds`).
fn not_foldable() -> LimiterError {
    LimiterError::Fold("it rides in the rules' call only on a single server".into())
}

fn validate(checks: &[Check<'_>]) -> Result<(), LimiterError> {
    for c in checks {
        c.quota.validate()?;
        if c.cost > MAX_COST {
            return Err(LimiterError::InvalidCost(c.cost));
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch from this process's clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
