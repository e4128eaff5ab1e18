//! The in-process store: the algorithms' state machines in a map behind a mutex.
//!
//! For tests, simulations, backtests and a single instance without Redis (`REDIS_URL=memory://`).
//! Idle keys are forgotten after the same time-to-live the Redis scripts set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::algorithms::State;
use super::{Check, Decision, LimitKey, Quota, now_ms};

/// Sweep expired keys once every this many writes, so memory stays bounded without a timer.
const SWEEP_EVERY: u64 = 4096;

#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    keys: HashMap<LimitKey, Entry>,
    writes: u64,
}

struct Entry {
    state: State,
    expires_at_ms: u64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check_batch(&self, checks: &[Check<'_>], at_ms: Option<u64>) -> Vec<Decision> {
        let now = at_ms.unwrap_or_else(now_ms);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        checks.iter().map(|c| inner.decide(c, now)).collect()
    }

    pub fn clear(&self, keys: &[(&LimitKey, &Quota)]) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, _) in keys {
            inner.keys.remove(*key);
        }
    }

    /// Number of keys held (expired ones included until the next sweep).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn decide(&mut self, check: &Check<'_>, now: u64) -> Decision {
        let (key, q, cost, member) = (check.key, check.quota, check.cost, check.member);
        let live = self.keys.get_mut(key).filter(|e| e.expires_at_ms > now);
        if cost == 0 {
            // A read changes nothing, as in Redis.
            let mut state = live.map_or_else(|| State::new(q.algorithm), |e| e.state.clone());
            return state.decide_member(q, cost, member, now);
        }
        if let Some(entry) = live {
            let decision = entry.state.decide_member(q, cost, member, now);
            entry.expires_at_ms = now + entry.state.ttl_ms(q);
            return decision;
        }
        let mut state = State::new(q.algorithm);
        let decision = state.decide_member(q, cost, member, now);
        let expires_at_ms = now + state.ttl_ms(q);
        self.keys.insert(
            key.clone(),
            Entry {
                state,
                expires_at_ms,
            },
        );
        self.writes += 1;
        if self.writes.is_multiple_of(SWEEP_EVERY) {
            self.keys.retain(|_, e| e.expires_at_ms > now);
        }
        decision
    }
}
