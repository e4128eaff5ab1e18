//! The campaigns table: a campaign is written when a flagging rule of a campaign scope is
//! first exceeded, its queued invites swept into the held ones, and read by the dashboard.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::{FINGERPRINT, fingerprint};

/// A campaign as the dashboard lists it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Campaign {
    pub id: i64,
    pub subject: String,
    pub kind: String,
    pub normalised: String,
    pub sample: Option<String>,
    pub rule_name: String,
    pub detected_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub benign_at: Option<DateTime<Utc>>,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub version: i64,
    /// Distinct senders of its invites.
    pub senders: i64,
    pub held: i64,
    pub delivered: i64,
    /// Its first invite.
    pub first_seen_at: Option<DateTime<Utc>>,
}

/// What a campaign of `kind` is, in a moderator's words.
pub fn kind_words(kind: &str) -> &'static str {
    if kind == super::LINK_DOMAIN {
        "linked domain"
    } else {
        "text"
    }
}

/// Records a breach of the campaign of `subject` (a rule of `rule_name` was exceeded by invite
/// `invite`): the campaign when it is new, its last sighting and a new version when it is known.
/// Answers its id and whether its queue is due a sweep (docs/DESIGN.md §3d): at every breach in
/// the campaign's first seconds, when an invite counted just before the crossing may still be
/// committing, and then at most once a second, since every invite past the limit is held by its
/// own decision and only stragglers are left to find.
pub async fn detect(
    conn: &mut PgConnection,
    subject: &str,
    rule_name: &str,
    invite: Uuid,
) -> Result<(i64, bool), sqlx::Error> {
    // `now()` is the transaction's start: a campaign swept earlier in this transaction is not
    // due again.
    let known: Option<(i64, bool)> = sqlx::query_as(
        "WITH seen AS (
             SELECT id, swept_at IS NULL OR swept_at < now() - interval '1 second'
                 OR (detected_at > now() - interval '5 seconds' AND swept_at <> now()) AS due
             FROM campaigns WHERE subject = $1)
         UPDATE campaigns c SET last_seen_at = now(), version = c.version + 1,
             swept_at = CASE WHEN seen.due THEN now() ELSE c.swept_at END
         FROM seen WHERE c.id = seen.id
         RETURNING c.id, seen.due",
    )
    .bind(subject)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(known) = known {
        return Ok(known);
    }
    let text: Option<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT message, sender_name FROM invites WHERE id = $1")
            .bind(invite)
            .fetch_optional(&mut *conn)
            .await?;
    let (message, sender_name) = text.unwrap_or_default();
    let (kind, value) = subject.split_once(':').unwrap_or((subject, ""));
    let (normalised, signature) = if kind == FINGERPRINT {
        match fingerprint::of_invite(message.as_deref(), sender_name.as_deref()) {
            Some(f) => (f.normalised, Some(f.signature.to_bytes())),
            None => (String::new(), None),
        }
    } else {
        (value.to_owned(), None)
    };
    let sample = [sender_name.as_deref(), message.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ");
    // Another instance may have recorded it since: then this is a sighting, swept again.
    let id = sqlx::query_scalar(
        "INSERT INTO campaigns (subject, kind, normalised, signature, sample, rule_name, swept_at)
         VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, now())
         ON CONFLICT (subject) DO UPDATE SET last_seen_at = now(),
             version = campaigns.version + 1, swept_at = now()
         RETURNING id",
    )
    .bind(subject)
    .bind(kind)
    .bind(normalised)
    .bind(signature)
    .bind(sample)
    .bind(rule_name)
    .fetch_one(&mut *conn)
    .await?;
    Ok((id, true))
}

/// An invite the sweep held.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Swept {
    pub id: Uuid,
    pub app_id: i64,
    pub sender_id: String,
}

/// The senders with invites of `subject` in the outbox, for the sweep to lock first
/// ([`QUEUED_SENDERS`]).
pub async fn queued_senders(
    conn: &mut PgConnection,
    subject: &str,
) -> Result<Vec<crate::sender_key::SenderKey>, sqlx::Error> {
    let rows: Vec<(i64, String)> = sqlx::query_as(QUEUED_SENDERS)
        .bind(subject)
        .bind(super::bucket(subject))
        .fetch_all(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(app, id)| crate::sender_key::SenderKey::new(app, id.as_str()))
        .collect())
}

/// The outbox's rows carry the buckets of their invites' campaign subjects
/// ([`super::bucket`]), so the sweep reads the few invites of the campaign that wait or are
/// being sent, not all it ever had: the rows of the subject's bucket, whose invites' subjects
/// are checked. They are checked with `= ANY`, which the index of `invites` cannot serve: with
/// `@>`, a cached plan was seen to read every invite of the campaign through it. `$1` is the
/// subject, `$2` its bucket.
pub const QUEUED_SENDERS: &str = "SELECT DISTINCT i.app_id, i.sender_id FROM outbox o
     JOIN invites i ON i.id = o.invite_id AND i.created_at = o.created_at
     WHERE o.campaign_buckets @> ARRAY[$2::int] AND $1 = ANY(i.campaign_keys)";

/// Holds every invite of `subject` waiting in the outbox whose sender is not trusted and that
/// no outbox is sending (a claimed one may be on the wire already), counting each in its
/// sender's held invites ([`SWEEP`]). The caller flags their senders.
pub async fn sweep(
    conn: &mut PgConnection,
    subject: &str,
    campaign_id: i64,
) -> Result<Vec<Swept>, sqlx::Error> {
    sqlx::query_as(SWEEP)
        .bind(subject)
        .bind(campaign_id)
        .bind(super::bucket(subject))
        .fetch_all(conn)
        .await
}

/// The sweep of campaign `$2`, whose subject is `$1` and its bucket `$3`, found as
/// [`QUEUED_SENDERS`] finds them. An invite a moderator released goes back to the outbox
/// without buckets, so no sweep holds it again.
pub const SWEEP: &str = "WITH waiting AS (
         SELECT o.invite_id FROM outbox o
         JOIN invites i ON i.id = o.invite_id AND i.created_at = o.created_at
         WHERE o.campaign_buckets @> ARRAY[$3::int] AND $1 = ANY(i.campaign_keys)
             AND i.status = 'queued'
             AND (o.claimed_by IS NULL OR o.next_attempt_at < now())
             AND NOT EXISTS (SELECT 1 FROM senders s WHERE s.app_id = i.app_id
                 AND s.id = i.sender_id AND s.state = 'trusted')
         FOR UPDATE OF o SKIP LOCKED),
     taken AS (
         DELETE FROM outbox o USING waiting w WHERE o.invite_id = w.invite_id
         RETURNING o.invite_id, o.created_at),
     swept AS (
         UPDATE invites i SET status = 'held',
             decision = i.decision || jsonb_build_object('swept', $2::bigint)
         FROM taken t WHERE i.id = t.invite_id AND i.created_at = t.created_at
         RETURNING i.id, i.app_id, i.sender_id),
     counted AS (
         UPDATE senders s SET held_stored = s.held_stored + n.held
         FROM (SELECT app_id, sender_id, count(*) AS held FROM swept
               GROUP BY app_id, sender_id) n
         WHERE s.app_id = n.app_id AND s.id = n.sender_id)
     SELECT id, app_id, sender_id FROM swept";

/// The apps with senders flagged in the campaign that were not told of it yet, now marked
/// told; with each, its flagged senders.
pub async fn untold_apps(
    conn: &mut PgConnection,
    campaign_id: i64,
) -> Result<Vec<(i64, Vec<String>)>, sqlx::Error> {
    sqlx::query_as(
        "WITH told AS (
             INSERT INTO campaign_notices (campaign_id, app_id)
             SELECT DISTINCT $1::bigint, app_id FROM flags WHERE campaign_id = $1
             ON CONFLICT DO NOTHING
             RETURNING app_id)
         SELECT t.app_id, array_agg(DISTINCT f.sender_id ORDER BY f.sender_id)
         FROM told t JOIN flags f ON f.app_id = t.app_id AND f.campaign_id = $1
         GROUP BY t.app_id",
    )
    .bind(campaign_id)
    .fetch_all(conn)
    .await
}

const SELECT_CAMPAIGNS: &str = "SELECT c.id, c.subject, c.kind, c.normalised, c.sample,
         c.rule_name, c.detected_at, c.last_seen_at, c.benign_at, c.decision, c.decided_by,
         c.version,
         COALESCE(n.senders, 0) AS senders, COALESCE(n.held, 0) AS held,
         COALESCE(n.delivered, 0) AS delivered, n.first_seen_at
     FROM campaigns c
     LEFT JOIN LATERAL (
         SELECT count(DISTINCT (i.app_id, i.sender_id)) AS senders,
             count(*) FILTER (WHERE i.status = 'held') AS held,
             count(*) FILTER (WHERE i.status = 'sent') AS delivered,
             min(i.created_at) AS first_seen_at
         FROM invites i WHERE i.campaign_keys @> ARRAY[c.subject]) n ON true";

/// `limit` campaigns after skipping `offset`, most recently seen first.
pub async fn list(pool: &PgPool, limit: i64, offset: i64) -> Result<Vec<Campaign>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{SELECT_CAMPAIGNS} ORDER BY c.last_seen_at DESC, c.id DESC LIMIT $1 OFFSET $2"
    ))
    .bind(limit)
    .bind(offset)
    .fetch_all(pool)
    .await
}

pub async fn find(pool: &PgPool, id: i64) -> Result<Option<Campaign>, sqlx::Error> {
    sqlx::query_as(&format!("{SELECT_CAMPAIGNS} WHERE c.id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// One sender of a campaign, as its page lists them.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CampaignSender {
    pub app_id: i64,
    pub app: String,
    pub sender_id: String,
    pub state: String,
    pub version: i64,
    /// When the app says the account was made, else when sendguard first saw it.
    pub since: DateTime<Utc>,
    pub held: i64,
    pub invites: i64,
}

/// The senders of a campaign's invites (at most `limit`), the most active first.
pub async fn senders(
    pool: &PgPool,
    subject: &str,
    limit: i64,
) -> Result<Vec<CampaignSender>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.app_id, a.name AS app, s.id AS sender_id, s.state, s.version,
             COALESCE(s.created_in_app_at, s.first_seen_at) AS since,
             n.held, n.invites
         FROM (SELECT app_id, sender_id, count(*) AS invites,
                   count(*) FILTER (WHERE status = 'held') AS held
               FROM invites WHERE campaign_keys @> ARRAY[$1::text]
               GROUP BY app_id, sender_id) n
         JOIN senders s ON s.app_id = n.app_id AND s.id = n.sender_id
         JOIN apps a ON a.id = s.app_id
         ORDER BY n.invites DESC, s.app_id, s.id LIMIT $2",
    )
    .bind(subject)
    .bind(limit)
    .fetch_all(pool)
    .await
}
