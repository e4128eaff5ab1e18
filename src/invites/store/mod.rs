//! The invite's SQL: writing them (queued and held ones in one statement, [`insert`]; one
//! with the flag of a breach in a few statements of the batch's transaction; see
//! [`super::writer`]), and the reads and updates of the deferred re-check. Every write checks
//! that the sender is still in the state the verdict was made for: the cached state is a hint,
//! the table decides at commit.
//! A write never fails on an `Idempotency-Key` that is already taken, so one repeated request
//! cannot fail the batch it shares: it is not written, and the caller looks the key up once the
//! batch has committed.

pub mod insert;

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::types::Json;
use sqlx::{Acquire, PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::decision::DecisionRecord;
use super::policy::{Breach, Status};
use super::validate::ValidInvite;
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

/// The verdict of an invite that flags its sender.
pub struct Flagging {
    /// The sender's state the verdict was made for.
    pub assumed: SenderState,
    pub breach: Breach,
    /// The most held invites the sender may have stored.
    pub held_cap: i64,
    /// A repeat offender's shadow ban is confirmed at once.
    pub confirm_repeat: bool,
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

/// The invite insert (`$1`-`$11` as [`bind`] binds them, `$12` its app, `$13` its link) of a
/// flagging invite, in the flag's transaction, after its key is claimed.
const INSERT: &str = "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient,
         recipient_domain, sender_ip, resource, message, sender_name, status, decision,
         next_attempt_at, accept_url)
     VALUES ($1, $2, $12, $3, $4, $5, $6, $7, $8, $9, $10, $11,
         CASE WHEN $10 = 'queued' THEN now() END, $13)";

/// Claims an `Idempotency-Key` (`$1` the API key, `$2` the key) for an invite (`$3`, the
/// body's hash `$4`); answers nothing when it was taken first.
const CLAIM_KEY: &str = "INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash)
     VALUES ($1, $2, $3, $4) ON CONFLICT (api_key_id, key) DO NOTHING RETURNING invite_id";

/// The sender's row in the transaction of a flagging invite (app `$4`, id `$1`), created on
/// first sight with the address group it came from (`$2`), the sender of the same app it is
/// linked to (banned from that address within 30 days) and when the app says the account was
/// made (`$3`); answers its state.
const UPSERT_SENDER: &str = "INSERT INTO senders (app_id, id, first_address, created_in_app_at,
         linked_to)
     VALUES ($4, $1, $2, $3, (SELECT sender_id FROM banned_addresses WHERE app_id = $4
         AND address = $2 AND banned_at > now() - interval '30 days'
         ORDER BY banned_at DESC LIMIT 1))
     ON CONFLICT (app_id, id) DO UPDATE SET last_seen_at = now(),
         created_in_app_at = COALESCE(senders.created_in_app_at, EXCLUDED.created_in_app_at)
     RETURNING state";

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// `$1`-`$11`: the invite row of [`INSERT`].
fn bind<'q>(query: PgQuery<'q>, new: &'q NewInvite) -> PgQuery<'q> {
    let invite = &new.invite;
    query
        .bind(new.id)
        .bind(new.api_key_id)
        .bind(&new.sender.id)
        .bind(&invite.recipient)
        .bind(&invite.recipient_domain)
        .bind(invite.sender_ip.map(|ip| ip.to_string()))
        .bind(&invite.resource)
        .bind(&invite.message)
        .bind(&invite.sender_name)
        .bind(new.status.as_str())
        .bind(Json(&new.decision))
}

/// An invite that flags its sender, in the batch's transaction: the flag, the sender's new
/// state (for a shadow ban), their audit entries and the invite. A repeated
/// `Idempotency-Key` flags nothing.
pub async fn insert_with_flag(
    tx: &mut Transaction<'_, Postgres>,
    new: &NewInvite,
    flagging: &Flagging,
) -> Result<Written, sqlx::Error> {
    if let Some(key) = &new.idempotency_key {
        let taken: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE api_key_id = $1 AND key = $2)",
        )
        .bind(new.api_key_id)
        .bind(key)
        .fetch_one(&mut **tx)
        .await?;
        if taken {
            return Ok(Written::Skipped);
        }
    }
    let stored: String = sqlx::query_scalar(UPSERT_SENDER)
        .bind(&new.sender.id)
        .bind(new.address.as_deref())
        .bind(new.invite.sender_created_at)
        .bind(new.sender.app_id)
        .fetch_one(&mut **tx)
        .await?;
    if stored != flagging.assumed.as_str() {
        return Ok(Written::Skipped);
    }
    if new.idempotency_key.is_none() {
        return flag_and_write(tx, new, flagging).await;
    }
    // The key is claimed after the flag, and a request with the same key still being written
    // elsewhere was invisible to the check above: when the claim finds the key taken, the flag
    // (its audit entry, its webhook event) is undone with the invite, to a savepoint.
    let mut attempt = tx.begin().await?;
    let written = flag_and_write(&mut attempt, new, flagging).await?;
    if written == Written::Skipped {
        attempt.rollback().await?;
    } else {
        attempt.commit().await?;
    }
    Ok(written)
}

/// The flag and the invite of [`insert_with_flag`], its sender locked in the assumed state.
async fn flag_and_write(
    tx: &mut Transaction<'_, Postgres>,
    new: &NewInvite,
    flagging: &Flagging,
) -> Result<Written, sqlx::Error> {
    // The upsert locked the row, so the state it read is the state the flag changes.
    let now = flag(
        tx,
        &new.sender,
        &flagging.breach,
        Some(new.id),
        flagging.confirm_repeat,
    )
    .await?
    .unwrap_or(flagging.assumed);
    if new.status == Status::Held {
        let row = insert::Row {
            new,
            assumed: Assumed::state(now),
            held_cap: Some(flagging.held_cap),
        };
        let rows = insert::insert_batch(tx, &[row], &insert::Claim::none(1)).await?;
        return Ok(insert::outcome(new.id, &rows));
    }
    if let Some(key) = &new.idempotency_key {
        let claimed: Option<Uuid> = sqlx::query_scalar(CLAIM_KEY)
            .bind(new.api_key_id)
            .bind(key)
            .bind(new.id)
            .bind(&new.request_hash[..])
            .fetch_optional(&mut **tx)
            .await?;
        if claimed.is_none() {
            return Ok(Written::Skipped);
        }
    }
    bind(sqlx::query(INSERT), new)
        .bind(new.sender.app_id)
        .bind(new.accept_url.as_deref())
        .execute(&mut **tx)
        .await?;
    Ok(Written::Recorded)
}

/// Flags the sender with its breach in the caller's transaction: a shadow ban changes its
/// state (the new one is returned), a hold does not.
pub async fn flag(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    breach: &Breach,
    invite_id: Option<Uuid>,
    confirm_repeat: bool,
) -> Result<Option<SenderState>, sqlx::Error> {
    let flag = Flag {
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
        moderation::hold(tx, &flag).await.map(|()| None)
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
    sqlx::query_as(
        "SELECT id, app_id, sender_id, recipient, recipient_domain, sender_ip, resource, message,
             sender_name, created_at FROM invites
         WHERE status = 'deferred' ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(limit)
    .fetch_all(&mut **tx)
    .await
}

/// Gives a deferred invite its verdict. A held one takes a slot under its sender's cap, as
/// one written at once does: past it, the invite keeps only what idempotency needs, as
/// `discarded`, and the sender's overflow counts it. The caller holds the sender's row.
pub async fn settle_deferred(
    tx: &mut Transaction<'_, Postgres>,
    invite: &DeferredInvite,
    status: Status,
    decision: &DecisionRecord,
    held_cap: i64,
) -> Result<(), sqlx::Error> {
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
                 resource = NULL, message = NULL, sender_name = NULL, accept_url = NULL,
                 next_attempt_at = NULL
             WHERE id = $1 AND created_at = $2",
        )
        .bind(invite.id)
        .bind(invite.created_at)
        .execute(&mut **tx)
        .await?;
        return Ok(());
    }
    sqlx::query(
        "UPDATE invites SET status = $2, decision = $3,
             next_attempt_at = CASE WHEN $2 = 'queued' THEN now() END
         WHERE id = $1 AND created_at = $4",
    )
    .bind(invite.id)
    .bind(status.as_str())
    .bind(Json(decision))
    .bind(invite.created_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
