//! Sender states and flags: what moderation reads and writes (the audit log is [`crate::audit`]).

pub mod campaign;
mod evasion;
pub mod expiry;
pub mod held;
pub mod review;
mod review_action;
pub mod senders;
pub mod terms;

pub use evasion::{banned_near, remember_addresses};

use std::time::Duration;

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::audit::{self, Entry};
use crate::cache::TtlCache;
use crate::coalesce::{BatchError, Batcher};
use crate::db::KeptConnections;
use crate::metrics::Metrics;
use crate::rules::Signal;
use crate::rules::contribution::{Vouches, is_new};
use crate::sender_key::SenderKey;
use crate::webhooks::{self, EventType};
use terms::Ladder;

/// A sender's state and what the rules need to know of it, as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub state: SenderState,
    /// Bumped by every change of state; 1 for a sender never seen (the row starts there).
    pub version: i64,
    /// Since when the sender exists: as the app said, else first seen; `None` if never seen.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// The acceptances that vouch for the sender.
    pub vouched: Vouches,
    /// The banned sender this one was first seen near (same address within 30 days).
    pub linked_to: Option<String>,
}

impl Standing {
    const UNSEEN: Standing = Standing {
        state: SenderState::Active,
        version: 1,
        since: None,
        vouched: Vouches {
            count: 0,
            domains: 0,
        },
        linked_to: None,
    };

    /// Whether the sender counts as new at `now` (see [`is_new`]). `created` is the app's word
    /// for when the account was made, when it gave one.
    pub fn is_new(
        &self,
        created: Option<chrono::DateTime<chrono::Utc>>,
        days: i64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> bool {
        is_new(created.or(self.since), self.vouched, days, now)
    }

    /// Whether the sender has never been seen.
    pub fn unseen(&self) -> bool {
        self.since.is_none()
    }
}

#[derive(sqlx::FromRow)]
struct StandingRow {
    state: String,
    version: i64,
    since: chrono::DateTime<chrono::Utc>,
    vouched: i64,
    vouched_domains: i32,
    linked_to: Option<String>,
}

impl StandingRow {
    fn standing(self) -> Standing {
        let Ok(state) = self.state.parse() else {
            return Standing::UNSEEN;
        };
        Standing {
            state,
            version: self.version,
            since: Some(self.since),
            vouched: Vouches {
                count: self.vouched,
                domains: usize::try_from(self.vouched_domains).unwrap_or(0),
            },
            linked_to: self.linked_to,
        }
    }
}

/// The most senders one read asks for. One read at a time: while it runs, the next batch
/// gathers (a read is one primary-key probe per sender, so it is short).
const MAX_READ: usize = 256;
const READERS: usize = 1;

/// Sender standings as this instance last read them (see [`crate::cache`]): one read of the
/// `senders` table per sender and minute instead of one per invite. A change is announced by
/// a trigger and forgotten here within milliseconds. Senders missing from the cache at the
/// same time are read together, in one query ([`crate::coalesce`]).
#[derive(Clone)]
pub struct SenderStates {
    cache: TtlCache<SenderKey, Standing>,
    reads: Batcher<SenderKey, Standing>,
    metrics: Metrics,
}

impl SenderStates {
    pub fn new(connections: KeptConnections, metrics: Metrics) -> Self {
        SenderStates {
            cache: TtlCache::new(Duration::from_secs(60), 200_000),
            reads: Batcher::start(MAX_READ, READERS, move |senders| {
                let connections = connections.clone();
                async move {
                    connections
                        .run(async |conn| stored_standings(conn, &senders).await)
                        .await
                }
            }),
            metrics,
        }
    }

    /// The sender's standing; a sender never seen is active.
    pub async fn get(&self, sender: &SenderKey) -> Result<Standing, BatchError> {
        let ticket = match self.cache.get(sender) {
            Ok(standing) => return Ok(standing),
            Err(ticket) => ticket,
        };
        let started = std::time::Instant::now();
        let standing = self.reads.call(sender.clone()).await?;
        self.metrics.sender_read_latency(started.elapsed());
        self.cache.store(ticket, sender.clone(), standing.clone());
        Ok(standing)
    }

    /// Takes the sender's standing to be `standing` until a change is announced: one this
    /// instance made and is about to commit.
    pub fn assume(&self, sender: &SenderKey, standing: Standing) {
        self.cache.put(sender.clone(), standing);
    }

    pub fn forget(&self, sender: &SenderKey) {
        self.cache.remove(sender);
    }

    pub fn clear(&self) {
        self.cache.clear();
    }
}

/// The sender's standing as stored now; a sender never seen is active.
pub async fn stored_standing(pool: &PgPool, sender: &SenderKey) -> Result<Standing, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut one = stored_standings(&mut conn, std::slice::from_ref(sender)).await?;
    Ok(one.pop().unwrap_or(Standing::UNSEEN))
}

/// The standings of several senders in one query, in their order.
async fn stored_standings(
    conn: &mut PgConnection,
    senders: &[SenderKey],
) -> Result<Vec<Standing>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Found {
        n: i64,
        #[sqlx(flatten)]
        row: StandingRow,
    }
    let found: Vec<Found> = sqlx::query_as(
        // One primary-key probe per sender, however many are asked for: a join would read the
        // whole table under a plan cached while the table was small. LIMIT keeps the planner
        // from turning the LATERAL probe back into a join.
        "SELECT k.n, s.state, s.version, COALESCE(s.created_in_app_at, s.first_seen_at) AS since,
             s.vouched, cardinality(s.vouched_domains) AS vouched_domains, s.linked_to
         FROM unnest($1::int8[], $2::text[]) WITH ORDINALITY AS k(app_id, id, n),
             LATERAL (SELECT * FROM senders WHERE app_id = k.app_id AND id = k.id LIMIT 1) s",
    )
    .bind(senders.iter().map(|s| s.app_id).collect::<Vec<_>>())
    .bind(senders.iter().map(|s| s.id.as_str()).collect::<Vec<_>>())
    .fetch_all(conn)
    .await?;
    let mut standings = vec![Standing::UNSEEN; senders.len()];
    for f in found {
        if let Some(slot) = usize::try_from(f.n - 1)
            .ok()
            .and_then(|n| standings.get_mut(n))
        {
            *slot = f.row.standing();
        }
    }
    Ok(standings)
}

/// A sender's standing (docs/DESIGN.md §2).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_state)]
pub enum SenderState {
    Active,
    ShadowBanned,
    Banned,
    Trusted,
}

impl SenderState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether this sender's invites are held instead of sent.
    pub fn holds_invites(self) -> bool {
        matches!(self, SenderState::ShadowBanned | SenderState::Banned)
    }
}

fn unknown_state(s: &str) -> String {
    crate::names::unknown::<SenderState>("sender state", s)
}

/// The evidence that a sender tripped a rule.
#[derive(Debug, Clone)]
pub struct Flag<'a> {
    pub sender: &'a SenderKey,
    /// `None` for a flag no stored rule made (a sender linked to a banned one).
    pub rule_id: Option<i64>,
    pub rule_name: &'a str,
    pub signal: &'a str,
    pub observed: i64,
    pub limit: i64,
    pub window_secs: i64,
    /// The invite a `hold` kept for review.
    pub invite_id: Option<Uuid>,
    /// The campaign the breach belongs to.
    pub campaign_id: Option<i64>,
}

/// How long a lift is remembered: a sender banned again by a rule within it is a repeat
/// offender; and how long an address stays linked to the sender banned from it.
pub const MEMORY_DAYS: i32 = 30;

/// Writes the flag and, when it is a new one, its audit entry; answers whether it is new. A
/// `hold` flag still open for the same rule has its count raised (and its last-seen time)
/// instead: one sender's attempts add nothing more to the records.
async fn record_flag(
    tx: &mut Transaction<'_, Postgres>,
    flag: &Flag<'_>,
    action: &str,
    repeat: bool,
) -> Result<bool, sqlx::Error> {
    let new: bool = sqlx::query_scalar(
        "INSERT INTO flags (app_id, sender_id, rule_id, rule_name, signal, action, observed,
             limit_count, window_secs, invite_id, repeat, campaign_id)
         VALUES ($11, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12)
         ON CONFLICT (app_id, sender_id, rule_name) WHERE action = 'hold' AND closed_at IS NULL
         DO UPDATE SET count = flags.count + 1, last_seen_at = now(),
             observed = GREATEST(flags.observed, EXCLUDED.observed)
         RETURNING xmax = 0",
    )
    .bind(&flag.sender.id)
    .bind(flag.rule_id)
    .bind(flag.rule_name)
    .bind(flag.signal)
    .bind(action)
    .bind(flag.observed)
    .bind(flag.limit)
    .bind(flag.window_secs)
    .bind(flag.invite_id)
    .bind(repeat)
    .bind(flag.sender.app_id)
    .bind(flag.campaign_id)
    .fetch_one(&mut **tx)
    .await?;
    if !new {
        return Ok(false);
    }
    audit::write(
        &mut **tx,
        Entry {
            sender: Some(flag.sender),
            rule_id: flag.rule_id,
            detail: serde_json::json!({
                "rule": flag.rule_name,
                "signal": flag.signal,
                "observed": flag.observed,
                "limit": flag.limit,
                "window_secs": flag.window_secs,
                "invite": flag.invite_id,
                "repeat": repeat,
            }),
            ..Entry::new(audit::SYSTEM, action)
        },
    )
    .await?;
    Ok(true)
}

/// Decides the sender's open flags: a reviewer's decision answers them all, and a later breach
/// of the same `hold` rule opens a new one.
pub async fn close_flags(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE flags SET closed_at = now()
         WHERE app_id = $1 AND sender_id = $2 AND closed_at IS NULL",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .execute(&mut **tx)
    .await
    .map(drop)
}

/// Moves an active sender to `shadow_banned` with its flag and an audit entry, in the caller's
/// transaction; a repeat offender (banned again within [`MEMORY_DAYS`] of a lift) goes straight
/// to `banned`, for the ladder's term, when `confirm_repeat` gives the ladder. A sender that is
/// no longer active (trusted, already banned) is left alone. Returns the new state, if it
/// changed. The app hears of it through its webhook, from the same transaction.
pub async fn shadow_ban(
    tx: &mut Transaction<'_, Postgres>,
    flag: &Flag<'_>,
    confirm_repeat: Option<&Ladder>,
) -> Result<Option<SenderState>, sqlx::Error> {
    let now = chrono::Utc::now();
    let term = match confirm_repeat {
        Some(ladder) => Some(ladder.next_term(&mut **tx, flag.sender, now).await?),
        None => None,
    };
    let until = term.and_then(|t| t.until(now));
    let changed: Option<(String, bool)> = sqlx::query_as(
        "UPDATE senders SET
             state = CASE WHEN $3 AND COALESCE(lifted_at > now() - make_interval(days => $4), false)
                 THEN 'banned' ELSE 'shadow_banned' END,
             banned_until = CASE WHEN $3 AND COALESCE(lifted_at > now() - make_interval(days => $4), false)
                 THEN $6 END,
             repeat_offender = repeat_offender
                 OR COALESCE(lifted_at > now() - make_interval(days => $4), false),
             version = version + 1, state_changed_at = now(), state_changed_by = $5
         WHERE app_id = $1 AND id = $2 AND state = 'active'
         RETURNING state, COALESCE(lifted_at > now() - make_interval(days => $4), false)",
    )
    .bind(flag.sender.app_id)
    .bind(&flag.sender.id)
    .bind(term.is_some())
    .bind(MEMORY_DAYS)
    .bind(banned_by(flag.signal))
    .bind(until)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((state, repeat)) = changed else {
        return Ok(None);
    };
    record_flag(tx, flag, "shadow_ban", repeat).await?;
    let state: SenderState = state.parse().unwrap_or(SenderState::ShadowBanned);
    let mut data = serde_json::json!({
        "rule": flag.rule_name,
        "signal": flag.signal,
        "observed": flag.observed,
        "limit": flag.limit,
        "window_secs": flag.window_secs,
        "repeat_offender": repeat,
    });
    let reason = match term {
        Some(term) if state == SenderState::Banned => {
            terms::record(tx, flag.sender, term, until, audit::SYSTEM).await?;
            let entry = Entry {
                sender: Some(flag.sender),
                detail: serde_json::json!({
                    "reason": "repeat offender, confirmed automatically",
                    "term": term.as_str(),
                    "banned_until": until,
                }),
                ..Entry::new(audit::SYSTEM, "confirm_ban")
            };
            audit::write(&mut **tx, entry).await?;
            data["term"] = term.as_str().into();
            data["banned_until"] = serde_json::json!(until);
            EventType::SenderBanned
        }
        _ => EventType::SenderShadowBanned,
    };
    announce(tx, flag.sender, reason, data).await?;
    remember_addresses(tx, flag.sender).await?;
    Ok(Some(state))
}

/// Who a rule's ban is by. The batch statement still writes an invite of the sender's own
/// burst that was checked under the limit before the burst's ban (by `system`); a ban for
/// bounces or complaints is no count such an invite took part in, and holds it.
fn banned_by(signal: &str) -> &'static str {
    if signal.parse::<Signal>().is_ok_and(Signal::is_outcome) {
        BY_OUTCOMES
    } else {
        audit::SYSTEM
    }
}

/// The author of a ban for bounces or complaints, in `senders.state_changed_by`.
const BY_OUTCOMES: &str = "system:outcomes";

/// Flags a sender for review without changing its state: a `hold` breach. The app hears of
/// the held invite through its webhook when it was `stored`; one discarded past the held cap
/// is only counted.
pub async fn hold(
    tx: &mut Transaction<'_, Postgres>,
    flag: &Flag<'_>,
    stored: bool,
) -> Result<(), sqlx::Error> {
    record_flag(tx, flag, "hold", false).await?;
    if !stored {
        return Ok(());
    }
    let data = serde_json::json!({
        "invite_id": flag.invite_id,
        "rule": flag.rule_name,
        "signal": flag.signal,
    });
    announce(tx, flag.sender, EventType::InviteHeld, data).await
}

/// Flags a sender for review and holds nothing: a `hold` rule of bounces or complaints, which
/// arrive after their invite went out (so no `invite.held` is announced). An active sender
/// waits in the review queue until a reviewer decides; the flag is news to any page open on
/// the sender, so its version moves and a decision made from that page is refused as stale.
pub async fn flag_for_review(
    tx: &mut Transaction<'_, Postgres>,
    flag: &Flag<'_>,
) -> Result<(), sqlx::Error> {
    record_flag(tx, flag, "hold", false).await?;
    sqlx::query(
        "UPDATE senders SET review_requested_at = now(), version = version + 1
         WHERE app_id = $1 AND id = $2 AND state = 'active'",
    )
    .bind(flag.sender.app_id)
    .bind(&flag.sender.id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Writes a webhook event about `sender` into the outbox, in the caller's transaction, when
/// the sender's app has a webhook.
pub async fn announce(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    kind: EventType,
    data: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let app: Option<String> =
        sqlx::query_scalar("SELECT name FROM apps WHERE id = $1 AND webhook_url IS NOT NULL")
            .bind(sender.app_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some(app) = app else {
        return Ok(());
    };
    let mut fields = match data {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    fields.insert("sender_id".into(), sender.id.clone().into());
    webhooks::enqueue(tx, sender.app_id, &app, kind, chrono::Utc::now(), fields).await?;
    Ok(())
}
