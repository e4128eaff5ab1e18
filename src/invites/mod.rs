//! The send-invite flow (DESIGN.md §3a): sender state, rules, one write, an answer only after
//! the commit. Mail goes out later, from the outbox.
//!
//! This file holds the flow itself and the rule check; the verdict is [`policy`] (pure), the
//! SQL is [`store`], repeated requests are [`idempotency`], and invites accepted while Redis
//! was away are re-checked by [`deferred`].

mod deferred;
pub mod global;
pub mod http;
pub mod idempotency;
pub mod policy;
mod store;
pub mod validate;

use sqlx::PgPool;
use uuid::Uuid;

use crate::config::RedisPolicy;
use crate::incident::Incident;
use crate::limiter::{Check, KeyPrefix, LimitKey, Limiter, LimiterError};
use crate::metrics::Metrics;
use crate::moderation::{self, SenderState, SenderStates, Standing};
use crate::rules::{RuleCache, Scope, Subjects};
use idempotency::Earlier;
use policy::{Checked, Decided, Rejection, Status};
use store::{NewInvite, Written};
pub use validate::{InvalidBody, ValidInvite};

/// What the API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durably recorded: queued, held or suppressed alike.
    Accepted(Uuid),
    /// A `reject` rule is exceeded.
    Rejected(Rejection),
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

/// Times a state change may be seen between the verdict and the write before giving up.
const STATE_RETRIES: usize = 3;

impl InviteService {
    pub async fn submit(&self, sub: Submission<'_>) -> Result<Outcome, InviteError> {
        let request_hash = idempotency::request_hash(sub.body);
        if let Some(key) = sub.idempotency_key
            && let Some(id) = self.replay(sub.api_key_id, key, &request_hash).await?
        {
            return Ok(Outcome::Accepted(id));
        }
        let invite = &sub.invite;
        let mut standing = self.senders.get(&self.pool, &invite.sender_id).await?;
        // The rules count an invite once. When the sender's state turns out to have changed
        // since this instance cached it, the verdict is derived again from the same answers.
        let mut answers: Option<Result<Vec<Checked>, LimiterError>> = None;
        for _ in 0..STATE_RETRIES {
            let state = standing.state;
            let decided = if state == SenderState::Trusted {
                policy::trusted()
            } else {
                let checked = match answers.take() {
                    Some(checked) => checked,
                    None => match self.check_rules(invite, None).await {
                        Ok(c) => Ok(c),
                        Err(InviteError::Limiter(e)) => Err(e),
                        Err(e) => return Err(e),
                    },
                };
                let decided = match &checked {
                    Ok(c) => policy::verdict(c, state),
                    Err(e) => self.without_redis(e)?,
                };
                answers = Some(checked);
                decided
            };
            if let Some(r) = decided.rejection {
                return Ok(Outcome::Rejected(r));
            }
            let new = NewInvite {
                id: Uuid::new_v4(),
                api_key_id: sub.api_key_id,
                invite,
                status: decided.status,
                decision: &decided.decision,
                idempotency_key: sub.idempotency_key,
                request_hash: &request_hash,
            };
            match self.record(&new, standing, &decided).await {
                Ok(Written::StateDiffers) => {
                    self.senders.forget(&invite.sender_id);
                    standing = moderation::stored_standing(&self.pool, &invite.sender_id).await?;
                }
                Ok(_) => return Ok(Outcome::Accepted(new.id)),
                Err(e) => {
                    if let Some(key) = sub.idempotency_key
                        && idempotency::is_key_taken(&e)
                        && let Some(id) = self.replay(sub.api_key_id, key, &request_hash).await?
                    {
                        return Ok(Outcome::Accepted(id));
                    }
                    return Err(e.into());
                }
            }
        }
        Err(InviteError::Unavailable(
            "the sender's state keeps changing; retry shortly".into(),
        ))
    }

    /// Writes the invite (with the flag of a breach in the same transaction), timed and
    /// counted.
    async fn record(
        &self,
        new: &NewInvite<'_>,
        standing: Standing,
        decided: &Decided,
    ) -> Result<Written, sqlx::Error> {
        let started = std::time::Instant::now();
        let written = match (&decided.breach, decided.status) {
            (Some(breach), _) => {
                store::insert_with_flag(&self.pool, new, standing.state, breach, self.held_cap)
                    .await
            }
            (None, Status::Held) => {
                store::insert_held(&self.pool, new, standing.state, self.held_cap).await
            }
            (None, status) => {
                let admitted = standing.state == SenderState::Active && status == Status::Queued;
                store::insert(&self.pool, new, standing, admitted).await
            }
        };
        match &written {
            Ok(Written::StateDiffers) => {}
            Ok(_) => {
                self.postgres.recovered();
                self.metrics
                    .observe("sendguard_postgres_seconds", &[], started.elapsed());
                self.metrics.count(
                    "sendguard_invites_total",
                    &[("status", decided.status.as_str())],
                );
                if decided.breach.is_some() {
                    // Every instance hears of the new state from the trigger; this one at once.
                    self.senders.forget(&new.invite.sender_id);
                }
            }
            Err(e) if !idempotency::is_key_taken(e) => {
                self.postgres.failed(e);
                self.metrics
                    .count("sendguard_dependency_errors_total", &[("kind", "postgres")]);
            }
            Err(_) => {}
        }
        written
    }

    /// The first answer to an Idempotency-Key, if it was used before with the same body.
    async fn replay(
        &self,
        api_key_id: i64,
        key: &str,
        request_hash: &[u8],
    ) -> Result<Option<Uuid>, InviteError> {
        match idempotency::earlier(&self.pool, api_key_id, key, request_hash).await? {
            Earlier::Unused => Ok(None),
            Earlier::Same(id) => Ok(Some(id)),
            Earlier::Conflict => Err(InviteError::IdempotencyConflict),
        }
    }

    /// The rules' verdict on an invite from a sender in `state`, at `at_ms` (now when `None`).
    async fn decide(
        &self,
        invite: &ValidInvite,
        state: SenderState,
        at_ms: Option<u64>,
    ) -> Result<Decided, InviteError> {
        if state == SenderState::Trusted {
            return Ok(policy::trusted());
        }
        let checked = self.check_rules(invite, at_ms).await?;
        Ok(policy::verdict(&checked, state))
    }

    /// What an invite becomes while Redis cannot be asked, by the configured policy.
    fn without_redis(&self, error: &LimiterError) -> Result<Decided, InviteError> {
        self.redis.failed(error);
        policy::without_redis(self.on_redis_error)
            .ok_or_else(|| InviteError::Unavailable("the rate limiter is unavailable".into()))
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
            .map(|((rule, key), _)| Check::new(key, &rule.quota, 1))
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
}
