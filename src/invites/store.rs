//! The invite's SQL: writing one (with the flag of a breach and the held cap), and the reads and
//! updates of the deferred re-check. Every write checks that the sender is still in the state
//! the verdict was made for: the cached state is a hint, the table decides at commit.

use serde_json::Value;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::policy::{Breach, Status};
use super::validate::ValidInvite;
use crate::moderation::{self, Flag, SenderState, Standing};
use crate::rules::Action;
use crate::sender::SenderKey;

/// An invite about to be written, with its verdict.
pub struct NewInvite<'a> {
    pub id: Uuid,
    pub api_key_id: i64,
    pub sender: &'a SenderKey,
    pub invite: &'a ValidInvite,
    /// The link the email will carry, if any.
    pub accept_url: Option<&'a str>,
    /// The sender's address group (IPv6 by /64), when the app named its address.
    pub address: Option<String>,
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

/// The invite insert (`$1`-`$13` as [`bind`] binds them, `$app` its app, `$link` its link), as
/// a `SELECT` so a guard can follow.
macro_rules! insert_invite {
    ($app:literal, $link:literal) => {
        concat!(
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 sender_ip, resource, message, sender_name, status, decision, next_attempt_at,
                 idempotency_key, request_hash, accept_url)
             SELECT $1, $2, ",
            $app,
            ", $3, $4, $5, $6, $7, $8, $9, $10, $11,
                 CASE WHEN $10 = 'queued' THEN now() END, $12, $13, ",
            $link
        )
    };
}

/// The sender's row (app `$app`, id `$id`), created on first sight with the address group it
/// came from (`$a`), the sender of the same app it is linked to (banned from that address
/// within 30 days) and when the app says the account was made (`$c`); answers its state,
/// version and who changed it last.
macro_rules! upsert_sender {
    ($app:literal, $id:literal, $a:literal, $c:literal) => {
        concat!(
            "INSERT INTO senders (app_id, id, first_address, created_in_app_at, linked_to)
             VALUES (",
            $app,
            ", ",
            $id,
            ", ",
            $a,
            ", ",
            $c,
            ", (SELECT sender_id FROM banned_addresses WHERE app_id = ",
            $app,
            " AND address = ",
            $a,
            " AND banned_at > now() - interval '30 days' ORDER BY banned_at DESC LIMIT 1))
             ON CONFLICT (app_id, id) DO UPDATE SET last_seen_at = now(),
                 created_in_app_at = COALESCE(senders.created_in_app_at,
                     EXCLUDED.created_in_app_at)
             RETURNING state, version, state_changed_by"
        )
    };
}

const INSERT: &str = insert_invite!("$14", "$15");

/// The sender upsert (`$19` its app, `$3` its id, `$17` its address, `$18` its creation) and the
/// insert (`$20` its link), guarded by the assumed state (`$14`). An invite the counters admitted (`$15`) is also
/// written when the only change since its sender was read (at version `$16`) is a ban by a
/// rule: a later invite of its own burst, counted after it, committed first. A ban by a person
/// still holds it.
const INSERT_GUARDED: &str = concat!(
    "WITH sender AS (",
    upsert_sender!("$19", "$3", "$17", "$18"),
    ") ",
    insert_invite!("$19", "$20"),
    " FROM sender WHERE sender.state = $14
         OR ($15 AND sender.state IN ('shadow_banned', 'banned')
             AND sender.state_changed_by = 'system' AND sender.version = $16 + 1)"
);

/// The sender's row in the transaction of a flagging invite.
const UPSERT_SENDER: &str = upsert_sender!("$4", "$1", "$2", "$3");

/// A held invite in one statement: a slot under the sender's cap (`$10`) is taken and the
/// invite stored whole; past the cap only what idempotency needs is kept, as `discarded`. The
/// sender must be in the assumed state (`$11`). `$1`-`$9`, `$12`-`$14` as in [`INSERT`], `$15`
/// the app, `$16` the link.
const INSERT_HELD: &str = "WITH cur AS (
         SELECT held_stored < $10 AS room FROM senders
         WHERE app_id = $15 AND id = $3 AND state = $11 FOR UPDATE),
     slot AS (
         UPDATE senders SET last_seen_at = now(),
             held_stored = held_stored + (SELECT room::int FROM cur),
             held_overflow = held_overflow + (SELECT (NOT room)::int FROM cur)
         WHERE app_id = $15 AND id = $3 AND EXISTS (SELECT 1 FROM cur) RETURNING 1)
     INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
         sender_ip, resource, message, sender_name, status, decision, idempotency_key,
         request_hash, accept_url)
     SELECT $1, $2, $15, $3, $4, $5, $6,
         CASE WHEN cur.room THEN $7 END, CASE WHEN cur.room THEN $8 END,
         CASE WHEN cur.room THEN $9 END,
         CASE WHEN cur.room THEN 'held' ELSE 'discarded' END,
         CASE WHEN cur.room THEN $12 ELSE '{\"reason\": \"held_cap\"}'::jsonb END, $13, $14,
         CASE WHEN cur.room THEN $16 END
     FROM cur, slot
     RETURNING status";

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// `$1`-`$6`: what every invite row keeps.
fn bind_who<'q>(query: PgQuery<'q>, new: &'q NewInvite<'_>) -> PgQuery<'q> {
    let invite = new.invite;
    query
        .bind(new.id)
        .bind(new.api_key_id)
        .bind(&new.sender.id)
        .bind(&invite.recipient)
        .bind(&invite.recipient_domain)
        .bind(invite.sender_ip.map(|ip| ip.to_string()))
}

/// `$7`-`$9`: the sender's words.
fn bind_text<'q>(query: PgQuery<'q>, new: &'q NewInvite<'_>) -> PgQuery<'q> {
    let invite = new.invite;
    query
        .bind(&invite.resource)
        .bind(&invite.message)
        .bind(&invite.sender_name)
}

fn bind<'q>(query: PgQuery<'q>, new: &'q NewInvite<'_>) -> PgQuery<'q> {
    bind_text(bind_who(query, new), new)
        .bind(new.status.as_str())
        .bind(new.decision)
        .bind(new.idempotency_key)
        .bind(new.request_hash)
}

/// The common case, an invite with no breach and nothing to hold: one statement (the sender
/// upsert in a CTE, then the insert), one round trip. `admitted`: the counters let it through
/// every rule.
pub async fn insert(
    pool: &PgPool,
    new: &NewInvite<'_>,
    assumed: &Standing,
    admitted: bool,
) -> Result<Written, sqlx::Error> {
    let done = bind(sqlx::query(INSERT_GUARDED), new)
        .bind(assumed.state.as_str())
        .bind(admitted)
        .bind(assumed.version)
        .bind(new.address.as_deref())
        .bind(new.invite.sender_created_at)
        .bind(new.sender.app_id)
        .bind(new.accept_url)
        .execute(pool)
        .await?;
    Ok(if done.rows_affected() == 0 {
        Written::StateDiffers
    } else {
        Written::Recorded
    })
}

/// A held invite of a sender in `assumed` state (with no new flag): one statement, like a
/// queued one, so holding costs no more time than sending.
pub async fn insert_held<'e>(
    db: impl sqlx::PgExecutor<'e>,
    new: &NewInvite<'_>,
    assumed: SenderState,
    held_cap: i64,
) -> Result<Written, sqlx::Error> {
    let status: Option<String> = bind_text(bind_who(sqlx::query(INSERT_HELD), new), new)
        .bind(held_cap)
        .bind(assumed.as_str())
        .bind(new.decision)
        .bind(new.idempotency_key)
        .bind(new.request_hash)
        .bind(new.sender.app_id)
        .bind(new.accept_url)
        .fetch_optional(db)
        .await?
        .map(|row| sqlx::Row::get(&row, 0));
    Ok(match status.as_deref() {
        None => Written::StateDiffers,
        Some("held") => Written::Recorded,
        Some(_) => Written::OverHeldCap,
    })
}

/// An invite that flags its sender: one transaction with the flag, the sender's new state (for
/// a shadow ban), their audit entries and the invite.
pub async fn insert_with_flag(
    pool: &PgPool,
    new: &NewInvite<'_>,
    assumed: SenderState,
    breach: &Breach,
    held_cap: i64,
    confirm_repeat: bool,
) -> Result<Written, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (stored, _, _): (String, i64, Option<String>) = sqlx::query_as(UPSERT_SENDER)
        .bind(&new.sender.id)
        .bind(new.address.as_deref())
        .bind(new.invite.sender_created_at)
        .bind(new.sender.app_id)
        .fetch_one(&mut *tx)
        .await?;
    if stored != assumed.as_str() {
        return Ok(Written::StateDiffers);
    }
    // The upsert locked the row, so the state it read is the state the flag changes.
    let now = flag(&mut tx, new.sender, breach, Some(new.id), confirm_repeat)
        .await?
        .unwrap_or(assumed);
    let written = if new.status == Status::Held {
        insert_held(&mut *tx, new, now, held_cap).await?
    } else {
        bind(sqlx::query(INSERT), new)
            .bind(new.sender.app_id)
            .bind(new.accept_url)
            .execute(&mut *tx)
            .await?;
        Written::Recorded
    };
    tx.commit().await?;
    Ok(written)
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
        sqlx::query(
            "UPDATE senders SET held_stored = held_stored + 1 WHERE app_id = $1 AND id = $2",
        )
        .bind(invite.app_id)
        .bind(&invite.sender_id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
