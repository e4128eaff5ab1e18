//! Appeals (docs/DESIGN.md §3e): a banned sender's request, passed on by its app, to have the
//! ban reviewed again; one open per sender, one per ban. A moderator grants it (the ban is
//! lifted and its strike removed) or denies it (the ban and its term stand), each with a reply
//! the app hears through its webhook. An appeal still open when its ban ends otherwise is
//! moot (migration 0019's trigger). Also here: a sender's standing as its app reads it.

pub mod http;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::audit::{self, Entry};
use crate::limiter::{KeyPrefix, Limiter};
use crate::moderation::review::{self, Review, ReviewAction, ReviewError};
use crate::moderation::terms::{self, Ladder, STRIKE_DAYS};
use crate::moderation::{self, SenderState};
use crate::rules::RuleCache;
use crate::sender_key::SenderKey;
use crate::webhooks::EventType;

#[derive(Debug, thiserror::Error)]
pub enum AppealError {
    /// No such sender of the app, or it is not banned.
    #[error("no banned sender `{0}`")]
    NotFound(String),
    #[error("this sender has an appeal open, or already appealed this ban")]
    Conflict,
    #[error(
        "this appeal changed since you loaded the page (now {status}); reload and decide again"
    )]
    Stale { status: String },
    #[error(transparent)]
    Review(#[from] ReviewError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// Records an appeal against the sender's current ban; answers its id. `text` is checked.
pub async fn submit(pool: &PgPool, sender: &SenderKey, text: &str) -> Result<Uuid, AppealError> {
    let mut tx = pool.begin().await?;
    // FOR SHARE: the ban cannot end (and moot appeals) between this read and the insert.
    let ban: Option<(String, Option<i64>)> = sqlx::query_as(
        "SELECT state, (SELECT id FROM strikes t WHERE t.app_id = s.app_id
                 AND t.sender_id = s.id ORDER BY id DESC LIMIT 1)
         FROM senders s WHERE app_id = $1 AND id = $2 FOR SHARE",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_optional(&mut *tx)
    .await?;
    let strike = match ban {
        Some((state, Some(strike))) if state == SenderState::Banned.as_str() => strike,
        _ => return Err(AppealError::NotFound(sender.id.clone())),
    };
    // One open per sender, one per ban: either unique index refuses a second.
    let id: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO appeals (id, app_id, sender_id, strike_id, body)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(strike)
    .bind(text)
    .fetch_optional(&mut *tx)
    .await?;
    let id = id.ok_or(AppealError::Conflict)?;
    tx.commit().await?;
    Ok(id)
}

/// An appeal as the appeals page shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Appeal {
    pub id: Uuid,
    pub app_id: i64,
    pub sender_id: String,
    pub body: String,
    pub status: String,
    pub version: i64,
    pub reply: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The sender's version and held invites, for the decision's checks.
    pub sender_version: i64,
    pub held_stored: i64,
    pub banned_until: Option<DateTime<Utc>>,
}

const APPEAL: &str = "SELECT a.id, a.app_id, a.sender_id, a.body, a.status, a.version, a.reply,
         a.created_at, s.version AS sender_version, s.held_stored, s.banned_until
     FROM appeals a JOIN senders s ON s.app_id = a.app_id AND s.id = a.sender_id";

/// The open appeals, oldest first, at most `limit`.
pub async fn open(pool: &PgPool, limit: i64) -> Result<Vec<Appeal>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{APPEAL} WHERE a.status = 'open' ORDER BY a.created_at, a.id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await
}

pub async fn find(pool: &PgPool, id: Uuid) -> Result<Option<Appeal>, sqlx::Error> {
    sqlx::query_as(&format!("{APPEAL} WHERE a.id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// Open appeals, and how long the oldest has waited in seconds (0 with none): the reviewers'
/// load, on the overview and in the metrics.
pub async fn waiting(pool: &PgPool) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*),
             COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8
         FROM appeals WHERE status = 'open'",
    )
    .fetch_one(pool)
    .await
}

/// A moderator's answer to an appeal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Lift the ban and remove its strike; held invites released (`release`) or discarded.
    Grant { release: bool },
    /// The ban and its term stand.
    Deny,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Grant { .. } => "granted",
            Outcome::Deny => "denied",
        }
    }
}

/// One decision on one appeal, made on a page that showed the appeal at `seen_version` and its
/// sender at `seen_sender_version` with `seen_held` invites held.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    pub appeal: Uuid,
    pub seen_version: i64,
    pub seen_sender_version: i64,
    pub seen_held: i64,
    pub outcome: Outcome,
    /// What the app may show its user.
    pub reply: &'a str,
    pub actor: &'a str,
    pub admin_id: Option<i64>,
}

/// What a decision needs besides the database: a grant lifts the ban, clearing counters.
pub struct Lifting<'a> {
    pub limiter: &'a Limiter,
    pub keys: &'a KeyPrefix,
    pub rules: &'a RuleCache,
    pub ladder: &'a Ladder,
}

/// Decides an appeal in one transaction: refused when the appeal or its sender changed since
/// the page; audited; the app told through `appeal.decided` with the outcome and the reply.
pub async fn decide(
    pool: &PgPool,
    lifting: &Lifting<'_>,
    decision: &Decision<'_>,
) -> Result<(), AppealError> {
    let appeal = find(pool, decision.appeal)
        .await?
        .ok_or_else(|| AppealError::NotFound(decision.appeal.to_string()))?;
    let sender = SenderKey::new(appeal.app_id, appeal.sender_id.as_str());
    let lift = match decision.outcome {
        Outcome::Grant { release: true } => Some(ReviewAction::LiftAndRelease),
        Outcome::Grant { release: false } => Some(ReviewAction::LiftAndDiscard),
        Outcome::Deny => None,
    };
    let review = lift.map(|action| Review {
        sender: &sender,
        action,
        seen_version: decision.seen_sender_version,
        seen_held: Some(decision.seen_held),
        actor: decision.actor,
        admin_id: decision.admin_id,
        note: Some("appeal granted"),
        term: None,
        // The strike is removed below, as the appeal's.
        mistake: false,
        // A granted appeal's invites go out at once: the moderator read them with the appeal.
        release_after: std::time::Duration::ZERO,
    });
    if let Some(review) = &review {
        review::prepare(pool, lifting.limiter, lifting.keys, lifting.rules, review).await?;
    }
    let mut tx = pool.begin().await?;
    // The sender first, then the appeal: the order in which a ban's end takes them.
    review::lock_at(&mut tx, &sender, decision.seen_sender_version).await?;
    let current: Option<(String, i64)> =
        sqlx::query_as("SELECT status, version FROM appeals WHERE id = $1 FOR UPDATE")
            .bind(decision.appeal)
            .fetch_optional(&mut *tx)
            .await?;
    match current {
        Some((status, version)) if status == "open" && version == decision.seen_version => {}
        Some((status, _)) => return Err(AppealError::Stale { status }),
        None => return Err(AppealError::NotFound(decision.appeal.to_string())),
    }
    // Decided before the lift, which would otherwise find it open and make it moot.
    sqlx::query(
        "UPDATE appeals SET status = $2, reply = $3, version = version + 1, decided_at = now(),
             decided_by = $4
         WHERE id = $1",
    )
    .bind(decision.appeal)
    .bind(decision.outcome.as_str())
    .bind(decision.reply)
    .bind(decision.actor)
    .execute(&mut *tx)
    .await?;
    if let Some(review) = &review {
        terms::remove_latest(&mut tx, &sender, decision.actor, "appeal granted").await?;
        review::apply_in(&mut tx, lifting.ladder, review).await?;
    }
    let action = match decision.outcome {
        Outcome::Grant { .. } => "grant_appeal",
        Outcome::Deny => "deny_appeal",
    };
    audit::write(
        &mut *tx,
        Entry {
            admin_id: decision.admin_id,
            sender: Some(&sender),
            detail: json!({"appeal": decision.appeal, "outcome": decision.outcome.as_str()}),
            note: Some(decision.reply),
            ..Entry::new(decision.actor, action)
        },
    )
    .await?;
    let (state, until): (String, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT state, banned_until FROM senders WHERE app_id = $1 AND id = $2")
            .bind(sender.app_id)
            .bind(&sender.id)
            .fetch_one(&mut *tx)
            .await?;
    let data = json!({
        "appeal_id": decision.appeal,
        "outcome": decision.outcome.as_str(),
        "reply": decision.reply,
        "state": state,
        "banned_until": until,
    });
    moderation::announce(&mut tx, &sender, EventType::AppealDecided, data).await?;
    tx.commit().await?;
    Ok(())
}

/// A sender's standing as its app reads it (`GET /api/v1/senders/{sender_id}`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Standing {
    pub sender_id: String,
    pub state: String,
    pub banned_until: Option<DateTime<Utc>>,
    /// Strikes of the last 90 days that count.
    pub strikes: i64,
    pub appeal_id: Option<Uuid>,
    pub appeal_status: Option<String>,
    pub appeal_reply: Option<String>,
}

/// The standing of `sender`, or `None` when its app has no such sender. One statement either
/// way: an unknown sender costs what a known one does, so the time of the answer does not
/// tell another app's sender from none.
pub async fn standing(pool: &PgPool, sender: &SenderKey) -> Result<Option<Standing>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.id AS sender_id, s.state, s.banned_until,
             (SELECT count(*) FROM strikes t WHERE t.app_id = s.app_id AND t.sender_id = s.id
                 AND t.removed_at IS NULL
                 AND t.at > now() - make_interval(days => $3)) AS strikes,
             a.id AS appeal_id, a.status AS appeal_status, a.reply AS appeal_reply
         FROM senders s
         LEFT JOIN LATERAL (SELECT id, status, reply FROM appeals
             WHERE app_id = s.app_id AND sender_id = s.id
             ORDER BY created_at DESC LIMIT 1) a ON true
         WHERE s.app_id = $1 AND s.id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(STRIKE_DAYS as i32)
    .fetch_optional(pool)
    .await
}
