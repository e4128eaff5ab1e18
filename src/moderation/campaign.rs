//! Decisions on a whole campaign (docs/DESIGN.md §3d): the ban of every sender at once, or a
//! benign mark that releases its held invites and stops it counting. Each carries the version
//! of the campaign its reviewer saw, and is refused when the campaign changed since (a sender
//! joined it, another reviewer decided).

use serde_json::json;
use sqlx::PgPool;

use super::review::{self, Review, ReviewAction, ReviewError};
use super::terms::Ladder;
use crate::audit::{self, Entry};
use crate::campaigns::CHANGED;
use crate::limiter::{KeyPrefix, Limiter};
use crate::rules::RuleCache;
use crate::sender_key::SenderKey;

/// A decision on one campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum CampaignAction {
    /// Confirm the ban of every sender not trusted: their held invites are discarded.
    BanAll,
    /// Release the held invites; the text or domain never counts again.
    MarkBenign,
    /// Count the text or domain again.
    UndoBenign,
}

impl CampaignAction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Debug, Clone)]
pub struct CampaignReview<'a> {
    pub campaign_id: i64,
    pub action: CampaignAction,
    pub seen_version: i64,
    pub actor: &'a str,
    pub admin_id: Option<i64>,
    pub note: Option<&'a str>,
    /// How long released invites wait before they are sent (`SENDGUARD_SETTLE_SECS`).
    pub release_after: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error("no campaign {0}")]
    NotFound(i64),
    #[error("this campaign changed since you loaded the page; reload and decide again")]
    Stale,
    #[error(transparent)]
    Review(#[from] ReviewError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// What a campaign decision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CampaignDecided {
    pub senders: u64,
    pub invites: u64,
}

/// Applies a decision on a campaign, audited once for the campaign (and, for a ban, once for
/// each sender, as a review of that sender).
pub async fn decide(
    pool: &PgPool,
    limiter: &Limiter,
    keys: &KeyPrefix,
    rules: &RuleCache,
    ladder: &Ladder,
    review: &CampaignReview<'_>,
) -> Result<CampaignDecided, CampaignError> {
    let mut tx = pool.begin().await?;
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT subject, version FROM campaigns WHERE id = $1 FOR UPDATE")
            .bind(review.campaign_id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((subject, version)) = row else {
        return Err(CampaignError::NotFound(review.campaign_id));
    };
    if version != review.seen_version {
        return Err(CampaignError::Stale);
    }
    let decided = match review.action {
        CampaignAction::MarkBenign => release(&mut tx, &subject, review).await?,
        CampaignAction::UndoBenign => CampaignDecided::default(),
        CampaignAction::BanAll => CampaignDecided::default(),
    };
    let (benign, decision) = match review.action {
        CampaignAction::MarkBenign => (true, Some("benign")),
        CampaignAction::UndoBenign => (false, None),
        CampaignAction::BanAll => (false, Some("banned")),
    };
    sqlx::query(
        "UPDATE campaigns SET version = version + 1, decision = $2, decided_by = $3,
             decided_at = now(), note = $4,
             benign_at = CASE WHEN $5 THEN COALESCE(benign_at, now()) END
         WHERE id = $1",
    )
    .bind(review.campaign_id)
    .bind(decision)
    .bind(review.actor)
    .bind(review.note)
    .bind(benign)
    .execute(&mut *tx)
    .await?;
    // Every instance reloads what never counts.
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(CHANGED)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    let decided = match review.action {
        CampaignAction::BanAll => {
            ban_all(pool, limiter, keys, rules, ladder, &subject, review).await?
        }
        _ => decided,
    };
    audit::write(
        pool,
        Entry {
            admin_id: review.admin_id,
            detail: json!({
                "campaign": review.campaign_id,
                "subject": subject,
                "senders": decided.senders,
                "invites": decided.invites,
            }),
            note: review.note,
            ..Entry::new(review.actor, review.action.as_str())
        },
    )
    .await?;
    Ok(decided)
}

/// Releases the campaign's held invites to the queue (they were counted when they came in) and
/// closes its flags: a benign campaign leaves nothing to review. Only the invites of senders
/// free to send go: a sender shadow-banned or banned is so on its own account, and its invites
/// wait for its own review. Those senders are locked first, in the writer's order, so that a
/// ban committed meanwhile is seen.
async fn release(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    subject: &str,
    review: &CampaignReview<'_>,
) -> Result<CampaignDecided, sqlx::Error> {
    let (senders, invites): (i64, i64) = sqlx::query_as(
        "WITH free AS (
             SELECT s.app_id, s.id FROM senders s
             WHERE (s.app_id, s.id) IN (SELECT app_id, sender_id FROM invites
                                        WHERE campaign_keys @> ARRAY[$1::text]
                                            AND status = 'held')
                 AND s.state IN ('active', 'trusted')
                 -- A shadow ban on its way (its follow-up not done yet) counts as done, as the
                 -- writer counts it.
                 AND NOT EXISTS (SELECT 1 FROM pending_flags p
                     WHERE p.app_id = s.app_id AND p.sender_id = s.id
                         AND p.breach ->> 'action' = 'shadow_ban')
             ORDER BY s.app_id, s.id COLLATE \"C\" FOR UPDATE),
         released AS (
             UPDATE invites i SET status = 'queued',
                 decision = i.decision || jsonb_build_object('decided',
                     jsonb_build_object('status', 'queued', 'by', $2::text, 'at', now()))
             FROM free f
             WHERE i.app_id = f.app_id AND i.sender_id = f.id
                 AND i.campaign_keys @> ARRAY[$1::text] AND i.status = 'held'
             RETURNING i.id, i.created_at, i.app_id, i.sender_id),
         queued AS (
             INSERT INTO outbox (invite_id, created_at, next_attempt_at)
             SELECT id, created_at, now() + make_interval(secs => $3) FROM released),
         counted AS (
             UPDATE senders s SET held_stored = GREATEST(s.held_stored - n.held, 0)
             FROM (SELECT app_id, sender_id, count(*) AS held FROM released
                   GROUP BY app_id, sender_id) n
             WHERE s.app_id = n.app_id AND s.id = n.sender_id)
         SELECT count(DISTINCT (app_id, sender_id)), count(*) FROM released",
    )
    .bind(subject)
    .bind(review.actor)
    .bind(review.release_after.as_secs_f64())
    .fetch_one(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE flags SET closed_at = now()
         WHERE campaign_id = $1 AND closed_at IS NULL",
    )
    .bind(review.campaign_id)
    .execute(&mut **tx)
    .await?;
    Ok(CampaignDecided {
        senders: senders as u64,
        invites: invites as u64,
    })
}

/// Confirms the ban of each sender of the campaign that is not trusted or banned already, as
/// a review of that sender (its held invites discarded, its app told), each for the ladder's
/// term by its own strikes.
async fn ban_all(
    pool: &PgPool,
    limiter: &Limiter,
    keys: &KeyPrefix,
    rules: &RuleCache,
    ladder: &Ladder,
    subject: &str,
    review: &CampaignReview<'_>,
) -> Result<CampaignDecided, CampaignError> {
    let senders: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT s.app_id, s.id, s.version FROM senders s
         WHERE (s.app_id, s.id) IN (SELECT app_id, sender_id FROM invites
                                    WHERE campaign_keys @> ARRAY[$1::text])
             AND s.state NOT IN ('trusted', 'banned')
         ORDER BY s.app_id, s.id",
    )
    .bind(subject)
    .fetch_all(pool)
    .await?;
    let mut decided = CampaignDecided::default();
    for (app_id, id, version) in senders {
        let sender = SenderKey::new(app_id, id.as_str());
        let done = review::apply(
            pool,
            limiter,
            keys,
            rules,
            ladder,
            &Review {
                sender: &sender,
                action: ReviewAction::ConfirmBan,
                seen_version: version,
                // The campaign's page counts no sender's held invites, and a sender still
                // sending adds to them without a new version: its ban discards what it holds.
                seen_held: None,
                actor: review.actor,
                admin_id: review.admin_id,
                note: review.note,
                release_after: std::time::Duration::ZERO,
                term: None,
                mistake: false,
            },
        )
        .await;
        match done {
            Ok(reviewed) => {
                decided.senders += 1;
                decided.invites += reviewed.invites_changed;
            }
            // A sender that changed meanwhile is left for its own review.
            Err(ReviewError::Stale { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(decided)
}
