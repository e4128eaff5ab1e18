//! Sender states and flags: what moderation reads and writes (the audit log is [`crate::audit`]).

pub mod review;
pub mod senders;

use std::str::FromStr;
use std::time::Duration;

use sqlx::{PgPool, Postgres, Transaction};

use crate::audit::{self, Entry};
use crate::cache::TtlCache;

/// A sender's state and the version of its row, as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub state: SenderState,
    /// Bumped by every change of state; 1 for a sender never seen (the row starts there).
    pub version: i64,
}

impl Standing {
    const UNSEEN: Standing = Standing {
        state: SenderState::Active,
        version: 1,
    };
}

/// Sender standings as this instance last read them (see [`crate::cache`]): one read of the
/// `senders` table per sender and minute instead of one per invite. A change is announced by
/// a trigger and forgotten here within milliseconds.
#[derive(Clone)]
pub struct SenderStates(TtlCache<String, Standing>);

impl Default for SenderStates {
    fn default() -> Self {
        SenderStates(TtlCache::new(Duration::from_secs(60), 200_000))
    }
}

impl SenderStates {
    /// The sender's standing; a sender never seen is active.
    pub async fn get(&self, pool: &PgPool, sender_id: &str) -> Result<Standing, sqlx::Error> {
        let ticket = match self.0.get(sender_id) {
            Ok(standing) => return Ok(standing),
            Err(ticket) => ticket,
        };
        let standing = stored_standing(pool, sender_id).await?;
        self.0.store(ticket, sender_id.to_owned(), standing);
        Ok(standing)
    }

    pub fn forget(&self, sender_id: &str) {
        self.0.remove(sender_id);
    }

    pub fn clear(&self) {
        self.0.clear();
    }
}

/// The sender's standing as stored now; a sender never seen is active.
pub async fn stored_standing(pool: &PgPool, sender_id: &str) -> Result<Standing, sqlx::Error> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT state, version FROM senders WHERE id = $1")
            .bind(sender_id)
            .fetch_optional(pool)
            .await?;
    Ok(row
        .and_then(|(state, version)| {
            Some(Standing {
                state: state.parse().ok()?,
                version,
            })
        })
        .unwrap_or(Standing::UNSEEN))
}

/// A sender's standing (DESIGN.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderState {
    Active,
    ShadowBanned,
    Banned,
    Trusted,
}

impl SenderState {
    pub const ALL: [SenderState; 4] = [
        SenderState::Active,
        SenderState::ShadowBanned,
        SenderState::Banned,
        SenderState::Trusted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SenderState::Active => "active",
            SenderState::ShadowBanned => "shadow_banned",
            SenderState::Banned => "banned",
            SenderState::Trusted => "trusted",
        }
    }

    /// Whether this sender's invites are held instead of sent.
    pub fn holds_invites(self) -> bool {
        matches!(self, SenderState::ShadowBanned | SenderState::Banned)
    }
}

impl FromStr for SenderState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::names::parse(&SenderState::ALL, SenderState::as_str, s, "sender state")
    }
}

/// The evidence that a sender tripped a rule.
#[derive(Debug, Clone)]
pub struct Flag<'a> {
    pub sender_id: &'a str,
    pub rule_id: i64,
    pub rule_name: &'a str,
    pub observed: i64,
    pub limit: i64,
    pub window_secs: i64,
}

/// Moves an active sender to `shadow_banned` with its flag and an audit entry, in the caller's
/// transaction. A sender that is no longer active (trusted, already banned) is left alone.
/// Returns whether the state changed.
pub async fn shadow_ban(
    tx: &mut Transaction<'_, Postgres>,
    flag: &Flag<'_>,
) -> Result<bool, sqlx::Error> {
    let changed = sqlx::query(
        "UPDATE senders SET state = 'shadow_banned', version = version + 1,
                state_changed_at = now(), state_changed_by = 'system'
         WHERE id = $1 AND state = 'active'",
    )
    .bind(flag.sender_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if !changed {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO flags (sender_id, rule_id, rule_name, observed, limit_count, window_secs)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(flag.sender_id)
    .bind(flag.rule_id)
    .bind(flag.rule_name)
    .bind(flag.observed)
    .bind(flag.limit)
    .bind(flag.window_secs)
    .execute(&mut **tx)
    .await?;
    audit::write(
        &mut **tx,
        Entry {
            sender_id: Some(flag.sender_id),
            rule_id: Some(flag.rule_id),
            detail: serde_json::json!({
                "rule": flag.rule_name,
                "observed": flag.observed,
                "limit": flag.limit,
                "window_secs": flag.window_secs,
            }),
            ..Entry::new(audit::SYSTEM, "shadow_ban")
        },
    )
    .await?;
    Ok(true)
}
