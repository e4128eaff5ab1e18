//! The invite's SQL: writing one (with the flag of a breach and the held cap), and the reads and
//! updates of the deferred re-check. Every write checks that the sender is still in the state
//! the verdict was made for: the cached state is a hint, the table decides at commit.

use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::policy::{Checked, Status};
use super::validate::ValidInvite;
use crate::moderation::{self, Flag, SenderState};

/// An invite about to be written, with its verdict.
pub struct NewInvite<'a> {
    pub id: Uuid,
    pub api_key_id: i64,
    pub invite: &'a ValidInvite,
    pub status: Status,
    pub decision: &'a Value,
    pub idempotency_key: Option<&'a str>,
    pub request_hash: &'a [u8],
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Recorded,
    /// A held invite beyond the sender's cap: counted with the sender, not stored.
    OverHeldCap,
    /// The sender is no longer in the assumed state; nothing was written.
    StateDiffers,
}

/// The invite insert (`$1`-`$13` as [`bind`] binds them), as a `SELECT` so a guard can follow.
macro_rules! insert_invite {
    () => {
        "INSERT INTO invites (id, api_key_id, sender_id, recipient, recipient_domain,
             sender_ip, resource, message, sender_name, status, decision, next_attempt_at,
             idempotency_key, request_hash)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
             CASE WHEN $10 = 'queued' THEN now() END, $12, $13"
    };
}

const INSERT: &str = insert_invite!();

/// The sender upsert (`$3` is its id) and the insert, guarded by the assumed state (`$14`).
const INSERT_GUARDED: &str = concat!(
    "WITH sender AS (INSERT INTO senders (id) VALUES ($3)
         ON CONFLICT (id) DO UPDATE SET last_seen_at = now() RETURNING state) ",
    insert_invite!(),
    " FROM sender WHERE sender.state = $14"
);

/// The sender's row, created on first sight; its state as stored.
const UPSERT_SENDER: &str = "INSERT INTO senders (id) VALUES ($1)
     ON CONFLICT (id) DO UPDATE SET last_seen_at = now() RETURNING state";

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

fn bind<'q>(query: PgQuery<'q>, new: &'q NewInvite<'_>) -> PgQuery<'q> {
    let invite = new.invite;
    query
        .bind(new.id)
        .bind(new.api_key_id)
        .bind(&invite.sender_id)
        .bind(&invite.recipient)
        .bind(&invite.recipient_domain)
        .bind(invite.sender_ip.map(|ip| ip.to_string()))
        .bind(&invite.resource)
        .bind(&invite.message)
        .bind(&invite.sender_name)
        .bind(new.status.as_str())
        .bind(new.decision)
        .bind(new.idempotency_key)
        .bind(new.request_hash)
}

/// The common case, an invite with no breach and no held slot to take: one statement (the
/// sender upsert in a CTE, then the insert), one round trip.
pub async fn insert(
    pool: &PgPool,
    new: &NewInvite<'_>,
    assumed: SenderState,
) -> Result<Written, sqlx::Error> {
    let done = bind(sqlx::query(INSERT_GUARDED), new)
        .bind(assumed.as_str())
        .execute(pool)
        .await?;
    Ok(if done.rows_affected() == 0 {
        Written::StateDiffers
    } else {
        Written::Recorded
    })
}

/// An invite that flags its sender or takes a held slot: one transaction with the flag, the
/// sender's new state and its audit entry.
pub async fn insert_with_flag(
    pool: &PgPool,
    new: &NewInvite<'_>,
    assumed: SenderState,
    breach: Option<&Checked>,
    held_cap: i64,
) -> Result<Written, sqlx::Error> {
    let sender_id = &new.invite.sender_id;
    let mut tx = pool.begin().await?;
    let stored: String = sqlx::query_scalar(UPSERT_SENDER)
        .bind(sender_id)
        .fetch_one(&mut *tx)
        .await?;
    if stored != assumed.as_str() {
        return Ok(Written::StateDiffers);
    }
    if let Some(breach) = breach {
        flag(&mut tx, sender_id, breach).await?;
    }
    if new.status == Status::Held && !take_held_slot(&mut tx, sender_id, held_cap).await? {
        tx.commit().await?;
        return Ok(Written::OverHeldCap);
    }
    bind(sqlx::query(INSERT), new).execute(&mut *tx).await?;
    tx.commit().await?;
    Ok(Written::Recorded)
}

/// Flags the sender with the shadow-ban rule it broke, in the caller's transaction.
pub async fn flag(
    tx: &mut Transaction<'_, Postgres>,
    sender_id: &str,
    breach: &Checked,
) -> Result<(), sqlx::Error> {
    let flag = Flag {
        sender_id,
        rule_id: breach.rule.id,
        rule_name: &breach.rule.name,
        observed: breach.decision.count as i64,
        limit: breach.rule.quota.limit as i64,
        window_secs: (breach.rule.quota.window_ms / 1000) as i64,
    };
    moderation::shadow_ban(tx, &flag).await.map(drop)
}

/// Counts a held invite against the sender's cap; false when the cap is full.
async fn take_held_slot(
    tx: &mut Transaction<'_, Postgres>,
    sender_id: &str,
    held_cap: i64,
) -> Result<bool, sqlx::Error> {
    let took = sqlx::query(
        "UPDATE senders SET held_stored = held_stored + 1 WHERE id = $1 AND held_stored < $2",
    )
    .bind(sender_id)
    .bind(held_cap)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if !took {
        sqlx::query("UPDATE senders SET held_overflow = held_overflow + 1 WHERE id = $1")
            .bind(sender_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(took)
}

/// An invite recorded while Redis could not be asked.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeferredInvite {
    pub id: Uuid,
    pub sender_id: String,
    pub recipient: String,
    pub recipient_domain: String,
    pub sender_ip: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// Up to `limit` deferred invites, oldest first, locked for the caller's transaction.
pub async fn claim_deferred(
    tx: &mut Transaction<'_, Postgres>,
    limit: i64,
) -> Result<Vec<DeferredInvite>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, sender_id, recipient, recipient_domain, sender_ip, created_at FROM invites
         WHERE status = 'deferred' ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut **tx)
    .await
}

/// Gives a deferred invite its verdict; a held one counts against the sender's stored held.
pub async fn settle_deferred(
    tx: &mut Transaction<'_, Postgres>,
    invite: &DeferredInvite,
    status: Status,
    decision: &Value,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE invites SET status = $2, decision = $3,
             next_attempt_at = CASE WHEN $2 = 'queued' THEN now() END
         WHERE id = $1",
    )
    .bind(invite.id)
    .bind(status.as_str())
    .bind(decision)
    .execute(&mut **tx)
    .await?;
    if status == Status::Held {
        sqlx::query("UPDATE senders SET held_stored = held_stored + 1 WHERE id = $1")
            .bind(&invite.sender_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
