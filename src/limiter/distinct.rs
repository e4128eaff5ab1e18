//! Distinct members (recipients, domains) in a sliding window, counted exactly up to the limit:
//! the mirror of `lua/distinct.lua`, same decisions and same integer arithmetic (the script
//! stores each sub-window modulo 128 to save bytes; this keeps it whole).
//!
//! Each member is kept with the sub-window (1/60 of the window) it was last seen in; it counts
//! while that is one of the 61 sub-windows `head-60 ..= head` (the `harsh` edge: never more
//! lenient than an exact window). At most `limit + 1` members are kept, so memory per key is
//! bounded: past that the count is "over", whatever the true number.

use std::collections::HashMap;

use super::{Decision, Quota, SUB_WINDOWS, to_ms};

/// Sub-windows a sighting stays in the window.
const SPAN: i64 = SUB_WINDOWS as i64 + 1;

/// The largest limit a distinct rule may have (the script packs the count into 12 bits).
pub const MAX_DISTINCT_LIMIT: u64 = 4000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Distinct {
    /// Members by the sub-window they were last seen in.
    members: HashMap<u32, i64>,
    /// The newest sub-window; `None` while the key does not exist.
    head: Option<i64>,
}

impl Distinct {
    /// Counts `member` at `now_ms` (a cost of 0 only reads) and answers.
    pub fn decide(&mut self, q: &Quota, member: u32, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms as i64;
        let limit = q.limit;
        let mut a = now_ms as i64 * SUB_WINDOWS as i64;
        let mut i = a.div_euclid(w);
        let existed = self.head.is_some();
        let head = self.head.unwrap_or(i);
        // A late event (time stepped back) is judged at the newest sub-window.
        if head > i {
            i = head;
            a = i * w;
        }
        let first = i - SPAN + 1;
        let seen = self.members.get(&member).copied().filter(|&s| s >= first);
        // When the head moves, members that left the window stop counting; an attempt deletes
        // them (a read changes nothing).
        if cost > 0 && existed && head < i {
            self.members.retain(|_, &mut last| last >= first);
        }
        let count = self.members.values().filter(|&&last| last >= first).count() as u64;
        let fresh = cost > 0 && seen.is_none();
        let mut after = count + u64::from(fresh);
        let allowed = after <= limit;
        let keep = fresh && (allowed || (q.count_over_limit && count == limit));
        if fresh && !keep {
            after = count;
        }
        if cost > 0 && (keep || seen.is_some() || existed) {
            if keep || seen.is_some() {
                self.members.insert(member, i);
            }
            self.head = Some(i);
        }
        let reset = if after > 0 {
            to_ms((i + SPAN) * w - a)
        } else {
            0
        };
        let retry = if allowed {
            0
        } else {
            let oldest = self
                .members
                .values()
                .copied()
                .filter(|&last| last >= first)
                .min()
                .unwrap_or(i)
                .min(i);
            to_ms((oldest + SPAN) * w - a).max(1)
        };
        Decision {
            allowed,
            count: after,
            limit,
            remaining: limit.saturating_sub(after),
            retry_after_ms: retry,
            reset_after_ms: reset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Algorithm;

    fn quota(limit: u64, over: bool) -> Quota {
        let mut q = Quota::new(limit, 3600, Algorithm::Distinct);
        q.count_over_limit = over;
        q
    }

    #[test]
    fn the_same_members_again_and_again_stay_few() {
        let q = quota(3, true);
        let mut d = Distinct::default();
        for n in 0..150u64 {
            let got = d.decide(&q, (n % 3) as u32, 1, 1_000_000 + n * 1000);
            assert!(got.allowed, "invite {n}");
            assert_eq!(got.count, (n + 1).min(3));
        }
        let fourth = d.decide(&q, 99, 1, 2_000_000);
        assert!(!fourth.allowed);
        assert_eq!(fourth.count, 4);
    }

    #[test]
    fn memory_is_bounded_and_members_leave_with_the_window() {
        let q = quota(5, true);
        let mut d = Distinct::default();
        for n in 0..1000u64 {
            d.decide(&q, n as u32, 1, 10_000 + n);
        }
        assert_eq!(d.members.len(), 6, "limit + 1 members at most");
        // An hour and a minute later every sighting has left the window.
        let later = d.decide(&q, 5000, 1, 10_000 + 3_661_000 + 1000);
        assert!(later.allowed);
        assert_eq!(later.count, 1);
    }

    #[test]
    fn a_rule_that_does_not_count_on_keeps_no_denied_member() {
        let q = quota(2, false);
        let mut d = Distinct::default();
        assert!(d.decide(&q, 1, 1, 0).allowed);
        assert!(d.decide(&q, 2, 1, 0).allowed);
        let denied = d.decide(&q, 3, 1, 0);
        assert!(!denied.allowed);
        assert_eq!(denied.count, 2, "a denied member is not counted");
        assert!(denied.retry_after_ms > 0);
        assert!(
            d.decide(&q, 1, 1, 0).allowed,
            "a member seen before still passes"
        );
    }

    #[test]
    fn a_read_counts_without_changing_anything() {
        let q = quota(2, true);
        let mut d = Distinct::default();
        d.decide(&q, 1, 1, 0);
        let before = d.clone();
        let read = d.decide(&q, 42, 0, 10);
        assert_eq!((read.count, read.allowed), (1, true));
        assert_eq!(d, before);
    }

    #[test]
    fn a_limit_of_zero_is_exceeded_by_any_member() {
        let q = quota(0, true);
        let mut d = Distinct::default();
        let first = d.decide(&q, 7, 1, 0);
        assert!(!first.allowed);
        assert_eq!(first.count, 1);
    }
}
