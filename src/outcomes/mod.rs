//! What happened to a delivered invite, reported later (DESIGN.md §2, §4): a bounce, a
//! complaint, or the recipient accepting. Each is recorded once per invite and type, then
//! counted against the sender of the invite, at the time it arrives, by every rule of its
//! signal; a rule it exceeds flags (and for `shadow_ban`, bans) that sender at once, so the
//! next invite is held.

pub mod http;

use std::str::FromStr;

use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::limiter::{Check, KeyPrefix, Limiter, LimiterError};
use crate::moderation::{self, Flag, SenderStates};
use crate::rules::{Action, RuleCache, Signal, Subjects};
use crate::sender::SenderKey;

/// A kind of outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum OutcomeType {
    Bounce,
    Complaint,
    Accepted,
}

impl OutcomeType {
    pub const ALL: [OutcomeType; 3] = [
        OutcomeType::Bounce,
        OutcomeType::Complaint,
        OutcomeType::Accepted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeType::Bounce => "bounce",
            OutcomeType::Complaint => "complaint",
            OutcomeType::Accepted => "accepted",
        }
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

impl FromStr for OutcomeType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::names::parse(&OutcomeType::ALL, OutcomeType::as_str, s, "outcome type")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// No such invite, or one of another caller.
    #[error("no such invite")]
    NotFound,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Not counted, so not kept: the limiter did not answer.
    #[error("limiter: {0}")]
    Limiter(#[from] LimiterError),
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
    /// Confirm a repeat offender's ban without waiting for review.
    pub confirm_repeat: bool,
}

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
        let mut tx = self.pool.begin().await?;
        let new = sqlx::query(
            "INSERT INTO outcomes (invite_id, type, app_id, sender_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
        )
        .bind(invite_id)
        .bind(kind.as_str())
        .bind(sender.app_id)
        .bind(&sender.id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if new && kind == OutcomeType::Accepted {
            sqlx::query("UPDATE senders SET accepted = accepted + 1 WHERE app_id = $1 AND id = $2")
                .bind(sender.app_id)
                .bind(&sender.id)
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
        if let Some(signal) = kind.signal()
            && let Err(e) = self.count(&of, &sender, signal, invite_id).await
        {
            // Not counted: forget it, so that the caller's retry records and counts it once.
            sqlx::query("DELETE FROM outcomes WHERE invite_id = $1 AND type = $2")
                .bind(invite_id)
                .bind(kind.as_str())
                .execute(&self.pool)
                .await?;
            return Err(e);
        }
        Ok(Recorded::New)
    }

    /// Counts one occurrence of `signal` for every enabled rule of it, and flags the sender
    /// for each flagging rule it now exceeds.
    async fn count(
        &self,
        of: &Of,
        sender: &SenderKey,
        signal: Signal,
        invite_id: Uuid,
    ) -> Result<(), OutcomeError> {
        let subjects = Subjects {
            sender,
            sender_ip: of.sender_ip.as_deref(),
            recipient: &of.recipient,
            recipient_domain: &of.recipient_domain,
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
        let decisions = self.limiter.check_batch(&checks, None).await?;
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
        };
        let mut tx = self.pool.begin().await?;
        if rule.action == Action::ShadowBan {
            moderation::shadow_ban(&mut tx, &flag, self.confirm_repeat).await?;
        } else {
            moderation::hold(&mut tx, &flag).await?;
        }
        tx.commit().await?;
        self.senders.forget(sender);
        Ok(())
    }
}
