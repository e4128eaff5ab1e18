//! The limiter's clock: this instance's clock set to Redis `TIME`, re-read once a second, so
//! every script call carries its timestamp instead of asking Redis for the time (`TIME` was
//! about a fifth of a decision's cost in Redis).
//!
//! Accuracy: the offset is Redis' time less the midpoint of the round trip that read it, so it
//! is off by at most half that round trip (tens of microseconds on loopback, well under a
//! millisecond in one data centre). Two instances disagree by at most the sum of their halves;
//! between reads a clock drifts by parts per million. A decision stamped a little before one
//! already recorded is a late event, which every algorithm handles (`algorithms.rs`). When
//! Redis cannot be reached the last offset stays in use.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{LimiterError, RedisConnection};

/// How often the offset is measured again.
const RESYNC: Duration = Duration::from_secs(1);

#[derive(Clone)]
pub struct Clock {
    /// Redis' time less this process's, in microseconds.
    offset_us: Arc<AtomicI64>,
}

impl Clock {
    /// A clock set to the server's `TIME` now and every second while the clock is in use.
    pub async fn synced_to(conn: &RedisConnection) -> Result<Clock, LimiterError> {
        let clock = Clock {
            offset_us: Arc::new(AtomicI64::new(measure(conn).await?)),
        };
        let offset = Arc::downgrade(&clock.offset_us);
        tokio::spawn(resync(offset, conn.clone()));
        Ok(clock)
    }

    /// Milliseconds since the Unix epoch on Redis' clock.
    pub fn now_ms(&self) -> u64 {
        let local = local_us();
        (local + self.offset_us.load(Ordering::Relaxed)).max(0) as u64 / 1000
    }
}

/// Keeps the offset fresh until every copy of the clock is gone.
async fn resync(offset: Weak<AtomicI64>, conn: RedisConnection) {
    loop {
        tokio::time::sleep(RESYNC).await;
        let Some(offset) = offset.upgrade() else {
            return;
        };
        // A failed read keeps the last offset: the limiter reports Redis' outage itself.
        if let Ok(measured) = measure(&conn).await {
            offset.store(measured, Ordering::Relaxed);
        }
    }
}

/// Redis' time less the midpoint of the round trip that read it.
async fn measure(conn: &RedisConnection) -> Result<i64, LimiterError> {
    let before = local_us();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn.clone()).await?;
    let after = local_us();
    Ok(secs * 1_000_000 + micros - (before + after) / 2)
}

fn local_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
