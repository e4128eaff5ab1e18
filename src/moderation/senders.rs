//! What a reviewer reads about senders: the review queue, one sender's record, its flags and
//! its invites. The queries on growing tables are constants so that `tests/it/explain.rs` can
//! check each one uses an index on a million invites.

use sqlx::PgPool;

type Time = chrono::DateTime<chrono::Utc>;

/// The review queue: shadow-banned senders, newest flag first, with what the page shows.
pub const QUEUE: &str = "SELECT s.id, s.version, f.rule_name, f.observed, f.limit_count,
            (SELECT min(created_at) FROM invites i WHERE i.sender_id = s.id) AS first_attempt,
            (SELECT max(created_at) FROM invites i WHERE i.sender_id = s.id) AS last_attempt,
            s.held_stored + s.held_overflow AS held,
            (SELECT string_agg(d, ', ') FROM (
                SELECT DISTINCT recipient_domain AS d FROM invites i
                WHERE i.sender_id = s.id AND i.status = 'held' ORDER BY 1 LIMIT 3) x) AS domains
     FROM senders s
     LEFT JOIN LATERAL (
         SELECT rule_name, observed, limit_count, created_at FROM flags
         WHERE sender_id = s.id ORDER BY created_at DESC LIMIT 1) f ON true
     WHERE s.state = 'shadow_banned'
     ORDER BY f.created_at DESC NULLS LAST, s.id
     LIMIT $1 OFFSET $2";

/// Senders awaiting review.
pub const AWAITING: &str = "SELECT count(*) FROM senders WHERE state = 'shadow_banned'";

/// A sender's invites, newest first.
pub const INVITES: &str = "SELECT created_at, recipient, status, decision FROM invites
     WHERE sender_id = $1 ORDER BY created_at DESC, id LIMIT $2 OFFSET $3";

/// One row of the review queue. The flag fields are empty for a sender banned by hand.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Awaiting {
    pub id: String,
    pub version: i64,
    pub rule_name: Option<String>,
    pub observed: Option<i64>,
    pub limit_count: Option<i64>,
    pub first_attempt: Option<Time>,
    pub last_attempt: Option<Time>,
    /// Held invites, stored or counted beyond the cap.
    pub held: i64,
    /// Up to three domains the held invites were for.
    pub domains: Option<String>,
}

/// `limit` rows of the review queue after skipping `offset`.
pub async fn queue(pool: &PgPool, limit: i64, offset: i64) -> Result<Vec<Awaiting>, sqlx::Error> {
    sqlx::query_as(QUEUE)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await
}

pub async fn awaiting_review(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AWAITING).fetch_one(pool).await
}

/// A sender's record.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Sender {
    pub id: String,
    pub state: String,
    pub version: i64,
    pub first_seen_at: Time,
    pub last_seen_at: Time,
    pub held_stored: i64,
    pub held_overflow: i64,
}

pub async fn find(pool: &PgPool, id: &str) -> Result<Option<Sender>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, state, version, first_seen_at, last_seen_at, held_stored, held_overflow
         FROM senders WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// A flag as the sender page lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecordedFlag {
    pub created_at: Time,
    pub rule_name: String,
    pub observed: i64,
    pub limit_count: i64,
    pub window_secs: i64,
}

/// The sender's fifty latest flags.
pub async fn flags(pool: &PgPool, id: &str) -> Result<Vec<RecordedFlag>, sqlx::Error> {
    sqlx::query_as(
        "SELECT created_at, rule_name, observed, limit_count, window_secs FROM flags
         WHERE sender_id = $1 ORDER BY created_at DESC LIMIT 50",
    )
    .bind(id)
    .fetch_all(pool)
    .await
}

/// An invite as the sender page lists it, with the record of why it got its status.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SentInvite {
    pub created_at: Time,
    pub recipient: String,
    pub status: String,
    pub decision: serde_json::Value,
}

/// `limit` of the sender's invites, newest first, after skipping `offset`.
pub async fn invites(
    pool: &PgPool,
    id: &str,
    limit: i64,
    offset: i64,
) -> Result<Vec<SentInvite>, sqlx::Error> {
    sqlx::query_as(INVITES)
        .bind(id)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await
}
