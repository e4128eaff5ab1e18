//! The insert statement: a batch's queued and held invites written in one multi-row statement,
//! so that holding an invite costs the time sending one does. A held invite that flags its sender
//! goes through it too, with the follow-up that writes the flag ([`crate::invites::follow_up`]).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Assumed, NewInvite, Written};
use crate::invites::follow_up;
use crate::invites::policy::Breach;

/// The outbox that takes queued invites as they are written ([`crate::mail::Handoff`]): each
/// invite given room in it is written claimed by it.
pub struct Claim<'a> {
    pub worker_id: &'a str,
    pub lease: std::time::Duration,
    /// Per row of the batch: written claimed.
    pub rows: Vec<bool>,
}

/// One invite of the batch statement.
pub struct Row<'a> {
    pub new: &'a NewInvite,
    pub assumed: Assumed,
    /// A held invite: the most held invites its sender may have stored. Past it, only what
    /// idempotency needs is kept, as `discarded`, and the sender's overflow counts it.
    pub held_cap: Option<i64>,
    /// A held invite that flags its sender: once it is written, a follow-up does the flag.
    pub breach: Option<&'a Breach>,
}

/// An invite written, whether it was past its sender's held cap, and, when it was written
/// claimed, whether its recipient unsubscribed from the app (the outbox suppresses it instead
/// of sending it).
#[derive(Debug, sqlx::FromRow)]
pub struct WrittenRow {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
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

/// The batch statement of [`insert_batch`], which binds its parameters. It is one statement
/// for every batch, whatever it holds: a form without the held invites' steps, for batches
/// with none, wrote a queued invite 60 µs faster than a held one (docs/PERFORMANCE.md), a
/// difference a shadow-banned sender could time.
pub const INSERT_BATCH: &str = "WITH input AS (
         SELECT * FROM unnest($1::uuid[], $2::int8[], $3::int8[], $4::text[], $5::text[],
             $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
             $12::jsonb[], $13::text[], $14::bytea[], $15::text[], $16::text[], $17::bool[],
             $18::int8[], $19::text[], $20::timestamptz[], $21::bool[], $24::int8[],
             $25::jsonb[], $26::float8[], $27::text[], $28::text[])
             WITH ORDINALITY AS t(id, api_key_id, app_id, sender_id, recipient,
                 recipient_domain, sender_ip, resource, message, sender_name, status,
                 decision, idempotency_key, request_hash, accept_url, assumed, admitted,
                 version, address, created_in_app_at, claimed, held_cap, breach, settle,
                 campaign_keys, campaign_buckets, n)),
     locked AS (
         SELECT s.*, EXISTS (SELECT 1 FROM pending_flags p
                 WHERE p.app_id = s.app_id AND p.sender_id = s.id
                     AND p.breach ->> 'action' = 'shadow_ban') AS banning
         FROM (SELECT app_id, sender_id FROM input
                 WHERE EXISTS (SELECT 1 FROM input WHERE held_cap IS NOT NULL)
                 GROUP BY app_id, sender_id ORDER BY app_id, sender_id COLLATE \"C\") k,
             LATERAL (SELECT app_id, id, state, held_stored FROM senders
                 WHERE app_id = k.app_id AND id = k.sender_id FOR UPDATE) s),
     fits AS (
         SELECT i.n, COALESCE(l.held_stored, 0) AS held_stored FROM input i
         LEFT JOIN locked l ON l.app_id = i.app_id AND l.id = i.sender_id
         WHERE i.held_cap IS NOT NULL AND (l.state = i.assumed
             OR (l.id IS NULL AND i.assumed = 'active')
             OR (l.banning AND l.state = 'active' AND i.assumed = 'shadow_banned'))),
     held_keyed AS (
         INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash)
         SELECT i.api_key_id, i.idempotency_key, i.id, i.request_hash FROM input i
         JOIN fits f ON f.n = i.n
         WHERE i.idempotency_key IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM input j WHERE j.n < i.n
                 AND j.api_key_id = i.api_key_id AND j.idempotency_key = i.idempotency_key)
         ORDER BY i.n
         ON CONFLICT (api_key_id, key) DO NOTHING
         RETURNING invite_id),
     held AS (
         SELECT i.n, i.app_id, i.sender_id, f.held_stored + row_number()
             OVER (PARTITION BY i.app_id, i.sender_id ORDER BY i.n) <= i.held_cap AS room
         FROM input i JOIN fits f ON f.n = i.n
         WHERE i.idempotency_key IS NULL OR i.id IN (SELECT invite_id FROM held_keyed)),
     slots AS (
         SELECT app_id, sender_id, count(*) FILTER (WHERE room) AS stored,
             count(*) FILTER (WHERE NOT room) AS overflow
         FROM held GROUP BY app_id, sender_id),
     sender AS (
         INSERT INTO senders (app_id, id, first_address, created_in_app_at, linked_to,
             held_stored, held_overflow)
         SELECT DISTINCT ON (i.app_id, i.sender_id COLLATE \"C\") i.app_id, i.sender_id,
             i.address, i.created_in_app_at,
             (SELECT b.sender_id FROM banned_addresses b
              WHERE b.app_id = i.app_id AND b.address = i.address
                  AND b.banned_at > now() - interval '30 days'
              ORDER BY b.banned_at DESC LIMIT 1),
             COALESCE(s.stored, 0), COALESCE(s.overflow, 0)
         FROM input i LEFT JOIN slots s ON s.app_id = i.app_id AND s.sender_id = i.sender_id
         ORDER BY i.app_id, i.sender_id COLLATE \"C\", i.n
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
         WHERE idempotency_key IS NOT NULL AND room IS NULL ORDER BY n
         ON CONFLICT (api_key_id, key) DO NOTHING
         RETURNING invite_id),
     written AS (
         INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
             sender_ip, resource, message, sender_name, status, decision, accept_url,
             campaign_keys)
         SELECT id, api_key_id, app_id, sender_id, recipient, recipient_domain, sender_ip,
             CASE WHEN room IS NOT FALSE THEN resource END,
             CASE WHEN room IS NOT FALSE THEN message END,
             CASE WHEN room IS NOT FALSE THEN sender_name END,
             CASE WHEN room IS FALSE THEN 'discarded' ELSE status END,
             CASE WHEN room IS FALSE THEN '{\"reason\": \"held_cap\"}'::jsonb ELSE decision END,
             CASE WHEN room IS NOT FALSE THEN accept_url END,
             string_to_array(campaign_keys, E'\\n')
         FROM admitted
         WHERE idempotency_key IS NULL OR room IS NOT NULL
             OR id IN (SELECT invite_id FROM keyed)
         ORDER BY n
         RETURNING id, app_id, sender_id, recipient, created_at, status = 'queued' AS queued,
             status = 'discarded' AS over_cap),
     queued AS (
         INSERT INTO outbox (invite_id, created_at, next_attempt_at, claimed_by,
             campaign_buckets)
         SELECT w.id, w.created_at, now() + CASE WHEN i.claimed
                 THEN make_interval(secs => $23::float8)
                 ELSE make_interval(secs => i.settle) END,
             CASE WHEN i.claimed THEN $22::text END,
             string_to_array(i.campaign_buckets, E'\\n')::int[]
         FROM written w JOIN input i ON i.id = w.id
         WHERE w.queued),
     follow_up AS (
         INSERT INTO pending_flags (app_id, sender_id, invite_id, version, over_cap, breach)
         SELECT w.app_id, w.sender_id, w.id, s.version, w.over_cap, i.breach
         FROM written w JOIN input i ON i.id = w.id
             JOIN sender s ON s.app_id = w.app_id AND s.id = w.sender_id
         WHERE i.breach IS NOT NULL)
     SELECT w.id, w.created_at, w.over_cap,
         CASE WHEN w.queued AND i.claimed THEN EXISTS (SELECT 1 FROM suppressions s
             WHERE s.app_id = w.app_id AND s.recipient = w.recipient) END AS claimed_unsubscribed
     FROM written w JOIN input i ON i.id = w.id";

/// Queued and held invites with no breach, in one statement, so that holding an invite costs
/// the time sending one does. Their senders are upserted once each (in key order, bytewise as
/// [`super::lock_senders`] sorts them, so concurrent batches lock them in the same order
/// whatever the database's collation), and each invite is inserted when its sender is in the
/// state its verdict assumed and its `Idempotency-Key` is unused. A held invite takes a slot
/// under its sender's cap, in arrival order, counted from the sender's row as it is once
/// locked (every sender of a batch with held invites is locked first, in key order, each by its
/// primary key whatever the plan): a repeated request or one whose sender changed takes none. A
/// held invite claims its key before it takes a slot, so that a retry being written at the same
/// time by another transaction (invisible to this statement's snapshot) waits for it and then
/// takes neither. A sender never seen counts as active with nothing held (two batches creating
/// it at once may each fill its cap). A sender whose shadow ban is on its way (a follow-up not
/// done yet) counts as active and as shadow-banned alike: its invites are held either way. A
/// flagging invite, once written, leaves its follow-up in the same statement. Answers the rows
/// written.
///
/// A plan is kept by the writer's connection for as long as it lives, and one made while the
/// tables were small would read them whole once they have grown: the senders are locked
/// through a lateral subquery, which stays a probe by key.
pub async fn insert_batch(
    conn: &mut PgConnection,
    rows: &[Row<'_>],
    claim: &Claim<'_>,
) -> Result<Vec<WrittenRow>, sqlx::Error> {
    sqlx::query_as(INSERT_BATCH)
        .bind(column(rows, |row| row.new.id))
        .bind(column(rows, |row| row.new.api_key_id))
        .bind(column(rows, |row| row.new.sender.app_id))
        .bind(column(rows, |row| row.new.sender.id.as_str()))
        .bind(column(rows, |row| row.new.invite.recipient.as_str()))
        .bind(column(rows, |row| row.new.invite.recipient_domain.as_str()))
        .bind(column(rows, |row| {
            row.new.invite.sender_ip.map(|ip| ip.to_string())
        }))
        .bind(column(rows, |row| row.new.invite.resource.as_deref()))
        .bind(column(rows, |row| row.new.invite.message.as_deref()))
        .bind(column(rows, |row| row.new.invite.sender_name.as_deref()))
        .bind(column(rows, |row| row.new.status.as_str()))
        .bind(column(rows, |row| Json(&row.new.decision)))
        .bind(column(rows, |row| row.new.idempotency_key.as_deref()))
        .bind(column(rows, |row| &row.new.request_hash[..]))
        .bind(column(rows, |row| row.new.accept_url.as_deref()))
        .bind(column(rows, |row| row.assumed.state.as_str()))
        .bind(column(rows, |row| row.assumed.admitted))
        .bind(column(rows, |row| row.assumed.version))
        .bind(column(rows, |row| row.new.address.as_deref()))
        .bind(column(rows, |row| row.new.invite.sender_created_at))
        .bind(&claim.rows)
        .bind(claim.worker_id)
        .bind(claim.lease.as_secs_f64())
        .bind(column(rows, |row| row.held_cap))
        .bind(column(rows, |row| {
            row.breach.map(|b| Json(follow_up::record(b)))
        }))
        .bind(column(rows, |row| row.new.settle.as_secs_f64()))
        .bind(column(rows, |row| {
            (!row.new.campaign_keys.is_empty()).then(|| row.new.campaign_keys.join("\n"))
        }))
        .bind(column(rows, |row| {
            (!row.new.campaign_keys.is_empty()).then(|| {
                let buckets: Vec<String> = (row.new.campaign_keys.iter())
                    .map(|key| crate::campaigns::bucket(key).to_string())
                    .collect();
                buckets.join("\n")
            })
        }))
        .fetch_all(conn)
        .await
}

/// One array parameter of the batch statement: a value of each row.
fn column<'r, 'a, T>(rows: &'r [Row<'a>], value: impl FnMut(&'r Row<'a>) -> T) -> Vec<T> {
    rows.iter().map(value).collect()
}
