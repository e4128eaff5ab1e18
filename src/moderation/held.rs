//! What happens to a sender's held invites apart from a review of the sender: one invite
//! released or discarded, and the undo of a release while its invites still wait for the
//! settle time.

use serde_json::json;
use sqlx::PgPool;

use super::SenderState;
use super::review::{ReviewError, lock_at};
use crate::audit::{self, Entry};
use crate::sender_key::SenderKey;
use crate::webhooks::EventType;

/// Released invites of a sender still waiting for their settle time: how many, and when the
/// first of them leaves. A release can be undone for them ([`undo_release`]).
pub async fn releases_waiting(
    pool: &PgPool,
    sender: &SenderKey,
) -> Result<(i64, Option<chrono::DateTime<chrono::Utc>>), sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT count(*), min(o.next_attempt_at) FROM {RELEASED_WAITING}"
    ))
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_one(pool)
    .await
}

/// A sender's released invites that have not left (`i`) and their places in the outbox (`o`):
/// queued by a reviewer's release, due after now, and claimed by no outbox worker.
const RELEASED_WAITING: &str = "invites i JOIN outbox o
         ON o.invite_id = i.id AND o.created_at = i.created_at
     WHERE i.app_id = $1 AND i.sender_id = $2 AND i.status = 'queued'
         AND i.decision -> 'decided' ->> 'status' = 'queued'
         AND o.next_attempt_at > now() AND o.claimed_by IS NULL";

/// Holds again a sender's released invites that have not left, audited. When the release came
/// with a lift (the sender is `active`, its last change of state was `actor`'s lift, and that
/// lift released invites being held again), the sender is shadow-banned again, as it was; a
/// release that lifted nothing leaves the sender as it is. Answers how many invites were held
/// again.
pub async fn undo_release(
    pool: &PgPool,
    sender: &SenderKey,
    actor: &str,
    admin_id: Option<i64>,
) -> Result<u64, ReviewError> {
    let mut tx = pool.begin().await?;
    // A lift sets `lifted_at`, `state_changed_at` and the `at` of the invites it releases to
    // the same time (its transaction's); any later change of state moves the second, and any
    // other release (one invite, a campaign's) writes another `at`.
    let lifted: Option<bool> = sqlx::query_scalar(&format!(
        "SELECT COALESCE(s.state = $3 AND s.state_changed_by = $4
                 AND s.lifted_at = s.state_changed_at
                 AND EXISTS (SELECT 1 FROM {RELEASED_WAITING}
                     AND (i.decision -> 'decided' ->> 'at')::timestamptz = s.lifted_at), false)
         FROM senders s WHERE s.app_id = $1 AND s.id = $2 FOR UPDATE OF s"
    ))
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(SenderState::Active.as_str())
    .bind(actor)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(lifted) = lifted else {
        return Err(ReviewError::NotFound(sender.id.clone()));
    };
    let held = sqlx::query(&format!(
        "WITH waiting AS (SELECT o.invite_id, o.created_at FROM {RELEASED_WAITING}
                 FOR UPDATE OF o),
             back AS (
                 DELETE FROM outbox o USING waiting w
                 WHERE o.invite_id = w.invite_id RETURNING o.invite_id, o.created_at)
         UPDATE invites SET status = 'held',
             decision = decision || jsonb_build_object('decided',
                 jsonb_build_object('status', 'held', 'by', $3::text, 'at', now(),
                     'undid', 'release'))
         FROM back WHERE id = back.invite_id AND invites.created_at = back.created_at"
    ))
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(actor)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if held == 0 {
        return Ok(0);
    }
    sqlx::query(
        "UPDATE senders SET held_stored = held_stored + $3, version = version + 1,
             state = CASE WHEN $4 THEN 'shadow_banned' ELSE state END,
             state_changed_at = CASE WHEN $4 THEN now() ELSE state_changed_at END,
             state_changed_by = CASE WHEN $4 THEN $5 ELSE state_changed_by END,
             lifted_at = CASE WHEN $4 THEN NULL ELSE lifted_at END
         WHERE app_id = $1 AND id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(held as i64)
    .bind(lifted)
    .bind(actor)
    .execute(&mut *tx)
    .await?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id,
            sender: Some(sender),
            detail: json!({"invites": held, "banned_again": lifted}),
            ..Entry::new(actor, "undo_release")
        },
    )
    .await?;
    if lifted {
        let data = json!({"previous_state": "active", "state": "shadow_banned"});
        super::announce(&mut tx, sender, EventType::SenderShadowBanned, data).await?;
    }
    tx.commit().await?;
    Ok(held)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InviteDecision {
    /// Send it, `after` this long (the settle time, while the release can be undone): back to
    /// the queue, not counted again.
    Release {
        after: std::time::Duration,
    },
    Discard,
}

impl InviteDecision {
    fn status(self) -> &'static str {
        match self {
            InviteDecision::Release { .. } => "queued",
            InviteDecision::Discard => "discarded",
        }
    }

    fn action(self) -> &'static str {
        match self {
            InviteDecision::Release { .. } => "release_invite",
            InviteDecision::Discard => "discard_invite",
        }
    }

    /// Seconds a released invite waits.
    fn wait_secs(self) -> f64 {
        match self {
            InviteDecision::Release { after } => after.as_secs_f64(),
            InviteDecision::Discard => 0.0,
        }
    }
}

/// Releases or discards one held invite of `sender`, audited; the sender's state stays. Decided
/// on the page of the sender at `seen_version`, like a review, so that a release is not made
/// on a page from before a ban; the decision moves the version on in turn, so that a ban
/// decided on a page from before the release is refused. False when the invite is not (any
/// more) held.
pub async fn decide_invite(
    pool: &PgPool,
    sender: &SenderKey,
    seen_version: i64,
    invite_id: uuid::Uuid,
    decision: InviteDecision,
    actor: &str,
    admin_id: Option<i64>,
) -> Result<bool, ReviewError> {
    let mut tx = pool.begin().await?;
    lock_at(&mut tx, sender, seen_version).await?;
    let changed: i64 = sqlx::query_scalar(
        "WITH decided AS (
             UPDATE invites SET status = $3,
                 decision = decision || jsonb_build_object('decided',
                     jsonb_build_object('status', $3, 'by', $5::text, 'at', now()))
             WHERE id = $1 AND app_id = $4 AND sender_id = $2 AND status = 'held'
             RETURNING id, created_at),
         queued AS (
             INSERT INTO outbox (invite_id, created_at, next_attempt_at)
             SELECT id, created_at, now() + make_interval(secs => $6) FROM decided
             WHERE $3 = 'queued')
         SELECT count(*) FROM decided",
    )
    .bind(invite_id)
    .bind(&sender.id)
    .bind(decision.status())
    .bind(sender.app_id)
    .bind(actor)
    .bind(decision.wait_secs())
    .fetch_one(&mut *tx)
    .await?;
    if changed != 1 {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE senders SET held_stored = GREATEST(held_stored - 1, 0), version = version + 1
         WHERE app_id = $1 AND id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .execute(&mut *tx)
    .await?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id,
            sender: Some(sender),
            detail: json!({"invite": invite_id}),
            ..Entry::new(actor, decision.action())
        },
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}
