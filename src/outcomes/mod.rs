//! What happened to a delivered invite, reported later (docs/DESIGN.md §2, §4): a bounce, a
//! complaint, or the recipient accepting. Each is recorded once per invite and type, and
//! counted against the sender of the invite, at the time it arrives, by every rule of its
//! signal; a rule it exceeds flags (and for `shadow_ban`, bans) that sender at once, so the
//! next invite is held. One that arrives while Redis does not answer is recorded all the same
//! and counted, at its time, once Redis answers again.

pub mod http;

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::limiter::{Check, KeyPrefix, Limiter, LimiterError};
use crate::moderation::terms::Ladder;
use crate::moderation::{self, Flag, SenderState, SenderStates};
use crate::rules::contribution::{VOUCH_AFTER, VOUCHING_DOMAINS};
use crate::rules::{Action, RuleCache, Signal, Subjects};
use crate::sender_key::SenderKey;

/// A kind of outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
#[derive(strum::EnumString, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_type)]
pub enum OutcomeType {
    Bounce,
    Complaint,
    Accepted,
}

impl OutcomeType {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The signal that counts it, if one does.
    fn signal(self) -> Option<Signal> {
        match self {
            OutcomeType::Bounce => Some(Signal::Bounces),
            OutcomeType::Complaint => Some(Signal::Complaints),
            OutcomeType::Accepted => None,
        }
    }
}

fn unknown_type(s: &str) -> String {
    crate::names::unknown::<OutcomeType>("outcome type", s)
}

#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// No such invite, or one of another caller.
    #[error("no such invite")]
    NotFound,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// The limiter did not answer (an outcome is kept, to be counted later).
    #[error("limiter: {0}")]
    Limiter(#[from] LimiterError),
    /// The count's task ended without an answer (the outcome's lease brings it back).
    #[error("counting: {0}")]
    Task(String),
}

/// Whether an outcome was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New,
    /// The same invite had this outcome already: counted once.
    Again,
}

/// Records and counts outcomes.
#[derive(Clone)]
pub struct Outcomes {
    pub pool: PgPool,
    pub limiter: Limiter,
    pub keys: KeyPrefix,
    pub rules: RuleCache,
    pub senders: SenderStates,
    /// Confirm a repeat offender's ban without waiting for review, for the ladder's term.
    pub confirm_repeat: Option<Ladder>,
}

/// Outcomes the task reads at a time.
const RECOUNT_BATCH: i64 = 100;

/// How long a count holds an outcome: far beyond a Redis call's timeout.
const COUNT_LEASE: Duration = Duration::from_secs(30);

/// The invite an outcome is about.
#[derive(sqlx::FromRow)]
struct Of {
    app_id: i64,
    sender_id: String,
    sender_ip: Option<String>,
    recipient: String,
    recipient_domain: String,
}

impl Outcomes {
    /// Records outcome `kind` of invite `invite_id`. `app_id` is the caller's app: an invite
    /// of another app is not found. `None` for what sendguard itself saw (a refusal from the
    /// mail server, the report link).
    pub async fn record(
        &self,
        invite_id: Uuid,
        kind: OutcomeType,
        app_id: Option<i64>,
    ) -> Result<Recorded, OutcomeError> {
        let of: Option<Of> = sqlx::query_as(
            "SELECT app_id, sender_id, sender_ip, recipient, recipient_domain FROM invites
             WHERE id = $1 AND ($2::bigint IS NULL OR app_id = $2)",
        )
        .bind(invite_id)
        .bind(app_id)
        .fetch_optional(&self.pool)
        .await?;
        let of = of.ok_or(OutcomeError::NotFound)?;
        let sender = SenderKey::new(of.app_id, of.sender_id.as_str());
        // An outcome that counts is written uncounted, held for this request's count by a
        // lease: if the request stops before counting it, the task counts it once the lease is
        // over.
        let mut tx = self.pool.begin().await?;
        let new = sqlx::query(
            "INSERT INTO outcomes (invite_id, type, app_id, sender_id, counted, counting_until)
             VALUES ($1, $2, $3, $4, $5,
                 CASE WHEN NOT $5 THEN now() + make_interval(secs => $6) END)
             ON CONFLICT DO NOTHING",
        )
        .bind(invite_id)
        .bind(kind.as_str())
        .bind(sender.app_id)
        .bind(&sender.id)
        .bind(kind.signal().is_none())
        .bind(COUNT_LEASE.as_secs_f64())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if new && kind == OutcomeType::Accepted {
            // Every acceptance is counted for the reviewers; one vouches for the sender only
            // as `contribution::vouches` says, and its domain is kept among the first few.
            sqlx::query(
                "UPDATE senders s SET accepted = accepted + 1,
                     vouched = vouched + (CASE WHEN i.vouches THEN 1 ELSE 0 END),
                     vouched_domains = CASE
                         WHEN i.vouches AND NOT i.domain = ANY(vouched_domains)
                             AND cardinality(vouched_domains) < $4
                         THEN vouched_domains || i.domain ELSE vouched_domains END
                 FROM (SELECT sent_at IS NOT NULL AND now() >= sent_at + $5 AS vouches,
                           recipient_domain AS domain
                       FROM invites WHERE id = $3) i
                 WHERE s.app_id = $1 AND s.id = $2",
            )
            .bind(sender.app_id)
            .bind(&sender.id)
            .bind(invite_id)
            .bind(VOUCHING_DOMAINS as i32)
            .bind(VOUCH_AFTER)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if !new {
            return Ok(Recorded::Again);
        }
        if kind == OutcomeType::Accepted {
            // A sender's acceptances make it less new: the cached standing is stale.
            self.senders.forget(&sender);
        }
        if let Some(signal) = kind.signal() {
            // In a task of its own: a caller that stops waiting (a client gone while Redis is
            // slow) does not leave a count Redis may already be making unmarked, to be made
            // again once the lease is over.
            let outcomes = self.clone();
            let counting = tokio::spawn(async move {
                let sender = SenderKey::new(of.app_id, of.sender_id.as_str());
                let counted = outcomes
                    .count(&of, &sender, signal, invite_id, kind, None)
                    .await;
                match counted {
                    Err(OutcomeError::Limiter(e)) => {
                        // Recorded all the same: counted once Redis answers.
                        tracing::warn!(error = %e, invite = %invite_id, kind = kind.as_str(),
                            "outcome kept uncounted until Redis answers");
                        release(&outcomes.pool, invite_id, kind.as_str()).await?;
                        Ok(())
                    }
                    other => other,
                }
            });
            counting
                .await
                .map_err(|e| OutcomeError::Task(e.to_string()))??;
        }
        Ok(Recorded::New)
    }

    /// Counts, oldest first, up to a batch of the outcomes not counted whose lease is over,
    /// each at the time it arrived; returns how many were counted (0 while Redis still does not
    /// answer). Each is leased before its count, so instances never count one at the same
    /// time, and released when Redis fails; one whose invite retention has dropped is marked
    /// without a count. Nothing is held across the calls to Redis.
    async fn count_uncounted(&self) -> Result<usize, OutcomeError> {
        let rows: Vec<Uncounted> = sqlx::query_as(
            "SELECT o.invite_id, o.type AS kind, o.at, i.app_id, i.sender_id, i.sender_ip,
                 i.recipient, i.recipient_domain
             FROM outcomes o LEFT JOIN invites i ON i.id = o.invite_id
             WHERE NOT o.counted AND (o.counting_until IS NULL OR o.counting_until < now())
             ORDER BY o.at LIMIT $1",
        )
        .bind(RECOUNT_BATCH)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() || !self.limiter.drained().await {
            return Ok(0);
        }
        let mut counted = 0;
        for row in &rows {
            if !lease(&self.pool, row.invite_id, &row.kind).await? {
                // Another instance has it.
                continue;
            }
            let kind = row.kind.parse::<OutcomeType>().ok();
            match (kind.and_then(OutcomeType::signal), kind, row.of()) {
                (Some(signal), Some(kind), Some(of)) => {
                    let sender = SenderKey::new(of.app_id, of.sender_id.as_str());
                    let result = self
                        .count(&of, &sender, signal, row.invite_id, kind, Some(row.at))
                        .await;
                    if let Err(e) = result {
                        if matches!(e, OutcomeError::Limiter(_)) {
                            // Still down: this one and the rest wait.
                            release(&self.pool, row.invite_id, &row.kind).await?;
                            break;
                        }
                        return Err(e);
                    }
                }
                // Nothing to count it against.
                _ => mark_counted(&self.pool, row.invite_id, &row.kind).await?,
            }
            counted += 1;
        }
        if counted > 0 {
            tracing::info!(counted, "outcomes left uncounted counted");
        }
        Ok(counted)
    }

    /// Counts kept outcomes every second until `stop` is cancelled.
    pub async fn watch_uncounted(self, stop: CancellationToken) {
        crate::coalesce::every_second(
            stop,
            RECOUNT_BATCH as usize,
            "counting kept outcomes",
            || self.count_uncounted(),
        )
        .await;
    }

    /// Counts one occurrence of `signal` for every enabled rule of it, and flags the sender
    /// for the strongest flagging rule it now exceeds, unless it is evidence a lift already
    /// set aside (docs/DESIGN.md §3b): a lift came while Redis counted (it clears the counts this
    /// one was added to), or the outcome arrived before the last lift (counted late, at
    /// `at`).
    async fn count(
        &self,
        of: &Of,
        sender: &SenderKey,
        signal: Signal,
        invite_id: Uuid,
        kind: OutcomeType,
        at: Option<DateTime<Utc>>,
    ) -> Result<(), OutcomeError> {
        let subjects = Subjects {
            sender,
            sender_ip: of.sender_ip.as_deref().and_then(|ip| ip.parse().ok()),
            recipient: &of.recipient,
            recipient_domain: &of.recipient_domain,
            campaign: &[],
        };
        let rules: Vec<_> = self
            .rules
            .enabled()
            .into_iter()
            .filter(|r| r.signal == signal)
            .filter_map(|r| {
                let subject = r.scope.subject(&subjects)?;
                let key = self.keys.key(&subject, &r.name, &r.quota);
                Some((r, key))
            })
            .collect();
        let checks: Vec<Check<'_>> = rules
            .iter()
            .map(|(r, key)| Check::new(key, &r.quota, 1))
            .collect();
        // When the sender was last lifted, before the count: a lift that comes while Redis
        // counts clears the counts this one was added to.
        let seen: Option<Option<DateTime<Utc>>> =
            sqlx::query_scalar("SELECT lifted_at FROM senders WHERE app_id = $1 AND id = $2")
                .bind(sender.app_id)
                .bind(&sender.id)
                .fetch_optional(&self.pool)
                .await?;
        let at_ms = at.map(|at| at.timestamp_millis().max(0) as u64);
        let decisions = self.limiter.check_batch(&checks, at_ms).await?;
        // Counted: whatever happens to the flag, the outcome is not counted again.
        mark_counted(&self.pool, invite_id, kind.as_str()).await?;
        let breach = rules
            .iter()
            .zip(&decisions)
            .filter(|((r, _), d)| !d.allowed && r.action.flags())
            .max_by_key(|((r, _), _)| r.action);
        let Some(((rule, _), decision)) = breach else {
            return Ok(());
        };
        let flag = Flag {
            sender,
            rule_id: Some(rule.id),
            rule_name: &rule.name,
            signal: signal.as_str(),
            observed: decision.count as i64,
            limit: rule.quota.limit as i64,
            window_secs: (rule.quota.window_ms / 1000) as i64,
            invite_id: Some(invite_id),
            campaign_id: None,
        };
        let mut tx = self.pool.begin().await?;
        let now: Option<(String, Option<DateTime<Utc>>)> = sqlx::query_as(
            "SELECT state, lifted_at FROM senders WHERE app_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(sender.app_id)
        .bind(&sender.id)
        .fetch_optional(&mut *tx)
        .await?;
        // Rules do not apply to a trusted sender (docs/DESIGN.md §2).
        let Some((state, lifted_at)) = now else {
            return Ok(());
        };
        let before_lift = at.zip(lifted_at).is_some_and(|(at, lifted)| at <= lifted);
        if state == SenderState::Trusted.as_str() || Some(lifted_at) != seen || before_lift {
            return Ok(());
        }
        if rule.action == Action::ShadowBan {
            moderation::shadow_ban(&mut tx, &flag, self.confirm_repeat.as_ref()).await?;
        } else {
            // The invite went out before its outcome came: nothing is held; the flag is on
            // the sender's page.
            moderation::flag_for_review(&mut tx, &flag).await?;
        }
        tx.commit().await?;
        self.senders.forget(sender);
        Ok(())
    }
}

/// An outcome kept uncounted, with its invite when retention has not dropped it.
#[derive(sqlx::FromRow)]
struct Uncounted {
    invite_id: Uuid,
    kind: String,
    at: DateTime<Utc>,
    app_id: Option<i64>,
    sender_id: Option<String>,
    sender_ip: Option<String>,
    recipient: Option<String>,
    recipient_domain: Option<String>,
}

impl Uncounted {
    fn of(&self) -> Option<Of> {
        Some(Of {
            app_id: self.app_id?,
            sender_id: self.sender_id.clone()?,
            sender_ip: self.sender_ip.clone(),
            recipient: self.recipient.clone()?,
            recipient_domain: self.recipient_domain.clone()?,
        })
    }
}

async fn mark_counted(pool: &PgPool, invite_id: Uuid, kind: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outcomes SET counted = true, counting_until = NULL
         WHERE invite_id = $1 AND type = $2",
    )
    .bind(invite_id)
    .bind(kind)
    .execute(pool)
    .await
    .map(drop)
}

/// Leases an outcome not counted whose lease is over; false when another has it.
async fn lease(pool: &PgPool, invite_id: Uuid, kind: &str) -> Result<bool, sqlx::Error> {
    let leased = sqlx::query(
        "UPDATE outcomes SET counting_until = now() + make_interval(secs => $3)
         WHERE invite_id = $1 AND type = $2 AND NOT counted
             AND (counting_until IS NULL OR counting_until < now())",
    )
    .bind(invite_id)
    .bind(kind)
    .bind(COUNT_LEASE.as_secs_f64())
    .execute(pool)
    .await?
    .rows_affected();
    Ok(leased == 1)
}

/// Gives an outcome's lease up, for the task to count it when Redis answers.
async fn release(pool: &PgPool, invite_id: Uuid, kind: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE outcomes SET counting_until = NULL
         WHERE invite_id = $1 AND type = $2 AND NOT counted",
    )
    .bind(invite_id)
    .bind(kind)
    .execute(pool)
    .await
    .map(drop)
}
