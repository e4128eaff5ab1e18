//! The Redis store: one Lua script decides a batch of rules, sent as EVALSHA.
//!
//! Every key of one subject carries the subject's hash tag, so its keys share a cluster slot. On
//! a cluster the decisions of one invite are grouped by subject, one command per group, in
//! parallel, so that no call spans two slots. A single server takes any keys in one script, so
//! there every decision of the invite goes in one call: each EVALSHA has a fixed cost in Redis
//! (the call, its key and argument tables) that is a large part of a small script's. The script
//! is loaded when the store connects (on every node of a cluster); a group answered NOSCRIPT
//! (the server restarted, its script cache was flushed, or a slot moved to a node that never saw
//! the script) is sent again as EVAL, which also loads the script there, so nothing is counted
//! twice or lost.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::clock::Clock;
use super::group_lookup::{self, group_id, group_id_of};
use super::{
    Algorithm, Check, Decision, EdgeMode, FoldedGroup, LimitKey, LimiterError, MAX_LIMIT,
    MAX_WINDOW_MS, Quota, RedisConnection, RedisSettings,
};

/// The one script: a loop over the rules (opened in `decide_head.lua`, closed in
/// `decide_tail.lua`) that picks each rule's algorithm by its code; an algorithm is a function
/// (`prelude.lua`, its fast path if it has one, `helpers.lua`, its body) made when the call first
/// needs it.
struct Script {
    source: String,
    sha: String,
}

impl Script {
    fn new() -> Script {
        let algorithms = [
            (
                "h",
                include_str!("lua/hash_counters_fast.lua"),
                include_str!("lua/hash_counters.lua"),
            ),
            ("f", "", include_str!("lua/fixed_window.lua")),
            ("s", "", include_str!("lua/sliding_window.lua")),
            ("t", "", include_str!("lua/token_bucket.lua")),
            ("l", "", include_str!("lua/sliding_log.lua")),
            ("d", "", include_str!("lua/distinct.lua")),
        ];
        // One local per algorithm holds its function once a rule of the call has made it: a
        // table or a function to hold them would be one more allocation on every call.
        let made: Vec<String> = algorithms
            .iter()
            .map(|(code, ..)| format!("made_{code}"))
            .collect();
        let mut source = format!("local {}\n", made.join(", "));
        source.push_str(include_str!("lua/decide_head.lua"));
        source.push_str(group_lookup::FUNCTION);
        source.push_str(include_str!("lua/decide_group.lua"));
        for (n, (code, fast, body)) in algorithms.iter().enumerate() {
            source.push_str(&format!(
                "  {}if code == '{code}' then\n    run = made_{code}\n    if not run then\n      run = function(key, key2, cost_arg, option, rule)\n{}\n{fast}\n{}\n{body}\nend\n      made_{code} = run\n    end\n",
                if n == 0 { "" } else { "else" },
                include_str!("lua/prelude.lua"),
                include_str!("lua/helpers.lua"),
            ));
        }
        source.push_str(
            "  else\n    return redis.error_reply('unknown algorithm code ' .. tostring(code))\n  end\n",
        );
        source.push_str(include_str!("lua/decide_tail.lua"));
        let sha = redis::Script::new(&source).get_hash().to_owned();
        Script { source, sha }
    }
}

/// The limiter's script as Redis runs it (`sendguard bench replay` loads it to time captured
/// calls).
pub fn script_source() -> String {
    Script::new().source
}

/// The dispatcher's code of an algorithm and the option argument it reads.
fn code_and_option(check: &Check<'_>) -> (&'static str, Option<&'static str>) {
    match check.quota.algorithm {
        Algorithm::HashCounters(EdgeMode::Harsh) => ("h", Some("harsh")),
        Algorithm::HashCounters(EdgeMode::Lenient) => ("h", Some("lenient")),
        Algorithm::HashCounters(EdgeMode::Weighted) => ("h", Some("weighted")),
        Algorithm::FixedWindow => ("f", Some("")),
        Algorithm::SlidingWindow => ("s", Some("")),
        Algorithm::TokenBucket { strict } => ("t", Some(if strict { "strict" } else { "" })),
        Algorithm::SlidingLog => ("l", Some("")),
        // The option slot carries the member instead.
        Algorithm::Distinct => ("d", None),
    }
}

#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConnection,
    script: Arc<Script>,
    clock: Clock,
}

/// The decisions of one script call: their places in the caller's batch.
struct Group {
    members: Vec<usize>,
}

impl RedisStore {
    /// Connects, loads the script and sets the clock to Redis `TIME`.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, LimiterError> {
        let conn = RedisConnection::open(settings).await?;
        let store = RedisStore {
            clock: Clock::synced_to(&conn).await?,
            conn,
            script: Arc::new(Script::new()),
        };
        store.load_script().await?;
        Ok(store)
    }

    /// A connection for other commands (benchmarks, inspection in tests).
    pub fn connection(&self) -> RedisConnection {
        self.conn.clone()
    }

    async fn load_script(&self) -> Result<(), LimiterError> {
        // A cluster sends SCRIPT LOAD to every node.
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&self.script.source)
            .query_async(&mut self.conn.clone())
            .await?;
        if self.script.sha != sha {
            return Err(LimiterError::BadReply(format!(
                "SCRIPT LOAD returned {sha}, expected {}",
                self.script.sha
            )));
        }
        Ok(())
    }

    /// One script call deciding every check of a group, at `now` (ms), a text's group looked
    /// up first when `folded` is given.
    fn command(
        &self,
        checks: &[Check<'_>],
        group: &Group,
        now: u64,
        folded: Option<&FoldedGroup<'_>>,
        by_source: bool,
    ) -> Result<Cmd, LimiterError> {
        let mut cmd = if by_source {
            let mut c = redis::cmd("EVAL");
            c.arg(&self.script.source);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(&self.script.sha);
            c
        };
        let logs = group
            .members
            .iter()
            .filter(|&&n| checks[n].quota.algorithm == Algorithm::SlidingLog)
            .count();
        let stores = if folded.is_some() { 2 } else { 0 };
        cmd.arg(stores + group.members.len() + logs);
        if let Some(folded) = folded {
            cmd.arg(&folded.lookup.stores[0])
                .arg(&folded.lookup.stores[1]);
        }
        // Each key that takes the group's id: its place in KEYS (from 1) and the byte after
        // which the id starts.
        let mut takes_id: Vec<(usize, usize)> = Vec::new();
        let fresh = folded.map(|f| (f, group_id(f.lookup.fresh)));
        let mut place = stores;
        for &n in &group.members {
            let key = checks[n].key.as_str();
            let at = match &fresh {
                Some((f, id)) if f.checks.contains(&n) => match key.find(id.as_str()) {
                    Some(at) => Some(at),
                    // Its count would land on a key of no group, the group's own left uncounted.
                    None => {
                        return Err(LimiterError::Fold(format!(
                            "the key {key} counts the text's group but lacks the id standing in for it"
                        )));
                    }
                },
                _ => None,
            };
            let log = checks[n].quota.algorithm == Algorithm::SlidingLog;
            cmd.arg(key);
            if log {
                cmd.arg(format!("{key}:seq"));
            }
            let taken = if log { 2 } else { 1 };
            if let Some(at) = at {
                takes_id.extend((place + 1..=place + taken).map(|p| (p, at)));
            }
            place += taken;
        }
        cmd.arg(now);
        match folded {
            None => {
                cmd.arg(0);
            }
            Some(folded) => {
                cmd.arg(1 + 2 * takes_id.len() + folded.lookup.args.len())
                    .arg(takes_id.len());
                for (place, at) in takes_id {
                    cmd.arg(place).arg(at);
                }
                for arg in &folded.lookup.args {
                    cmd.arg(arg.as_slice());
                }
            }
        }
        for &n in &group.members {
            let check = &checks[n];
            let (code, option) = code_and_option(check);
            cmd.arg(code).arg(check.cost);
            match (option, check.member) {
                (Some(option), _) => cmd.arg(option),
                (None, member) => cmd.arg(&member.unwrap_or(0).to_le_bytes()[..]),
            };
            cmd.arg(packed_rule(check.quota));
        }
        Ok(cmd)
    }

    /// Every check, in one script call on a single server or one per subject on a cluster;
    /// answers in the order of `checks`. Without `at_ms` the time is this instance's clock,
    /// set to Redis `TIME` ([`Clock`]).
    pub async fn check_batch(
        &self,
        checks: &[Check<'_>],
        at_ms: Option<u64>,
    ) -> Result<Vec<Decision>, LimiterError> {
        Ok(self.decide(checks, at_ms, None).await?.0)
    }

    /// [`RedisStore::check_batch`], a text's group looked up first in the same call when
    /// `folded` is given (a single server only); answers the decisions and the group's id.
    pub(super) async fn decide(
        &self,
        checks: &[Check<'_>],
        at_ms: Option<u64>,
        folded: Option<&FoldedGroup<'_>>,
    ) -> Result<(Vec<Decision>, Option<String>), LimiterError> {
        let now = at_ms.unwrap_or_else(|| self.clock.now_ms());
        let groups = if self.conn.is_cluster() {
            if folded.is_some() {
                return Err(super::not_foldable());
            }
            group_by_subject(checks)
        } else if folded.is_some() {
            // The look-up runs even when no rule applies: the invite records its group.
            vec![Group {
                members: (0..checks.len()).collect(),
            }]
        } else {
            one_group(checks)
        };
        let mut replies = if let [group] = groups.as_slice() {
            // One call goes out as a plain command: no pipeline to build or unpack.
            let mut conn = self.conn.clone();
            vec![
                self.command(checks, group, now, folded, false)?
                    .query_async::<Value>(&mut conn)
                    .await,
            ]
        } else {
            let cmds = groups
                .iter()
                .map(|group| self.command(checks, group, now, None, false))
                .collect::<Result<Vec<Cmd>, _>>()?;
            self.conn.send_all(cmds).await?
        };
        // A call that did not run is sent again, alone: as EVAL where the node lacks the script,
        // after a pause where its slot is moving between nodes. Calls that ran are never sent
        // twice, so a batch that partly failed counts nothing twice.
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
            let cmds = again
                .iter()
                .map(|&(n, by_source)| self.command(checks, &groups[n], now, folded, by_source))
                .collect::<Result<Vec<Cmd>, _>>()?;
            let retried = self.conn.send_all(cmds).await?;
            for ((n, _), reply) in again.into_iter().zip(retried) {
                replies[n] = reply;
            }
        }
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut group_id = None;
        for (group, reply) in groups.iter().zip(replies) {
            let reply = reply?;
            let answers = match (reply, folded) {
                (reply, None) if group.members.len() == 1 => vec![reply],
                (Value::Array(mut answers), folded)
                    if answers.len() == group.members.len() + usize::from(folded.is_some()) =>
                {
                    if folded.is_some() {
                        group_id = Some(match answers.remove(0) {
                            Value::BulkString(id) => group_id_of(&id)?,
                            other => return Err(LimiterError::BadReply(format!("{other:?}"))),
                        });
                    }
                    answers
                }
                (other, _) => return Err(LimiterError::BadReply(format!("{other:?}"))),
            };
            for (&n, answer) in group.members.iter().zip(answers) {
                decisions[n] = Some(parse_reply(checks[n].quota, answer)?);
            }
        }
        let decisions = decisions
            .into_iter()
            .map(|d| d.ok_or_else(|| LimiterError::BadReply("a check had no answer".into())))
            .collect::<Result<_, _>>()?;
        Ok((decisions, group_id))
    }

    pub async fn clear(&self, keys: &[(&LimitKey, &Quota)]) -> Result<(), LimiterError> {
        // Redis refuses an empty pipeline: a lift of a sender no rule flagged clears nothing.
        if keys.is_empty() {
            return Ok(());
        }
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

/// The checks grouped by their keys' hash tag, in order of first appearance.
fn group_by_subject(checks: &[Check<'_>]) -> Vec<Group> {
    let mut groups: Vec<(&str, Group)> = Vec::new();
    for (n, check) in checks.iter().enumerate() {
        let tag = check.key.hash_tag();
        match groups.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, group)) => group.members.push(n),
            None => groups.push((tag, Group { members: vec![n] })),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// Every check in one call, or none without checks.
fn one_group(checks: &[Check<'_>]) -> Vec<Group> {
    if checks.is_empty() {
        return Vec::new();
    }
    vec![Group {
        members: (0..checks.len()).collect(),
    }]
}

// A packed rule stays below 2^53, where a Lua number is still an exact integer.
const _: () = assert!(MAX_LIMIT < 1 << 20 && MAX_WINDOW_MS / 1000 < 1 << 22);

/// `limit * 2^24 + without_wait * 2^23 + count_over_limit * 2^22 + window_secs` (a window is
/// whole seconds, [`Quota::validate`]): one argument instead of four, because each argument
/// costs the script a table slot, a string and a number conversion (prelude.lua).
fn packed_rule(q: &Quota) -> u64 {
    (q.limit << 24)
        | (u64::from(!q.reports_wait) << 23)
        | (u64::from(q.count_over_limit) << 22)
        | (q.window_ms / 1000)
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
/// integer `count * 2^32 + reset_after_ms` of an attempt a fast path allowed or of a read of an
/// empty key (one integer costs Redis far less to hand back than an array).
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
