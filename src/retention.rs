//! History that can grow: invites live in weekly partitions (migration 0009), made two weeks
//! ahead by every instance at start and each hour, and removed a week at a time once the whole
//! week is older than the retention.
//!
//! Dropping a week keeps what still waits for something (queued, deferred, held for review):
//! in one transaction the week is detached, its waiting invites are copied back into `invites`
//! (no week covers their time any more, so they land in the default partition with their
//! original `created_at`), and the week is dropped. Nothing accepted is dropped unseen.
//!
//! Rows outside the weeks (the default partition), audit entries, idempotency keys, webhook
//! events delivered or given up, decided flags and outcomes are removed in small batches, each its own short transaction, with a pause between batches, so
//! the API never waits behind one long delete; `SKIP LOCKED` lets several instances sweep at
//! once. The batch is picked first (`= ANY(ARRAY(...))`), so the delete finds its rows by
//! primary key instead of joining.
//!
//! Strikes and appeals are never removed: they are a sender's record, read by the ban ladder
//! (docs/DESIGN.md §3e).

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Weeks made ahead of time.
const WEEKS_AHEAD: i32 = 2;

/// The weeks whose last instant is older than the retention (`$1` days), oldest first.
const OLD_WEEKS: &str = "SELECT c.relname FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'invites'::regclass
         -- The default partition has no date: CASE keeps to_date from ever reading its name.
         AND CASE WHEN c.relname ~ '^invites_w[0-9]{8}$'
             THEN to_date(substr(c.relname, 10), 'YYYYMMDD') + 7
                 <= (now() - make_interval(days => $1)) AT TIME ZONE 'UTC'
             ELSE false END
     ORDER BY c.relname";

/// One batch of old invites in a final state, oldest first (so the age index serves it).
pub const DELETE_INVITES: &str = "DELETE FROM invites WHERE id = ANY(ARRAY(
         SELECT id FROM invites
         WHERE created_at < now() - make_interval(days => $1)
           AND status IN ('sent', 'failed', 'suppressed', 'discarded')
         ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))";

/// One batch of old idempotency keys, oldest first: a key is answered for the retention. The
/// table has no single-column key, so rows are picked by their physical address.
pub const DELETE_KEYS: &str = "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
         SELECT ctid FROM idempotency_keys
         WHERE created_at < now() - make_interval(days => $1)
         ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))";

/// One batch of old audit entries, oldest first.
pub const DELETE_AUDIT: &str = "DELETE FROM audit_log WHERE id = ANY(ARRAY(
         SELECT id FROM audit_log WHERE at < now() - make_interval(days => $1)
         ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED))";

/// One batch of old webhook events delivered or given up; those still to deliver stay.
pub const DELETE_WEBHOOK_EVENTS: &str = "DELETE FROM webhook_events WHERE id = ANY(ARRAY(
         SELECT id FROM webhook_events
         WHERE created_at < now() - make_interval(days => $1)
           AND (delivered_at IS NOT NULL OR gave_up_at IS NOT NULL)
         ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))";

/// One batch of old decided flags. An open flag stays, and so does every flag of a sender
/// shadow-banned or banned now: the evidence of a ban goes only once the ban does.
pub const DELETE_FLAGS: &str = "DELETE FROM flags WHERE id = ANY(ARRAY(
         SELECT f.id FROM flags f
         WHERE f.closed_at IS NOT NULL AND f.last_seen_at < now() - make_interval(days => $1)
           AND NOT EXISTS (SELECT 1 FROM senders s WHERE s.app_id = f.app_id
               AND s.id = f.sender_id AND s.state IN ('shadow_banned', 'banned'))
         ORDER BY f.last_seen_at LIMIT $2 FOR UPDATE OF f SKIP LOCKED))";

/// One batch of old outcomes, counted already; those of a sender shadow-banned or banned now
/// stay with the ban they may back. Picked by physical address, as keys are.
pub const DELETE_OUTCOMES: &str = "DELETE FROM outcomes WHERE ctid = ANY(ARRAY(
         SELECT o.ctid FROM outcomes o
         WHERE o.at < now() - make_interval(days => $1) AND o.counted
           AND NOT EXISTS (SELECT 1 FROM senders s WHERE s.app_id = o.app_id
               AND s.id = o.sender_id AND s.state IN ('shadow_banned', 'banned'))
         ORDER BY o.at LIMIT $2 FOR UPDATE OF o SKIP LOCKED))";

#[derive(Clone)]
pub struct Retention {
    pub pool: PgPool,
    pub metrics: Metrics,
    /// 0 keeps everything (weeks are still made ahead).
    pub days: i32,
    pub batch: i64,
    /// Between two batches.
    pub pause: Duration,
}

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub weeks: u64,
    pub invites: u64,
    pub audit_entries: u64,
    pub keys: u64,
    pub webhook_events: u64,
    pub flags: u64,
    pub outcomes: u64,
}

/// Makes the weeks from the one holding `since` to two weeks ahead.
pub async fn make_weeks(
    pool: &PgPool,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT sendguard_invite_weeks($1, $2)")
        .bind(since)
        .bind(WEEKS_AHEAD)
        .execute(pool)
        .await
        .map(drop)
}

impl Retention {
    /// Makes the weeks ahead, then removes everything past the retention.
    pub async fn sweep(&self) -> Result<Swept, sqlx::Error> {
        make_weeks(&self.pool, chrono::Utc::now()).await?;
        if self.days <= 0 {
            return Ok(Swept::default());
        }
        let (weeks, dropped) = self.drop_weeks().await?;
        Ok(Swept {
            weeks,
            invites: dropped + self.drain(DELETE_INVITES, "invites").await?,
            audit_entries: self.drain(DELETE_AUDIT, "audit_log").await?,
            keys: self.drain(DELETE_KEYS, "idempotency_keys").await?,
            webhook_events: self.drain(DELETE_WEBHOOK_EVENTS, "webhook_events").await?,
            flags: self.drain(DELETE_FLAGS, "flags").await?,
            outcomes: self.drain(DELETE_OUTCOMES, "outcomes").await?,
        })
    }

    /// Drops the weeks past the retention, keeping their waiting invites; answers the weeks
    /// dropped and the invites that went with them.
    async fn drop_weeks(&self) -> Result<(u64, u64), sqlx::Error> {
        let weeks: Vec<String> = sqlx::query_scalar(OLD_WEEKS)
            .bind(self.days)
            .fetch_all(&self.pool)
            .await?;
        let mut removed = 0;
        for week in &weeks {
            // The name comes from the catalogue and matches ^invites_w[0-9]{8}$: safe to quote.
            let mut tx = self.pool.begin().await?;
            sqlx::query(&format!("ALTER TABLE invites DETACH PARTITION \"{week}\""))
                .execute(&mut *tx)
                .await?;
            let kept = sqlx::query(&format!(
                "INSERT INTO invites SELECT * FROM \"{week}\"
                 WHERE status IN ('queued', 'deferred', 'held')"
            ))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            let all: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{week}\""))
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(&format!("DROP TABLE \"{week}\""))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            let gone = (all as u64).saturating_sub(kept);
            self.metrics.retention_removed("invites", gone);
            tracing::info!(week, removed = gone, kept, "dropped a week of invites");
            removed += gone;
        }
        Ok((weeks.len() as u64, removed))
    }

    async fn drain(&self, sql: &str, table: &'static str) -> Result<u64, sqlx::Error> {
        let mut removed = 0;
        // Bounded: a table gaining rows faster than this removes them waits for the next sweep.
        for _ in 0..100_000 {
            let n = sqlx::query(sql)
                .bind(self.days)
                .bind(self.batch)
                .execute(&self.pool)
                .await?
                .rows_affected();
            removed += n;
            self.metrics.retention_removed(table, n);
            if n < self.batch as u64 {
                break;
            }
            tokio::time::sleep(self.pause).await;
        }
        Ok(removed)
    }

    /// Sweeps at start and then every `every` until `stop` is cancelled.
    pub async fn run(self, every: Duration, stop: CancellationToken) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            let swept = tokio::select! {
                swept = self.sweep() => swept,
                _ = stop.cancelled() => return,
            };
            match swept {
                Ok(s) if s != Swept::default() => {
                    tracing::info!(
                        weeks = s.weeks,
                        invites = s.invites,
                        audit_entries = s.audit_entries,
                        idempotency_keys = s.keys,
                        webhook_events = s.webhook_events,
                        flags = s.flags,
                        outcomes = s.outcomes,
                        "retention sweep"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "retention sweep failed; next one retries"),
            }
        }
    }
}
