//! The `global` scope without a hot key. Every invite of every instance would otherwise run a
//! script on the one Redis key of a global rule, pinning one cluster shard and queueing every
//! request behind it. Instead each instance counts global invites in process and flushes its
//! count to Redis every `interval`, as one decision whose cost is the batch; Redis answers with
//! everyone's count in the window, which the next local decisions add to.
//!
//! Accuracy: an instance sees its own invites at once and the other instances' invites at most
//! one interval (plus a round trip) late, so a global limit can be overshot by at most what the
//! other instances admit in one interval; a fresh instance starts from zero until its first
//! flush. Window expiry is applied by the flush too, so the count an instance decides on is at
//! most one interval old. Replays with their own timestamps (deferred invites) count in Redis
//! directly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::limiter::{Decision, LimitKey, Limiter, LimiterError, MAX_COST, Quota};

#[derive(Clone)]
pub struct GlobalCounts {
    interval: Duration,
    entries: Arc<Mutex<HashMap<LimitKey, Entry>>>,
}

struct Entry {
    quota: Quota,
    /// Counted here since the last flush.
    pending: u64,
    /// Everyone's count in the window, as of the last flush.
    flushed: u64,
    reset_after_ms: u64,
}

impl GlobalCounts {
    pub fn new(interval: Duration) -> Self {
        GlobalCounts {
            interval,
            entries: Arc::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<LimitKey, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one invite under a global rule and decides on everyone's count as known here.
    pub fn count(&self, key: &LimitKey, quota: &Quota) -> Decision {
        let mut entries = self.entries();
        let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
            quota: *quota,
            pending: 0,
            flushed: 0,
            reset_after_ms: quota.window_ms,
        });
        // A rule edited in place keeps its counts (the key names the window and algorithm).
        entry.quota = *quota;
        let allowed = entry.flushed + entry.pending < quota.limit;
        if allowed || quota.count_over_limit {
            entry.pending += 1;
        }
        let count = entry.flushed + entry.pending;
        Decision {
            allowed,
            count,
            limit: quota.limit,
            remaining: quota.limit.saturating_sub(count),
            // Only the flush learns when the window frees up; one interval is the honest answer.
            retry_after_ms: if allowed {
                0
            } else {
                self.interval.as_millis() as u64
            },
            reset_after_ms: entry.reset_after_ms,
        }
    }

    /// Sends what was counted since the last flush and learns everyone's count. A failed flush
    /// keeps its counts for the next one.
    pub async fn flush(&self, limiter: &Limiter) -> Result<(), LimiterError> {
        let batch: Vec<(LimitKey, Quota, u64)> = self
            .entries()
            .iter_mut()
            .map(|(key, e)| (key.clone(), e.quota, std::mem::take(&mut e.pending)))
            .collect();
        let mut failure = None;
        for (key, quota, pending) in batch {
            // Every counted invite goes in, even past the limit: it was decided already.
            let mut counted = quota;
            counted.count_over_limit = true;
            let mut left = pending;
            let mut answer = None;
            // A cost of 0 still reads the window, so idle rules learn about other instances.
            loop {
                let cost = left.min(MAX_COST);
                match limiter.check(&key, &counted, cost, None).await {
                    Ok(d) => {
                        left -= cost;
                        answer = Some(d);
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
                if left == 0 {
                    break;
                }
            }
            let mut entries = self.entries();
            if let Some(e) = entries.get_mut(&key) {
                e.pending += left;
                if let Some(d) = answer {
                    e.flushed = d.count;
                    e.reset_after_ms = d.reset_after_ms;
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Flushes every interval until `stop` is cancelled. The last flush, once requests in
    /// flight have finished, is the caller's.
    pub async fn run(self, limiter: Limiter, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            if let Err(e) = self.flush(&limiter).await {
                tracing::debug!(error = %e, "global counts not flushed; kept for the next try");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GlobalCounts;
    use crate::limiter::{Algorithm, EdgeMode, KeyPrefix, Limiter, MemoryStore, Quota};
    use std::time::Duration;

    /// Two instances on one store: each decides on its own count plus what the other flushed.
    #[tokio::test]
    async fn instances_learn_each_others_counts_at_each_flush() {
        let store = Limiter::Memory(MemoryStore::new());
        let quota = Quota::new(10, 60, Algorithm::HashCounters(EdgeMode::Harsh));
        let key = KeyPrefix::default().key("global", "global-minute", &quota);
        let (a, b) = (
            GlobalCounts::new(Duration::from_millis(100)),
            GlobalCounts::new(Duration::from_millis(100)),
        );
        for _ in 0..6 {
            assert!(a.count(&key, &quota).allowed);
        }
        for _ in 0..3 {
            assert!(b.count(&key, &quota).allowed);
        }
        a.flush(&store).await.expect("flush a");
        b.flush(&store).await.expect("flush b");
        a.flush(&store).await.expect("a reads b's");
        // 9 counted in all: one more passes on either, the next is over.
        let d = a.count(&key, &quota);
        assert!(d.allowed);
        assert_eq!(d.count, 10);
        let d = a.count(&key, &quota);
        assert!(!d.allowed, "{d:?}");
        assert_eq!(
            d.count, 10,
            "a refused attempt is not counted by a reject-like rule"
        );
        let read = store.check(&key, &quota, 0, None).await.expect("read");
        assert_eq!(read.count, 9, "the store has what was flushed");
    }
}
