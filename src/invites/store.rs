//! The invite's SQL: writing them (queued and held ones in one statement, one with the flag of
//! a breach in a few statements of the batch's transaction; see [`super::writer`]), and the
//! reads and updates of the deferred re-check. Every write checks that the sender is still in
//! the state the verdict was made for: the cached state is a hint, the table decides at commit.
//! A write never fails on an `Idempotency-Key` that is already taken, so one repeated request
//! cannot fail the batch it shares: it is not written, and the caller looks the key up once the
//! batch has committed.

use std::sync::Arc;

use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use super::policy::{Breach, DecisionRecord, Status};
use super::validate::ValidInvite;
use crate::moderation::{self, Flag, SenderState, Standing};
use crate::rules::Action;
use crate::sender::SenderKey;

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
    /// its sender was read is a ban by a rule (a later invite of its own burst, counted after
    /// it, committed first). A ban by a person still holds it.
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

/// The outbox that takes queued invites as they are written ([`crate::mail::Handoff`]): each
/// invite given room in it is written claimed by it.
pub struct Claim<'a> {
    pub worker_id: &'a str,
    pub lease: std::time::Duration,
    /// Per row of the batch: written claimed.
    pub rows: Vec<bool>,
}

impl Claim<'_> {
    /// No row written claimed.
    pub fn none(rows: usize) -> Claim<'static> {
        Claim {
            worker_id: "",
            lease: std::time::Duration::ZERO,
            rows: vec![false; rows],
        }
    }
}

/// One invite of the batch statement.
pub struct Row<'a> {
    pub new: &'a NewInvite,
    pub assumed: Assumed,
    /// A held invite: the most held invites its sender may have stored. Past it, only what
    /// idempotency needs is kept, as `discarded`, and the sender's overflow counts it.
    pub held_cap: Option<i64>,
}

/// An invite written, whether it was past its sender's held cap, and, when it was written
/// claimed, whether its recipient unsubscribed from the app (the outbox suppresses it instead
/// of sending it).
#[derive(Debug, sqlx::FromRow)]
pub struct WrittenRow {
    pub id: Uuid,
    pub over_cap: bool,
    pub claimed_unsubscribed: Option<bool>,
}

/// What the batch statement did with one of its invites.
pub fn outcome(id: Uuid, rows: &[WrittenRow]) -> Written {
    match rows.iter().find(|row| row.id == id) {
        Some(row) if row.over_cap => Written::OverHeldCap,
        Some(_) => Written::Recorded,
        None => Written::Skipped,
    }
}

/// Queued and held invites with no breach, in one statement, so that holding an invite costs
/// the time sending one does. Their senders are upserted once each (in key order, so
/// concurrent batches lock them in the same order), and each invite is inserted when its
/// sender is in the state its verdict assumed and its `Idempotency-Key` is unused. A held
/// invite takes a slot under its sender's cap, in arrival order, counted from the sender's
/// row as it is once locked (every sender of a batch with held invites is locked first, in key
/// order): a repeated request or one whose sender changed takes none. Answers the rows written.
pub async fn insert_batch(
    conn: &mut PgConnection,
    rows: &[Row<'_>],
    claim: &Claim<'_>,
) -> Result<Vec<WrittenRow>, sqlx::Error> {
    let col = |f: fn(&NewInvite) -> Option<&str>| -> Vec<Option<&str>> {
        rows.iter().map(|row| f(row.new)).collect()
    };
    sqlx::query_as(
        "WITH input AS (
             SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                 $12::jsonb[], $13::text[], $14::bytea[], $15::text[], $16::text[], $17::bool[],
                 $18::int8[], $19::text[], $20::timestamptz[], $21::bool[], $24::int8[])
                 WITH ORDINALITY AS t(id, api_key_id, app_id, sender_id, recipient,
                     recipient_domain, sender_ip, resource, message, sender_name, status,
                     decision, idempotency_key, request_hash, accept_url, assumed, admitted,
                     version, address, created_in_app_at, claimed, held_cap, n)),
         locked AS (
             SELECT app_id, id, state, held_stored FROM senders
             WHERE (app_id, id) IN (SELECT app_id, sender_id FROM input)
                 AND EXISTS (SELECT 1 FROM input WHERE held_cap IS NOT NULL)
             ORDER BY app_id, id FOR UPDATE),
         held AS (
             SELECT i.n, i.app_id, i.sender_id, l.held_stored + row_number()
                 OVER (PARTITION BY i.app_id, i.sender_id ORDER BY i.n) <= i.held_cap AS room
             FROM input i
             JOIN locked l ON l.app_id = i.app_id AND l.id = i.sender_id AND l.state = i.assumed
             WHERE i.held_cap IS NOT NULL
                 AND (i.idempotency_key IS NULL
                     OR NOT EXISTS (SELECT 1 FROM idempotency_keys k
                             WHERE k.api_key_id = i.api_key_id AND k.key = i.idempotency_key)
                         AND NOT EXISTS (SELECT 1 FROM input j WHERE j.n < i.n
                             AND j.api_key_id = i.api_key_id
                             AND j.idempotency_key = i.idempotency_key))),
         slots AS (
             SELECT app_id, sender_id, count(*) FILTER (WHERE room) AS stored,
                 count(*) FILTER (WHERE NOT room) AS overflow
             FROM held GROUP BY app_id, sender_id),
         sender AS (
             INSERT INTO senders (app_id, id, first_address, created_in_app_at, linked_to,
                 held_stored, held_overflow)
             SELECT DISTINCT ON (i.app_id, i.sender_id) i.app_id, i.sender_id, i.address,
                 i.created_in_app_at,
                 (SELECT b.sender_id FROM banned_addresses b
                  WHERE b.app_id = i.app_id AND b.address = i.address
                      AND b.banned_at > now() - interval '30 days'
                  ORDER BY b.banned_at DESC LIMIT 1),
                 COALESCE(s.stored, 0), COALESCE(s.overflow, 0)
             FROM input i LEFT JOIN slots s ON s.app_id = i.app_id AND s.sender_id = i.sender_id
             ORDER BY i.app_id, i.sender_id, i.n
             ON CONFLICT (app_id, id) DO UPDATE SET last_seen_at = now(),
                 created_in_app_at = COALESCE(senders.created_in_app_at,
                     EXCLUDED.created_in_app_at),
                 held_stored = senders.held_stored + EXCLUDED.held_stored,
                 held_overflow = senders.held_overflow + EXCLUDED.held_overflow
             RETURNING app_id, id, state, version, state_changed_by),
         admitted AS (
             SELECT i.*, NULL::bool AS room FROM input i
             JOIN sender s ON s.app_id = i.app_id AND s.id = i.sender_id
             WHERE i.held_cap IS NULL AND (s.state = i.assumed
                 OR (i.admitted AND s.state IN ('shadow_banned', 'banned')
                     AND s.state_changed_by = 'system' AND s.version = i.version + 1))
             UNION ALL
             SELECT i.*, h.room FROM input i JOIN held h ON h.n = i.n),
         keyed AS (
             INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash)
             SELECT api_key_id, idempotency_key, id, request_hash FROM admitted
             WHERE idempotency_key IS NOT NULL ORDER BY n
             ON CONFLICT (api_key_id, key) DO NOTHING
             RETURNING invite_id)
         INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
             sender_ip, resource, message, sender_name, status, decision, next_attempt_at,
             accept_url, claimed_by, claimed_until)
         SELECT id, api_key_id, app_id, sender_id, recipient, recipient_domain, sender_ip,
             CASE WHEN room IS NOT FALSE THEN resource END,
             CASE WHEN room IS NOT FALSE THEN message END,
             CASE WHEN room IS NOT FALSE THEN sender_name END,
             CASE WHEN room IS FALSE THEN 'discarded' ELSE status END,
             CASE WHEN room IS FALSE THEN '{\"reason\": \"held_cap\"}'::jsonb ELSE decision END,
             CASE WHEN status = 'queued' THEN now() END,
             CASE WHEN room IS NOT FALSE THEN accept_url END,
             CASE WHEN claimed AND status = 'queued' THEN $22::text END,
             CASE WHEN claimed AND status = 'queued'
                 THEN now() + make_interval(secs => $23::float8) END
         FROM admitted
         WHERE idempotency_key IS NULL OR id IN (SELECT invite_id FROM keyed)
         ORDER BY n
         RETURNING id, status = 'discarded' AS over_cap,
             CASE WHEN claimed_by IS NOT NULL THEN EXISTS (SELECT 1 FROM suppressions s
                 WHERE s.app_id = invites.app_id AND s.recipient = invites.recipient) END
                 AS claimed_unsubscribed",
    )
    .bind(rows.iter().map(|row| row.new.id).collect::<Vec<_>>())
    .bind(
        rows.iter()
            .map(|row| row.new.api_key_id)
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|row| row.new.sender.app_id)
            .collect::<Vec<_>>(),
    )
    .bind(col(|new| Some(&new.sender.id)))
    .bind(col(|new| Some(&new.invite.recipient)))
    .bind(col(|new| Some(&new.invite.recipient_domain)))
    .bind(
        rows.iter()
            .map(|row| row.new.invite.sender_ip.map(|ip| ip.to_string()))
            .collect::<Vec<_>>(),
    )
    .bind(col(|new| new.invite.resource.as_deref()))
    .bind(col(|new| new.invite.message.as_deref()))
    .bind(col(|new| new.invite.sender_name.as_deref()))
    .bind(col(|new| Some(new.status.as_str())))
    .bind(
        rows.iter()
            .map(|row| Json(&row.new.decision))
            .collect::<Vec<_>>(),
    )
    .bind(col(|new| new.idempotency_key.as_deref()))
    .bind(
        rows.iter()
            .map(|row| &row.new.request_hash[..])
            .collect::<Vec<_>>(),
    )
    .bind(col(|new| new.accept_url.as_deref()))
    .bind(
        rows.iter()
            .map(|row| row.assumed.state.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|row| row.assumed.admitted)
            .collect::<Vec<_>>(),
    )
    .bind(
        rows.iter()
            .map(|row| row.assumed.version)
            .collect::<Vec<_>>(),
    )
    .bind(col(|new| new.address.as_deref()))
    .bind(
        rows.iter()
            .map(|row| row.new.invite.sender_created_at)
            .collect::<Vec<_>>(),
    )
    .bind(&claim.rows)
    .bind(claim.worker_id)
    .bind(claim.lease.as_secs_f64())
    .bind(rows.iter().map(|row| row.held_cap).collect::<Vec<_>>())
    .fetch_all(conn)
    .await
}

/// Locks the rows of these senders (those that exist), in the order given.
pub async fn lock_senders(
    conn: &mut PgConnection,
    senders: &[&SenderKey],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT 1 FROM unnest($1::int8[], $2::text[]) WITH ORDINALITY AS k(app_id, id, n),
             LATERAL (SELECT 1 FROM senders WHERE app_id = k.app_id AND id = k.id
                      FOR UPDATE) s
         ORDER BY k.n",
    )
    .bind(senders.iter().map(|s| s.app_id).collect::<Vec<_>>())
    .bind(senders.iter().map(|s| s.id.as_str()).collect::<Vec<_>>())
    .execute(conn)
    .await
    .map(drop)
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
    assumed: SenderState,
    breach: &Breach,
    held_cap: i64,
    confirm_repeat: bool,
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
    if stored != assumed.as_str() {
        return Ok(Written::Skipped);
    }
    // The upsert locked the row, so the state it read is the state the flag changes.
    let now = flag(tx, &new.sender, breach, Some(new.id), confirm_repeat)
        .await?
        .unwrap_or(assumed);
    if new.status == Status::Held {
        let row = Row {
            new,
            assumed: Assumed::state(now),
            held_cap: Some(held_cap),
        };
        let rows = insert_batch(tx, &[row], &Claim::none(1)).await?;
        return Ok(outcome(new.id, &rows));
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

/// Gives a deferred invite its verdict; a held one counts against the sender's stored held.
pub async fn settle_deferred(
    tx: &mut Transaction<'_, Postgres>,
    invite: &DeferredInvite,
    status: Status,
    decision: &DecisionRecord,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE invites SET status = $2, decision = $3,
             next_attempt_at = CASE WHEN $2 = 'queued' THEN now() END
         WHERE id = $1",
    )
    .bind(invite.id)
    .bind(status.as_str())
    .bind(Json(decision))
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
