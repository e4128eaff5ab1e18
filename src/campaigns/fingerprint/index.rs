//! An in-memory LSH index of signatures: an app's standard texts, texts marked benign, and
//! the groups of an offline run (backtests, evaluations).

use std::collections::HashMap;

use super::signature::Signature;

/// Signatures with a value each, found again by a near-duplicate's signature.
pub struct Index<T> {
    entries: Vec<(Signature, T)>,
    /// Band key → the entries that have it, in insertion order.
    bands: HashMap<u64, Vec<usize>>,
}

impl<T> Default for Index<T> {
    fn default() -> Self {
        Index {
            entries: Vec::new(),
            bands: HashMap::new(),
        }
    }
}

impl<T> Index<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, signature: Signature, value: T) {
        let at = self.entries.len();
        for key in signature.bands() {
            self.bands.entry(key).or_default().push(at);
        }
        self.entries.push((signature, value));
    }

    /// The value of the earliest inserted signature that shares a band with `signature`
    /// (a candidate) and [`Signature::matches`] it (confirmed).
    pub fn find(&self, signature: &Signature) -> Option<&T> {
        let mut candidates: Vec<usize> = signature
            .bands()
            .iter()
            .filter_map(|key| self.bands.get(key))
            .flatten()
            .copied()
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().find_map(|at| {
            let (stored, value) = self.entries.get(at)?;
            stored.matches(signature).then_some(value)
        })
    }
}
