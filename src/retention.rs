//! Removal of old rows, so storage and page queries stay bounded however long the service runs.
//!
//! Invites in a final state (sent, failed, suppressed, discarded) older than the retention go,
//! with the decision record they carry, and so do audit entries. Invites still waiting for
//! something (queued, deferred, held for review) stay whatever their age: nothing accepted is
//! dropped unseen. Rows go in small batches, each its own short transaction, with a pause
//! between batches, so the API never waits behind one long delete; `SKIP LOCKED` lets several
//! instances sweep at once without queueing on each other's rows. The batch is picked first
//! (`= ANY(ARRAY(...))`), so the delete finds its rows by primary key instead of joining.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// One batch of old invites in a final state, oldest first (so the age index serves it).
pub const DELETE_INVITES: &str = "DELETE FROM invites WHERE id = ANY(ARRAY(
         SELECT id FROM invites
         WHERE created_at < now() - make_interval(days => $1)
           AND status IN ('sent', 'failed', 'suppressed', 'discarded')
         ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED))";

/// One batch of old audit entries, oldest first.
pub const DELETE_AUDIT: &str = "DELETE FROM audit_log WHERE id = ANY(ARRAY(
         SELECT id FROM audit_log WHERE at < now() - make_interval(days => $1)
         ORDER BY at LIMIT $2 FOR UPDATE SKIP LOCKED))";

#[derive(Clone)]
pub struct Retention {
    pub pool: PgPool,
    pub metrics: Metrics,
    pub days: i32,
    pub batch: i64,
    /// Between two batches.
    pub pause: Duration,
}

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub invites: u64,
    pub audit_entries: u64,
}

impl Retention {
    /// Removes everything past the retention, a batch at a time.
    pub async fn sweep(&self) -> Result<Swept, sqlx::Error> {
        Ok(Swept {
            invites: self.drain(DELETE_INVITES, "invites").await?,
            audit_entries: self.drain(DELETE_AUDIT, "audit_log").await?,
        })
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
                        invites = s.invites,
                        audit_entries = s.audit_entries,
                        "retention sweep"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "retention sweep failed; next one retries"),
            }
        }
    }
}
