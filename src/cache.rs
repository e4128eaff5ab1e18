//! In-process copies of rows read on every request (sender states, API keys), kept in step with
//! Postgres by the notifications its triggers send (see [`crate::changes`]).
//!
//! A copy lives at most `ttl`, so a notification lost with a dropped connection costs at most
//! that long. Every invalidation bumps an epoch, and a value read from the database is only kept
//! when no invalidation happened since the read began: a read racing with a change can never
//! store the old value after the change was announced.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub struct TtlCache<K, V> {
    inner: Arc<Inner<K, V>>,
}

struct Inner<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    epoch: AtomicU64,
    ttl: Duration,
    capacity: usize,
}

impl<K, V> Clone for TtlCache<K, V> {
    fn clone(&self) -> Self {
        TtlCache {
            inner: self.inner.clone(),
        }
    }
}

/// Taken before a database read; hands the value to [`TtlCache::store`] afterwards.
pub struct Ticket(u64);

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        TtlCache {
            inner: Arc::new(Inner {
                entries: Mutex::new(HashMap::new()),
                epoch: AtomicU64::new(0),
                ttl,
                capacity,
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<K, (V, Instant)>> {
        // A panic while holding the lock leaves a map that is still valid.
        self.inner
            .entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cached value, or a ticket for reading it from the database.
    pub fn get<Q>(&self, key: &Q) -> Result<V, Ticket>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let ticket = Ticket(self.inner.epoch.load(Ordering::Acquire));
        match self.entries().get(key) {
            Some((value, at)) if at.elapsed() < self.inner.ttl => Ok(value.clone()),
            _ => Err(ticket),
        }
    }

    /// Keeps a value read with `ticket`, unless something was invalidated since.
    pub fn store(&self, ticket: Ticket, key: K, value: V) {
        let mut entries = self.entries();
        if self.inner.epoch.load(Ordering::Acquire) != ticket.0 {
            return;
        }
        if entries.len() >= self.inner.capacity {
            // Bounded memory without bookkeeping: start over (a cold read per key follows).
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    /// Keeps a value known to be newer than any read in flight, which is then not kept.
    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries();
        self.inner.epoch.fetch_add(1, Ordering::AcqRel);
        if entries.len() >= self.inner.capacity {
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    pub fn remove<Q>(&self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut entries = self.entries();
        self.inner.epoch.fetch_add(1, Ordering::AcqRel);
        entries.remove(key);
    }

    pub fn clear(&self) {
        let mut entries = self.entries();
        self.inner.epoch.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::TtlCache;
    use std::time::Duration;

    #[test]
    fn a_read_that_raced_with_an_invalidation_is_not_kept() {
        let cache: TtlCache<String, u8> = TtlCache::new(Duration::from_secs(60), 10);
        let ticket = cache.get("a").expect_err("empty");
        cache.remove("a");
        cache.store(ticket, "a".into(), 1);
        assert!(cache.get("a").is_err(), "the stale value was dropped");
        let ticket = cache.get("a").expect_err("still empty");
        cache.store(ticket, "a".into(), 2);
        assert_eq!(cache.get("a").ok(), Some(2));
    }

    #[test]
    fn values_expire_and_the_size_is_bounded() {
        let cache: TtlCache<u32, u32> = TtlCache::new(Duration::from_millis(30), 3);
        for n in 0..3 {
            let t = cache.get(&n).expect_err("empty");
            cache.store(t, n, n);
        }
        assert_eq!(cache.get(&2).ok(), Some(2));
        let t = cache.get(&3).expect_err("empty");
        cache.store(t, 3, 3);
        assert!(cache.get(&0).is_err(), "full: started over");
        assert_eq!(cache.get(&3).ok(), Some(3));
        std::thread::sleep(Duration::from_millis(40));
        assert!(cache.get(&3).is_err(), "expired");
    }
}
