//! What a reviewer reads about senders: the review queue, one sender's record, its flags and
//! its invites. The queries on growing tables are constants so that `tests/it/explain.rs` can
//! check each one uses an index on a million invites.

use sqlx::PgPool;

use crate::sender_key::SenderKey;

type Time = chrono::DateTime<chrono::Utc>;

/// The review queue: shadow-banned senders, and active senders with invites held for review or
/// flagged for it with nothing held, of every app or of app `$3`; repeat offenders first, then
/// newest flag first, with the evidence the page shows. A sender flagged for a campaign still
/// awaiting its decision is left out: the campaign is one row of its own ([`CAMPAIGNS`]).
pub const QUEUE: &str =
    "SELECT s.app_id, a.name AS app, s.id, s.version, s.state, s.repeat_offender, s.linked_to,
            COALESCE(s.created_in_app_at, s.first_seen_at) AS since, s.accepted,
            f.rule_name, f.signal, f.action, f.observed, f.limit_count,
            s.held_stored + s.held_overflow AS held,
            d.recipients, d.domains, d.sent,
            (SELECT count(*) FROM outcomes o
                WHERE o.app_id = s.app_id AND o.sender_id = s.id AND o.type = 'bounce'
                AND o.at > now() - interval '1 day') AS bounces,
            (SELECT count(*) FROM outcomes o
                WHERE o.app_id = s.app_id AND o.sender_id = s.id AND o.type = 'complaint'
                AND o.at > now() - interval '1 day') AS complaints,
            (SELECT left(coalesce(i.message, i.resource, i.sender_name, ''), 140) FROM invites i
                WHERE i.id = f.invite_id AND i.app_id = s.app_id) AS tripping,
            (SELECT left(coalesce(i.message, i.resource, i.sender_name, ''), 140) FROM invites i
                WHERE i.app_id = s.app_id AND i.sender_id = s.id AND i.status = 'held'
                ORDER BY i.created_at DESC LIMIT 1) AS latest_held
     FROM (SELECT * FROM senders WHERE state = 'shadow_banned'
               AND ($3::bigint IS NULL OR app_id = $3)
           UNION ALL
           SELECT * FROM senders
           WHERE state = 'active' AND (held_stored > 0 OR review_requested_at IS NOT NULL)
               AND ($3::bigint IS NULL OR app_id = $3)) s
     JOIN apps a ON a.id = s.app_id
         AND NOT EXISTS (SELECT 1 FROM flags c WHERE c.app_id = s.app_id AND c.sender_id = s.id
             AND c.closed_at IS NULL AND c.campaign_id IS NOT NULL)
     LEFT JOIN LATERAL (
         SELECT rule_name, signal, action, observed, limit_count, created_at, invite_id FROM flags
         WHERE app_id = s.app_id AND sender_id = s.id ORDER BY created_at DESC LIMIT 1) f ON true
     LEFT JOIN LATERAL (
         SELECT count(DISTINCT recipient) AS recipients,
                count(DISTINCT recipient_domain) AS domains,
                count(*) FILTER (WHERE status = 'sent') AS sent
         FROM (SELECT recipient, recipient_domain, status FROM invites i
               WHERE i.app_id = s.app_id AND i.sender_id = s.id
                 AND i.created_at > now() - interval '1 day'
               LIMIT 10000) recent) d ON true
     ORDER BY s.repeat_offender DESC, f.created_at DESC NULLS LAST, a.name, s.id
     LIMIT $1 OFFSET $2";

/// Campaigns with senders flagged and not decided yet, of every app or of app `$1`, newest
/// first: one row each in the review queue.
pub const CAMPAIGNS: &str = "SELECT c.id, c.kind, c.normalised, c.sample, c.rule_name,
         count(DISTINCT (f.app_id, f.sender_id)) AS senders, max(f.last_seen_at) AS last_flag
     FROM flags f JOIN campaigns c ON c.id = f.campaign_id
     WHERE f.closed_at IS NULL AND f.campaign_id IS NOT NULL
         AND ($1::bigint IS NULL OR f.app_id = $1)
     GROUP BY c.id ORDER BY last_flag DESC LIMIT 50";

/// One campaign of the review queue.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AwaitingCampaign {
    pub id: i64,
    pub kind: String,
    pub normalised: String,
    pub sample: Option<String>,
    pub rule_name: String,
    pub senders: i64,
    pub last_flag: Time,
}

/// The campaigns of the review queue.
pub async fn campaigns_awaiting(
    pool: &PgPool,
    app_id: Option<i64>,
) -> Result<Vec<AwaitingCampaign>, sqlx::Error> {
    sqlx::query_as(CAMPAIGNS).bind(app_id).fetch_all(pool).await
}

/// Senders awaiting review.
pub const AWAITING: &str = "SELECT
     (SELECT count(*) FROM senders WHERE state = 'shadow_banned')
     + (SELECT count(*) FROM senders
        WHERE state = 'active' AND (held_stored > 0 OR review_requested_at IS NOT NULL))";

/// A sender's invites, newest first, with what their recipients reported of them.
pub const INVITES: &str = "SELECT id, created_at, recipient, status, decision, resource, message,
         sender_name,
         (SELECT string_agg(o.type, ', ' ORDER BY o.type) FROM outcomes o
          WHERE o.invite_id = i.id) AS outcomes
     FROM invites i
     WHERE app_id = $4 AND sender_id = $1 ORDER BY created_at DESC, id LIMIT $2 OFFSET $3";

/// One row of the review queue. The flag fields are empty for a sender banned by hand.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Awaiting {
    pub app_id: i64,
    pub app: String,
    pub id: String,
    pub version: i64,
    pub state: String,
    pub repeat_offender: bool,
    pub linked_to: Option<String>,
    pub since: Time,
    pub accepted: i64,
    pub rule_name: Option<String>,
    pub signal: Option<String>,
    pub action: Option<String>,
    pub observed: Option<i64>,
    pub limit_count: Option<i64>,
    /// Held invites, stored or counted beyond the cap.
    pub held: i64,
    /// Distinct recipients and domains, and invites sent, in the last day.
    pub recipients: i64,
    pub domains: i64,
    pub sent: i64,
    pub bounces: i64,
    pub complaints: i64,
    /// The start of the text of the invite that tripped the latest flag.
    pub tripping: Option<String>,
    /// The start of the latest held invite's text, for a sender with no such invite (banned
    /// by hand, or the invite gone with retention).
    pub latest_held: Option<String>,
}

/// `limit` rows of the review queue (of app `app_id`, or all) after skipping `offset`.
pub async fn queue(
    pool: &PgPool,
    app_id: Option<i64>,
    limit: i64,
    offset: i64,
) -> Result<Vec<Awaiting>, sqlx::Error> {
    sqlx::query_as(QUEUE)
        .bind(limit)
        .bind(offset)
        .bind(app_id)
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
    pub created_in_app_at: Option<Time>,
    pub held_stored: i64,
    pub held_overflow: i64,
    pub accepted: i64,
    pub linked_to: Option<String>,
    pub repeat_offender: bool,
    pub first_address: Option<String>,
    /// Flagged for review with nothing held, and not decided since.
    pub review_requested: bool,
    /// Invites delivered, for the acceptance rate.
    pub sent: i64,
    /// When a `banned` sender's term ends; none while banned: permanent.
    pub banned_until: Option<Time>,
}

pub async fn find(pool: &PgPool, sender: &SenderKey) -> Result<Option<Sender>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, state, version, first_seen_at, last_seen_at, created_in_app_at, held_stored,
             held_overflow, accepted, linked_to, repeat_offender, first_address,
             review_requested_at IS NOT NULL AS review_requested, banned_until,
             (SELECT count(*) FROM invites i
              WHERE i.app_id = s.app_id AND i.sender_id = s.id AND i.status = 'sent') AS sent
         FROM senders s WHERE app_id = $1 AND id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_optional(pool)
    .await
}

/// A flag as the sender page lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecordedFlag {
    pub created_at: Time,
    pub rule_name: String,
    pub signal: String,
    pub action: String,
    pub observed: i64,
    pub limit_count: i64,
    pub window_secs: i64,
    pub repeat: bool,
}

/// The sender's fifty latest flags.
pub async fn flags(pool: &PgPool, sender: &SenderKey) -> Result<Vec<RecordedFlag>, sqlx::Error> {
    sqlx::query_as(
        "SELECT created_at, rule_name, signal, action, observed, limit_count, window_secs, repeat
         FROM flags WHERE app_id = $1 AND sender_id = $2 ORDER BY created_at DESC LIMIT 50",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_all(pool)
    .await
}

/// An invite as the sender page lists it, with the record of why it got its status and the
/// sender's words.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SentInvite {
    pub id: uuid::Uuid,
    pub created_at: Time,
    pub recipient: String,
    pub status: String,
    pub decision: serde_json::Value,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
    /// The outcomes reported of it (`bounce`, `complaint`, `accepted`), when read.
    #[sqlx(default)]
    pub outcomes: Option<String>,
}

/// The sender's held invites, newest first, at most 100.
pub async fn held(pool: &PgPool, sender: &SenderKey) -> Result<Vec<SentInvite>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, created_at, recipient, status, decision, resource, message, sender_name
         FROM invites WHERE app_id = $1 AND sender_id = $2 AND status = 'held'
         ORDER BY created_at DESC LIMIT 100",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_all(pool)
    .await
}

/// A reviewer's note.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Note {
    pub created_at: Time,
    pub author: String,
    pub body: String,
}

/// The notes on a sender, newest first.
pub async fn notes(pool: &PgPool, sender: &SenderKey) -> Result<Vec<Note>, sqlx::Error> {
    sqlx::query_as(
        "SELECT created_at, author, body FROM sender_notes WHERE app_id = $1 AND sender_id = $2
         ORDER BY created_at DESC LIMIT 100",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_all(pool)
    .await
}

/// Outcomes of the sender's invites in the last day: bounces and complaints.
pub async fn outcomes_last_day(
    pool: &PgPool,
    sender: &SenderKey,
) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE type = 'bounce'), count(*) FILTER (WHERE type = 'complaint')
         FROM outcomes WHERE app_id = $1 AND sender_id = $2 AND at > now() - interval '1 day'",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_one(pool)
    .await
}

/// `limit` of the sender's invites, newest first, after skipping `offset`.
pub async fn invites(
    pool: &PgPool,
    sender: &SenderKey,
    limit: i64,
    offset: i64,
) -> Result<Vec<SentInvite>, sqlx::Error> {
    sqlx::query_as(INVITES)
        .bind(&sender.id)
        .bind(limit)
        .bind(offset)
        .bind(sender.app_id)
        .fetch_all(pool)
        .await
}

/// The apps that have a sender of id `$1`, by name.
pub const APPS_OF: &str = "SELECT a.name FROM senders s JOIN apps a ON a.id = s.app_id
     WHERE s.id = $1 ORDER BY a.name";

/// The apps that have a sender of this id, by name.
pub async fn apps_of(pool: &PgPool, id: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(APPS_OF).bind(id).fetch_all(pool).await
}
