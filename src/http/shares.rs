//! What one holder (a client address group, an API key) has of a budget at once, each up to a
//! cap, so that no one holder takes what the budget keeps for all.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts by holder.
#[derive(Clone, Debug)]
pub struct Shares<K>(Arc<Mutex<HashMap<K, usize>>>);

impl<K> Default for Shares<K> {
    fn default() -> Self {
        Shares(Arc::default())
    }
}

impl<K: Hash + Eq + Copy> Shares<K> {
    /// Counts one in for `holder`, unless it already holds `cap`.
    pub fn take(&self, holder: K, cap: usize) -> Option<Share<K>> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(holder).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Share {
            shares: self.clone(),
            holder,
        })
    }
}

/// One unit of a holder's share, counted out when dropped.
pub struct Share<K: Hash + Eq + Copy> {
    shares: Shares<K>,
    holder: K,
}

impl<K: Hash + Eq + Copy> Drop for Share<K> {
    fn drop(&mut self) {
        let mut counts = self.shares.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.holder) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_takes_up_to_its_cap_and_gives_back_what_it_drops() {
        let shares = Shares::default();
        let held: Vec<_> = (0..3).filter_map(|_| shares.take('a', 3)).collect();
        assert_eq!(held.len(), 3);
        assert!(shares.take('a', 3).is_none(), "beyond the cap");
        assert!(shares.take('b', 3).is_some(), "another holder");
        drop(held);
        assert!(shares.take('a', 3).is_some());
        assert!(
            shares.0.lock().map(|c| c.is_empty()).unwrap_or(false),
            "holders with nothing held are forgotten"
        );
    }
}
