//! The invite's SQL: writing them (in one statement, [`insert`]; see [`super::writer`]), the
//! flag of a breach (done by a follow-up, [`super::follow_up`]), and the reads and updates of
//! the deferred re-check. Every write checks
//! that the sender is still in the state the verdict was made for: the cached state is a hint,
//! the table decides at commit.
//! A write never fails on an `Idempotency-Key` that is already taken, so one repeated request
//! cannot fail the batch it shares: it is not written, and the caller looks the key up once the
//! batch has committed.

pub mod insert;

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::decision::DecisionRecord;
use super::policy::{Breach, DEFERRED_REASON, Status};
use super::validate::ValidInvite;
use crate::moderation::terms::Ladder;
use crate::moderation::{self, Flag, SenderState, Standing};
use crate::rules::Action;
use crate::sender_key::SenderKey;

/// An invite about to be written, with its verdict.
pub struct NewInvite {
    pub id: Uuid,
    pub api_key_id: i64,
    pub sender: SenderKey,
    pub invite: Arc<ValidInvite>,
    /// The link the email will carry, if any.
    pub accept_url: Option<String>,
    /// The sender's address group (IPv6 by /64), when the app named its address.
    pub address: Option<String>,
    pub status: Status,
    pub decision: DecisionRecord,
    pub idempotency_key: Option<String>,
    pub request_hash: Arc<[u8]>,
    /// The campaign subjects its text counted under (`fingerprint:…`, `link_domain:…`).
    pub campaign_keys: Vec<String>,
    /// How long a queued invite waits before the outbox may send it (`SENDGUARD_SETTLE_SECS`;
    /// zero for a trusted sender).
    pub settle: std::time::Duration,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Recorded,
    /// A held invite beyond the sender's cap: counted with the sender, not stored.
    OverHeldCap,
    /// Nothing was written: the sender is no longer in the assumed state, or the invite's
    /// `Idempotency-Key` was taken first.
    Skipped,
}

/// The state a queued invite's verdict assumed of its sender.
#[derive(Debug, Clone, Copy)]
pub struct Assumed {
    pub state: SenderState,
    pub version: i64,
    /// The counters let it through every rule: it is also written when the only change since
    /// its sender was read is a ban by a rule counting invites (a later invite of its own
    /// burst, counted after it, committed first). A ban by a person, or for bounces or
    /// complaints, still holds it.
    pub admitted: bool,
}

impl Assumed {
    /// Only the state: a held invite is written when its sender is still in it.
    pub fn state(state: SenderState) -> Assumed {
        Assumed {
            state,
            version: 0,
            admitted: false,
        }
    }

    pub fn new(standing: &Standing, admitted: bool) -> Assumed {
        Assumed {
            state: standing.state,
            version: standing.version,
            admitted,
        }
    }
}

/// Locks the rows of these senders (those that exist) in key order, bytewise as the batch
/// statement orders them, so that two transactions locking senders never wait on each other
/// in a circle; answers their states as locked.
pub async fn lock_senders(
    conn: &mut PgConnection,
    senders: impl IntoIterator<Item = &SenderKey>,
) -> Result<HashMap<SenderKey, SenderState>, sqlx::Error> {
    let mut senders: Vec<&SenderKey> = senders.into_iter().collect();
    senders.sort();
    senders.dedup();
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT s.app_id, s.id, s.state
         FROM unnest($1::int8[], $2::text[]) WITH ORDINALITY AS k(app_id, id, n),
             LATERAL (SELECT app_id, id, state FROM senders WHERE app_id = k.app_id AND id = k.id
                      FOR UPDATE) s
         ORDER BY k.n",
    )
    .bind(senders.iter().map(|s| s.app_id).collect::<Vec<_>>())
    .bind(senders.iter().map(|s| s.id.as_str()).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(app_id, id, state)| {
            Some((SenderKey::new(app_id, id.as_str()), state.parse().ok()?))
        })
        .collect())
}

/// Flags the sender with its breach in the caller's transaction: a shadow ban changes its
/// state (the new one is returned), a hold does not. `stored`: the invite was kept, not
/// discarded past the held cap (only a kept one is announced).
pub async fn flag(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    breach: &Breach,
    invite_id: Option<Uuid>,
    campaign_id: Option<i64>,
    confirm_repeat: Option<&Ladder>,
    stored: bool,
) -> Result<Option<SenderState>, sqlx::Error> {
    let flag = Flag {
        campaign_id,
        sender,
        rule_id: breach.rule_id,
        rule_name: &breach.rule_name,
        signal: breach.signal.as_str(),
        observed: breach.observed as i64,
        limit: breach.limit as i64,
        window_secs: breach.window_secs as i64,
        invite_id,
    };
    if breach.action == Action::ShadowBan {
        moderation::shadow_ban(tx, &flag, confirm_repeat).await
    } else {
        moderation::hold(tx, &flag, stored).await.map(|()| None)
    }
}

/// An invite recorded while Redis could not be asked.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeferredInvite {
    pub id: Uuid,
    pub app_id: i64,
    pub sender_id: String,
    pub recipient: String,
    pub recipient_domain: String,
    pub sender_ip: Option<String>,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// Up to `limit` deferred invites, oldest first, locked for the caller's transaction.
pub async fn claim_deferred(
    tx: &mut Transaction<'_, Postgres>,
    limit: i64,
) -> Result<Vec<DeferredInvite>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT id, app_id, sender_id, recipient, recipient_domain, sender_ip, resource, message,
             sender_name, created_at FROM invites
         WHERE decision ->> 'reason' = '{DEFERRED_REASON}' AND status = 'deferred'
         ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED"
    ))
    .bind(limit)
    .fetch_all(&mut **tx)
    .await
}

/// Gives a deferred invite its verdict. A held one takes a slot under its sender's cap, as
/// one written at once does: past it, the invite keeps only what idempotency needs, as
/// `discarded`, and the sender's overflow counts it. The caller holds the sender's row.
/// Answers whether the invite was kept (not discarded past the cap).
pub async fn settle_deferred(
    tx: &mut Transaction<'_, Postgres>,
    invite: &DeferredInvite,
    status: Status,
    decision: &DecisionRecord,
    campaign_keys: &[String],
    held_cap: i64,
) -> Result<bool, sqlx::Error> {
    let mut over_cap = false;
    if status == Status::Held {
        let stored: Option<i64> =
            sqlx::query_scalar("SELECT held_stored FROM senders WHERE app_id = $1 AND id = $2")
                .bind(invite.app_id)
                .bind(&invite.sender_id)
                .fetch_optional(&mut **tx)
                .await?;
        over_cap = stored.is_some_and(|stored| stored >= held_cap);
        sqlx::query(
            "UPDATE senders SET held_stored = held_stored + (NOT $3)::int,
                 held_overflow = held_overflow + $3::int
             WHERE app_id = $1 AND id = $2",
        )
        .bind(invite.app_id)
        .bind(&invite.sender_id)
        .bind(over_cap)
        .execute(&mut **tx)
        .await?;
    }
    if over_cap {
        sqlx::query(
            "UPDATE invites SET status = 'discarded', decision = '{\"reason\": \"held_cap\"}',
                 resource = NULL, message = NULL, sender_name = NULL, accept_url = NULL
             WHERE id = $1 AND created_at = $2",
        )
        .bind(invite.id)
        .bind(invite.created_at)
        .execute(&mut **tx)
        .await?;
        return Ok(false);
    }
    sqlx::query(
        "WITH settled AS (
             UPDATE invites SET status = $2, decision = $3,
                 campaign_keys = NULLIF($5::text[], '{}')
             WHERE id = $1 AND created_at = $4
             RETURNING id, created_at)
         INSERT INTO outbox (invite_id, created_at, next_attempt_at, campaign_buckets)
         SELECT id, created_at, now(), NULLIF($6::int[], '{}') FROM settled
         WHERE $2 = 'queued'",
    )
    .bind(invite.id)
    .bind(status.as_str())
    .bind(Json(decision))
    .bind(invite.created_at)
    .bind(campaign_keys)
    .bind(
        campaign_keys
            .iter()
            .map(|key| crate::campaigns::bucket(key))
            .collect::<Vec<_>>(),
    )
    .execute(&mut **tx)
    .await?;
    Ok(true)
}
