//! The end of a ban's term (docs/DESIGN.md §3e): a task on every instance ends the bans whose
//! term is over. The state lives in Postgres (`senders.banned_until`), so a restart loses
//! nothing, and each ban is ended by one instance: the sender's row is taken with
//! `FOR UPDATE SKIP LOCKED` and its term checked again under the lock.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::review::{ReviewError, clear_counters, discard_or_release};
use crate::audit::{self, Entry};
use crate::limiter::{KeyPrefix, Limiter};
use crate::metrics::Metrics;
use crate::rules::RuleCache;
use crate::sender_key::SenderKey;
use crate::webhooks::EventType;

/// Bans ended in one round, at most.
const BATCH: i64 = 100;

/// Ends the bans whose term is over.
#[derive(Clone)]
pub struct Expiry {
    pub pool: PgPool,
    pub limiter: Limiter,
    pub keys: KeyPrefix,
    pub rules: RuleCache,
    pub metrics: Metrics,
}

impl Expiry {
    /// Every `every` until `stop`; a round that fails is logged and the next one tries again.
    pub async fn run(self, every: Duration, stop: CancellationToken) {
        loop {
            if let Err(e) = self.run_once(Utc::now()).await {
                tracing::warn!(error = %e, "ending bans whose term is over failed");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Ends the bans whose term is over at `now`; answers how many this instance ended.
    ///
    /// A sender's own counters of the rules it tripped are cleared first, with no row locked
    /// while Redis answers, as a lift clears them. Two instances at the same ban both clear
    /// them (at worst forgetting an invite counted between the two clears) and one ends it. A
    /// ban whose counters cannot be cleared waits for the next round: active with its counters
    /// still full, its next invite would ban it again.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<usize, ReviewError> {
        let due: Vec<(i64, String)> = sqlx::query_as(
            "SELECT app_id, id FROM senders
             WHERE state = 'banned' AND banned_until <= $1
             ORDER BY banned_until LIMIT $2",
        )
        .bind(now)
        .bind(BATCH)
        .fetch_all(&self.pool)
        .await?;
        let mut ended = 0;
        for (app_id, id) in due {
            let sender = SenderKey::new(app_id, id);
            clear_counters(&self.pool, &self.limiter, &self.keys, &self.rules, &sender).await?;
            if self.end(&sender, now).await? {
                ended += 1;
            }
        }
        Ok(ended)
    }

    /// Ends one ban, unless another instance holds the sender or the ban changed.
    async fn end(&self, sender: &SenderKey, now: DateTime<Utc>) -> Result<bool, ReviewError> {
        let mut tx = self.pool.begin().await?;
        let ends: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT banned_until FROM senders
             WHERE app_id = $1 AND id = $2 AND state = 'banned' AND banned_until <= $3
             FOR UPDATE SKIP LOCKED",
        )
        .bind(sender.app_id)
        .bind(&sender.id)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(ends) = ends else {
            return Ok(false);
        };
        // An appeal still open becomes moot with the state (migration 0019's trigger). The
        // end of a ban is a lift: a ban within 30 days after is a repeat offence.
        sqlx::query(
            "UPDATE senders SET state = 'active', banned_until = NULL, version = version + 1,
                 state_changed_at = now(), state_changed_by = $3, review_requested_at = NULL,
                 held_stored = 0, lifted_at = now()
             WHERE app_id = $1 AND id = $2",
        )
        .bind(sender.app_id)
        .bind(&sender.id)
        .bind(audit::SYSTEM)
        .execute(&mut *tx)
        .await?;
        super::close_flags(&mut tx, sender).await?;
        // Held invites are stale by now: discarded, never sent.
        let discarded =
            discard_or_release(&mut tx, sender, "discarded", audit::SYSTEM, Duration::ZERO).await?;
        audit::write(
            &mut *tx,
            Entry {
                sender: Some(sender),
                detail: json!({"from": "banned", "to": "active", "invites": discarded,
                    "banned_until": ends}),
                ..Entry::new(audit::SYSTEM, "ban_expired")
            },
        )
        .await?;
        let data = json!({"previous_state": "banned", "state": "active", "reason": "expired"});
        super::announce(&mut tx, sender, EventType::SenderLifted, data).await?;
        tx.commit().await?;
        let late = (Utc::now() - ends).to_std().unwrap_or_default();
        self.metrics.ban_expiry_lag(late);
        Ok(true)
    }
}
