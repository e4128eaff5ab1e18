//! The send-invite flow (DESIGN.md §3a): sender state, rules, one transaction, an answer only
//! after the commit. Mail goes out later, from the outbox.

pub mod global;
pub mod http;
pub mod validate;

use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::config::RedisPolicy;
use crate::incident::Incident;
use crate::limiter::{Check, Decision, KeyPrefix, LimitKey, Limiter, LimiterError};
use crate::metrics::Metrics;
use crate::moderation::{self, Flag, SenderState, SenderStates};
use crate::rules::{Action, Rule, RuleCache, Scope, Subjects};
pub use validate::{InvalidBody, ValidInvite};

/// The invite insert, shared by the one-statement path and the transaction (`$1`-`$13` as
/// [`bind_invite`] binds them).
macro_rules! insert_invite {
    () => {
        "INSERT INTO invites (id, api_key_id, sender_id, recipient, recipient_domain,
             sender_ip, resource, message, sender_name, status, decision, next_attempt_at,
             idempotency_key, request_hash)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
             CASE WHEN $10 = 'queued' THEN now() END, $12, $13"
    };
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn bind_invite<'q>(
    query: PgQuery<'q>,
    sub: &'q Submission<'_>,
    id: Uuid,
    request_hash: &'q [u8],
    status: Status,
    decision: &'q serde_json::Value,
) -> PgQuery<'q> {
    let invite = &sub.invite;
    query
        .bind(id)
        .bind(sub.api_key_id)
        .bind(&invite.sender_id)
        .bind(&invite.recipient)
        .bind(&invite.recipient_domain)
        .bind(invite.sender_ip.map(|ip| ip.to_string()))
        .bind(&invite.resource)
        .bind(&invite.message)
        .bind(&invite.sender_name)
        .bind(status.as_str())
        .bind(decision)
        .bind(sub.idempotency_key)
        .bind(request_hash)
}

/// The status an invite is recorded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    Held,
    Suppressed,
    /// Redis could not be asked; checked later with the invite's own timestamp.
    Deferred,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Held => "held",
            Status::Suppressed => "suppressed",
            Status::Deferred => "deferred",
        }
    }
}

/// What the API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durably recorded: queued, held or suppressed alike.
    Accepted(Uuid),
    /// A `reject` rule is exceeded.
    Rejected(Rejection),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub rule: String,
    pub limit: u64,
    pub remaining: u64,
    pub window_secs: u64,
    pub retry_after_secs: u64,
    pub reset_secs: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("limiter: {0}")]
    Limiter(#[from] LimiterError),
    #[error("this Idempotency-Key was used with a different body")]
    IdempotencyConflict,
    #[error("{0}")]
    Unavailable(String),
    /// The sender's state changed after the verdict was made; decide again with this one.
    #[error("the sender's state changed to {}", .0.as_str())]
    StateChanged(SenderState),
}

/// One request to send an invite.
pub struct Submission<'a> {
    pub api_key_id: i64,
    pub idempotency_key: Option<&'a str>,
    /// The raw body, for idempotent replays.
    pub body: &'a [u8],
    pub invite: ValidInvite,
}

#[derive(Clone)]
pub struct InviteService {
    pub pool: PgPool,
    pub limiter: Limiter,
    pub rules: RuleCache,
    pub senders: SenderStates,
    /// Global rules counted in process and flushed (None: every invite asks Redis).
    pub global: Option<global::GlobalCounts>,
    pub keys: KeyPrefix,
    pub held_cap: i64,
    pub on_redis_error: RedisPolicy,
    pub metrics: Metrics,
    /// Outages of each dependency, logged once each.
    pub redis: Incident,
    pub postgres: Incident,
}

/// What the rules say about one invite.
struct Decided {
    status: Status,
    decision: serde_json::Value,
    /// The shadow-ban rule it broke, to flag the sender with.
    breach: Option<Checked>,
    rejection: Option<Rejection>,
}

/// A rule checked for this invite, with its answer.
#[derive(Clone)]
struct Checked {
    rule: Rule,
    decision: Decision,
}

impl InviteService {
    pub async fn submit(&self, sub: Submission<'_>) -> Result<Outcome, InviteError> {
        let request_hash = Sha256::digest(sub.body).to_vec();
        if let Some(key) = sub.idempotency_key
            && let Some(id) = self.replay(sub.api_key_id, key, &request_hash).await?
        {
            return Ok(Outcome::Accepted(id));
        }
        let invite = &sub.invite;
        let mut state = self.senders.get(&self.pool, &invite.sender_id).await?;
        // The rules count an invite once. When the sender's state turns out to have changed
        // since this instance cached it, the verdict is derived again from the same answers.
        let mut checked: Option<Result<Vec<Checked>, LimiterError>> = None;
        for _ in 0..3 {
            let decided = if state == SenderState::Trusted {
                trusted()
            } else {
                let answers = match checked.take() {
                    Some(answers) => answers,
                    None => match self.check_rules(invite, None).await {
                        Ok(c) => Ok(c),
                        Err(InviteError::Limiter(e)) => Err(e),
                        Err(e) => return Err(e),
                    },
                };
                let decided = match &answers {
                    Ok(c) => verdict(c, state),
                    Err(e) => self.without_redis(e)?,
                };
                checked = Some(answers);
                decided
            };
            if let Some(r) = decided.rejection {
                return Ok(Outcome::Rejected(r));
            }
            let id = Uuid::new_v4();
            let started = std::time::Instant::now();
            let recorded = self.record(&sub, id, &request_hash, state, &decided).await;
            match &recorded {
                Err(InviteError::StateChanged(now)) => {
                    self.senders.forget(&invite.sender_id);
                    state = *now;
                    continue;
                }
                Ok(_) => {
                    self.postgres.recovered();
                    self.metrics
                        .observe("sendguard_postgres_seconds", &[], started.elapsed());
                    self.metrics.count(
                        "sendguard_invites_total",
                        &[("status", decided.status.as_str())],
                    );
                }
                Err(InviteError::Db(e)) => {
                    self.postgres.failed(e);
                    self.metrics
                        .count("sendguard_dependency_errors_total", &[("kind", "postgres")]);
                }
                Err(_) => {}
            }
            return recorded;
        }
        Err(InviteError::Unavailable(
            "the sender's state keeps changing; retry shortly".into(),
        ))
    }

    /// Writes the invite (and the flag of a breach) in one transaction, provided the sender is
    /// still in the `state` the verdict was made for: the cached state is a hint, the table
    /// decides at commit (`StateChanged` otherwise). The common case, an invite with no breach
    /// and no held slot to take, is one statement: one round trip.
    async fn record(
        &self,
        sub: &Submission<'_>,
        id: Uuid,
        request_hash: &[u8],
        state: SenderState,
        decided: &Decided,
    ) -> Result<Outcome, InviteError> {
        let invite = &sub.invite;
        let (status, decision) = (decided.status, &decided.decision);
        if decided.breach.is_none() && status != Status::Held {
            let inserted = bind_invite(
                sqlx::query(concat!(
                    "WITH sender AS (INSERT INTO senders (id) VALUES ($3)
                         ON CONFLICT (id) DO UPDATE SET last_seen_at = now() RETURNING state) ",
                    insert_invite!(),
                    " FROM sender WHERE sender.state = $14"
                )),
                sub,
                id,
                request_hash,
                status,
                decision,
            )
            .bind(state.as_str())
            .execute(&self.pool)
            .await;
            if matches!(&inserted, Ok(done) if done.rows_affected() == 0) {
                return Err(self.state_changed(&invite.sender_id).await);
            }
            return self.inserted(inserted, sub, id, request_hash).await;
        }
        let mut tx = self.pool.begin().await?;
        let stored: String = sqlx::query_scalar(
            "INSERT INTO senders (id) VALUES ($1)
             ON CONFLICT (id) DO UPDATE SET last_seen_at = now() RETURNING state",
        )
        .bind(&invite.sender_id)
        .fetch_one(&mut *tx)
        .await?;
        if stored != state.as_str() {
            drop(tx);
            return Err(self.state_changed(&invite.sender_id).await);
        }
        if let Some(b) = &decided.breach {
            flag(&mut tx, &invite.sender_id, b).await?;
        }
        if status == Status::Held && !self.take_held_slot(&mut tx, &invite.sender_id).await? {
            // Over the cap: counted with the sender, not stored. The caller still sees 200.
            tx.commit().await?;
            return Ok(Outcome::Accepted(id));
        }
        let inserted = bind_invite(
            sqlx::query(insert_invite!()),
            sub,
            id,
            request_hash,
            status,
            decision,
        )
        .execute(&mut *tx)
        .await;
        if inserted.is_err() {
            drop(tx);
            return self.inserted(inserted, sub, id, request_hash).await;
        }
        tx.commit().await?;
        if decided.breach.is_some() {
            // Every instance hears of the new state from the trigger; this one at once.
            self.senders.forget(&invite.sender_id);
        }
        Ok(Outcome::Accepted(id))
    }

    /// The sender's state as stored now, as the error that makes the caller decide again.
    async fn state_changed(&self, sender_id: &str) -> InviteError {
        let stored: Result<Option<String>, sqlx::Error> =
            sqlx::query_scalar("SELECT state FROM senders WHERE id = $1")
                .bind(sender_id)
                .fetch_optional(&self.pool)
                .await;
        match stored {
            Ok(state) => InviteError::StateChanged(
                state
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(SenderState::Active),
            ),
            Err(e) => e.into(),
        }
    }

    /// The answer to an invite insert. When the same Idempotency-Key raced in from another
    /// request, the invite is answered as that one was.
    async fn inserted(
        &self,
        inserted: Result<sqlx::postgres::PgQueryResult, sqlx::Error>,
        sub: &Submission<'_>,
        id: Uuid,
        request_hash: &[u8],
    ) -> Result<Outcome, InviteError> {
        match inserted {
            Ok(_) => Ok(Outcome::Accepted(id)),
            Err(e) => {
                if let Some(key) = sub.idempotency_key
                    && is_unique_violation(&e)
                    && let Some(id) = self.replay(sub.api_key_id, key, request_hash).await?
                {
                    return Ok(Outcome::Accepted(id));
                }
                Err(e.into())
            }
        }
    }

    /// The rules' verdict on an invite from a sender in `state`, at `at_ms` (now when `None`).
    /// Held senders go through the same checks as everyone: their answers must not come sooner
    /// (that would tell them they are banned), and their attempts keep counting.
    async fn decide(
        &self,
        invite: &ValidInvite,
        state: SenderState,
        at_ms: Option<u64>,
    ) -> Result<Decided, InviteError> {
        if state == SenderState::Trusted {
            return Ok(trusted());
        }
        let checked = self.check_rules(invite, at_ms).await?;
        Ok(verdict(&checked, state))
    }

    /// What an invite becomes while Redis cannot be asked, by the configured policy.
    fn without_redis(&self, error: &LimiterError) -> Result<Decided, InviteError> {
        self.redis.failed(error);
        let (status, reason) = match self.on_redis_error {
            RedisPolicy::Closed => {
                return Err(InviteError::Unavailable(
                    "the rate limiter is unavailable".into(),
                ));
            }
            RedisPolicy::Defer => (Status::Deferred, "redis_unavailable_deferred"),
            RedisPolicy::Open => (Status::Queued, "redis_unavailable_sent_unchecked"),
        };
        Ok(Decided {
            status,
            decision: json!({"reason": reason}),
            breach: None,
            rejection: None,
        })
    }

    /// Checks deferred invites against the rules with their own timestamps, oldest first, a batch
    /// at a time; returns how many were decided (0 while Redis still does not answer). A `reject`
    /// verdict becomes `suppressed`: the caller was answered 200 long ago.
    pub async fn recheck_deferred(&self) -> Result<usize, InviteError> {
        let mut tx = self.pool.begin().await?;
        let rows: Vec<DeferredRow> = sqlx::query_as(
            "SELECT id, sender_id, recipient, recipient_domain, sender_ip, created_at FROM invites
             WHERE status = 'deferred' ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED",
        )
        .fetch_all(&mut *tx)
        .await?;
        let mut decided = 0;
        for (id, sender_id, recipient, recipient_domain, sender_ip, created_at) in rows {
            let invite = ValidInvite {
                sender_ip: sender_ip.and_then(|ip| ip.parse().ok()),
                sender_id,
                recipient,
                recipient_domain,
                resource: None,
                message: None,
                sender_name: None,
            };
            let state = self.senders.get(&self.pool, &invite.sender_id).await?;
            let at_ms = created_at.timestamp_millis().max(0) as u64;
            let d = match self.decide(&invite, state, Some(at_ms)).await {
                Ok(d) => d,
                // Still down: what was decided so far is kept, the rest waits.
                Err(InviteError::Limiter(_)) => break,
                Err(e) => return Err(e),
            };
            if let Some(b) = &d.breach {
                flag(&mut tx, &invite.sender_id, b).await?;
            }
            let mut decision = d.decision;
            decision["deferred"] = json!(true);
            sqlx::query(
                "UPDATE invites SET status = $2, decision = $3,
                     next_attempt_at = CASE WHEN $2 = 'queued' THEN now() END
                 WHERE id = $1",
            )
            .bind(id)
            .bind(d.status.as_str())
            .bind(&decision)
            .execute(&mut *tx)
            .await?;
            if d.status == Status::Held {
                sqlx::query("UPDATE senders SET held_stored = held_stored + 1 WHERE id = $1")
                    .bind(&invite.sender_id)
                    .execute(&mut *tx)
                    .await?;
            }
            decided += 1;
        }
        tx.commit().await?;
        if decided > 0 {
            tracing::info!(decided, "deferred invites checked");
        }
        Ok(decided)
    }

    /// Re-checks deferred invites every second until the task is dropped.
    pub fn watch_deferred(&self) -> tokio::task::JoinHandle<()> {
        let service = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                match service.recheck_deferred().await {
                    // A full batch: there may be more at once.
                    Ok(100) => continue,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "re-checking deferred invites failed"),
                }
            }
        })
    }

    /// The first answer to an Idempotency-Key, if it was used before.
    async fn replay(
        &self,
        api_key_id: i64,
        key: &str,
        request_hash: &[u8],
    ) -> Result<Option<Uuid>, InviteError> {
        let found: Option<(Uuid, Option<Vec<u8>>)> = sqlx::query_as(
            "SELECT id, request_hash FROM invites WHERE api_key_id = $1 AND idempotency_key = $2",
        )
        .bind(api_key_id)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        match found {
            None => Ok(None),
            Some((id, Some(hash))) if hash == request_hash => Ok(Some(id)),
            Some(_) => Err(InviteError::IdempotencyConflict),
        }
    }

    /// Every enabled rule that applies, in one pipeline: all keys of a subject share a hash tag.
    async fn check_rules(
        &self,
        invite: &ValidInvite,
        at_ms: Option<u64>,
    ) -> Result<Vec<Checked>, InviteError> {
        let mut rules = Vec::new();
        let mut keys: Vec<LimitKey> = Vec::new();
        let ip = invite.sender_ip.map(|ip| ip.to_string());
        let of = Subjects {
            sender_id: &invite.sender_id,
            sender_ip: ip.as_deref(),
            recipient: &invite.recipient,
            recipient_domain: &invite.recipient_domain,
        };
        for rule in self.rules.enabled() {
            if let Some(subject) = rule.scope.subject(&of) {
                keys.push(self.keys.key(&subject, &rule.name, &rule.quota));
                rules.push(rule);
            }
        }
        // Global rules are counted in process (see `global`) unless the invite is a replay.
        let local: Vec<bool> = rules
            .iter()
            .map(|r| r.scope == Scope::Global && at_ms.is_none() && self.global.is_some())
            .collect();
        let checks: Vec<Check<'_>> = rules
            .iter()
            .zip(&keys)
            .zip(&local)
            .filter(|(_, local)| !**local)
            .map(|((rule, key), _)| Check {
                key,
                quota: &rule.quota,
                cost: 1,
            })
            .collect();
        let started = std::time::Instant::now();
        let mut remote = match self.limiter.check_batch(&checks, at_ms).await {
            Ok(d) => d.into_iter(),
            Err(e) => {
                self.metrics
                    .count("sendguard_dependency_errors_total", &[("kind", "redis")]);
                return Err(e.into());
            }
        };
        let mut decisions = Vec::with_capacity(rules.len());
        for ((rule, key), local) in rules.iter().zip(&keys).zip(local) {
            let decision = match (&self.global, local) {
                (Some(global), true) => global.count(key, &rule.quota),
                _ => remote
                    .next()
                    .ok_or_else(|| LimiterError::BadReply("too few decisions".into()))?,
            };
            decisions.push(decision);
        }
        self.metrics
            .observe("sendguard_redis_seconds", &[], started.elapsed());
        self.redis.recovered();
        for (rule, d) in rules.iter().zip(&decisions) {
            let outcome = if d.allowed { "ok" } else { "exceeded" };
            self.metrics.count(
                "sendguard_decisions_total",
                &[
                    ("rule", rule.name.as_str()),
                    ("action", rule.action.as_str()),
                    ("outcome", outcome),
                ],
            );
        }
        Ok(rules
            .into_iter()
            .zip(decisions)
            .map(|(rule, decision)| Checked { rule, decision })
            .collect())
    }

    /// Counts a held invite against the sender's cap; false when the cap is full.
    async fn take_held_slot(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        sender_id: &str,
    ) -> Result<bool, InviteError> {
        let took = sqlx::query(
            "UPDATE senders SET held_stored = held_stored + 1 WHERE id = $1 AND held_stored < $2",
        )
        .bind(sender_id)
        .bind(self.held_cap)
        .execute(&mut **tx)
        .await?
        .rows_affected()
            == 1;
        if !took {
            sqlx::query("UPDATE senders SET held_overflow = held_overflow + 1 WHERE id = $1")
                .bind(sender_id)
                .execute(&mut **tx)
                .await?;
        }
        Ok(took)
    }
}

/// Flags the sender with the shadow-ban rule it broke, in the caller's transaction.
async fn flag(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender_id: &str,
    breach: &Checked,
) -> Result<(), sqlx::Error> {
    let flag = Flag {
        sender_id,
        rule_id: breach.rule.id,
        rule_name: &breach.rule.name,
        observed: breach.decision.count as i64,
        limit: breach.rule.quota.limit as i64,
        window_secs: (breach.rule.quota.window_ms / 1000) as i64,
    };
    moderation::shadow_ban(tx, &flag).await.map(drop)
}

type DeferredRow = (
    Uuid,
    String,
    String,
    String,
    Option<String>,
    chrono::DateTime<chrono::Utc>,
);

/// A trusted sender's invite: no rule is checked.
fn trusted() -> Decided {
    Decided {
        status: Status::Queued,
        decision: json!({"reason": "trusted"}),
        breach: None,
        rejection: None,
    }
}

/// The verdict of the checked rules on an invite from a sender in `state` (not trusted).
fn verdict(checked: &[Checked], state: SenderState) -> Decided {
    let strongest = checked
        .iter()
        .filter(|c| !c.decision.allowed)
        .map(|c| c.rule.action)
        .max();
    let mut decision = decision_record(checked, strongest);
    if strongest == Some(Action::Reject)
        && let Some(r) = rejection(checked)
    {
        return Decided {
            status: Status::Suppressed,
            decision,
            breach: None,
            rejection: Some(r),
        };
    }
    if state.holds_invites() {
        decision["reason"] = json!(format!("sender_{}", state.as_str()));
        return Decided {
            status: Status::Held,
            decision,
            breach: None,
            rejection: None,
        };
    }
    let status = match strongest {
        Some(Action::ShadowBan) => Status::Held,
        Some(Action::Suppress) => Status::Suppressed,
        _ => Status::Queued,
    };
    let breach = checked
        .iter()
        .find(|c| !c.decision.allowed && c.rule.action == Action::ShadowBan)
        .cloned();
    Decided {
        status,
        decision,
        breach,
        rejection: None,
    }
}

/// Why an invite got its status: each rule checked, its count, limit and outcome.
fn decision_record(checked: &[Checked], action: Option<Action>) -> serde_json::Value {
    let rules: Vec<_> = checked
        .iter()
        .map(|c| {
            json!({
                "rule": c.rule.name,
                "scope": c.rule.scope.as_str(),
                "action": c.rule.action.as_str(),
                "count": c.decision.count,
                "limit": c.rule.quota.limit,
                "window_secs": c.rule.quota.window_ms / 1000,
                "outcome": if c.decision.allowed { "ok" } else { "exceeded" },
            })
        })
        .collect();
    json!({"reason": "rules", "action": action.map(Action::as_str), "rules": rules})
}

/// The answer to a `reject` breach: the exceeded reject rule that frees up last.
fn rejection(checked: &[Checked]) -> Option<Rejection> {
    checked
        .iter()
        .filter(|c| !c.decision.allowed && c.rule.action == Action::Reject)
        .max_by_key(|c| c.decision.retry_after_ms)
        .map(|c| Rejection {
            rule: c.rule.name.clone(),
            limit: c.rule.quota.limit,
            remaining: c.decision.remaining,
            window_secs: c.rule.quota.window_ms / 1000,
            retry_after_secs: c.decision.retry_after_ms.div_ceil(1000).max(1),
            reset_secs: c.decision.reset_after_ms.div_ceil(1000),
        })
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "23505")
}
