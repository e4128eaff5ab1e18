//! Naive reference models of every algorithm: they keep every recorded event and recompute each
//! answer from scratch (retry times by search), so they share no code or shortcuts with the
//! engine. Timestamps must not decrease.

use sendguard::limiter::{Algorithm, Decision, EdgeMode, Quota};

pub struct Reference {
    quota: Quota,
    /// Recorded (timestamp ms, cost).
    events: Vec<(u64, u64)>,
    /// Token bucket: available tokens × window_ms, and the last update.
    bucket: Option<(i128, u64)>,
}

impl Reference {
    pub fn new(quota: Quota) -> Self {
        Reference {
            quota,
            events: Vec::new(),
            bucket: None,
        }
    }

    pub fn decide(&mut self, cost: u64, t: u64) -> Decision {
        let decision = self.decide_with_wait(cost, t);
        if decision.allowed || self.quota.reports_wait {
            decision
        } else {
            Decision {
                retry_after_ms: 0,
                reset_after_ms: 0,
                ..decision
            }
        }
    }

    fn decide_with_wait(&mut self, cost: u64, t: u64) -> Decision {
        if let Algorithm::TokenBucket { strict } = self.quota.algorithm {
            return self.bucket(strict, cost, t);
        }
        let q = self.quota;
        let count = self.count_at(t);
        let allowed = count + cost <= q.limit;
        let recorded = cost > 0 && (allowed || q.count_over_limit);
        if recorded {
            self.events.push((t, cost));
        }
        let count_after = self.count_at(t);
        let retry = if allowed {
            0
        } else if cost > q.limit {
            q.window_ms
        } else {
            self.first_time_fitting(t, q.limit - cost) - t
        };
        let reset = if self.events.iter().any(|&(e, _)| self.counts(e, t)) {
            self.first_time_fitting(t, 0) - t
        } else {
            0
        };
        Decision {
            allowed,
            count: count_after,
            limit: q.limit,
            remaining: q.limit.saturating_sub(count_after),
            retry_after_ms: retry,
            reset_after_ms: reset,
        }
    }

    fn w(&self) -> u64 {
        self.quota.window_ms
    }

    /// Sub-window index of a time: floor(t × 60 / window).
    fn sub(&self, t: u64) -> u64 {
        t * 60 / self.w()
    }

    /// Whether event time `e` still counts in full at time `t` (weighted parts aside).
    fn counts(&self, e: u64, t: u64) -> bool {
        let w = self.w();
        match self.quota.algorithm {
            Algorithm::HashCounters(EdgeMode::Harsh)
            | Algorithm::HashCounters(EdgeMode::Weighted) => self.sub(e) + 60 >= self.sub(t),
            Algorithm::HashCounters(EdgeMode::Lenient) => self.sub(e) + 59 >= self.sub(t),
            Algorithm::FixedWindow => e / w == t / w,
            Algorithm::SlidingWindow => e / w + 1 >= t / w,
            Algorithm::SlidingLog => e + w > t,
            Algorithm::TokenBucket { .. } => unreachable!("token buckets keep no events"),
            Algorithm::Distinct => unreachable!("distinct counts are not volume"),
        }
    }

    /// The count at time `t` from scratch.
    fn count_at(&self, t: u64) -> u64 {
        let w = self.w();
        let sum = |pred: &dyn Fn(u64) -> bool| -> u64 {
            self.events
                .iter()
                .filter(|&&(e, _)| pred(e))
                .map(|&(_, c)| c)
                .sum()
        };
        match self.quota.algorithm {
            Algorithm::HashCounters(EdgeMode::Harsh) => sum(&|e| self.sub(e) + 60 >= self.sub(t)),
            Algorithm::HashCounters(EdgeMode::Lenient) => sum(&|e| self.sub(e) + 59 >= self.sub(t)),
            Algorithm::HashCounters(EdgeMode::Weighted) => {
                let i = self.sub(t);
                let inside = sum(&|e| self.sub(e) + 59 >= i);
                let oldest = sum(&|e| self.sub(e) + 60 == i);
                let x = t * 60 - i * w; // offset into the sub-window, in ms × 60
                inside + oldest - oldest * x / w
            }
            Algorithm::FixedWindow => sum(&|e| e / w == t / w),
            Algorithm::SlidingWindow => {
                let idx = t / w;
                let current = sum(&|e| e / w == idx);
                let previous = sum(&|e| e / w + 1 == idx);
                current + previous - previous * (t - idx * w) / w
            }
            Algorithm::SlidingLog => sum(&|e| e + w > t),
            Algorithm::TokenBucket { .. } => unreachable!("token buckets keep no events"),
            Algorithm::Distinct => unreachable!("distinct counts are not volume"),
        }
    }

    /// The first millisecond after `t` at which the count is at most `room`, found by searching
    /// candidate instants: every point where the count can change, and a binary search inside
    /// each sub-window for the weighted counts, which fall gradually.
    fn first_time_fitting(&self, t: u64, room: u64) -> u64 {
        let w = self.w();
        let step_starts: Vec<u64> = match self.quota.algorithm {
            // Sub-window starts (ceil to whole ms).
            Algorithm::HashCounters(_) => {
                let i = self.sub(t);
                (i..=i + 62).map(|k| (k * w).div_ceil(60)).collect()
            }
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let idx = t / w;
                (idx..=idx + 2).map(|k| k * w).collect()
            }
            Algorithm::Distinct => unreachable!("distinct counts are not volume"),
            Algorithm::SlidingLog => {
                let mut v: Vec<u64> = self.events.iter().map(|&(e, _)| e + w).collect();
                v.sort_unstable();
                v
            }
            Algorithm::TokenBucket { .. } => unreachable!("token buckets keep no events"),
        };
        let gradual = matches!(
            self.quota.algorithm,
            Algorithm::HashCounters(EdgeMode::Weighted) | Algorithm::SlidingWindow
        );
        for (n, &start) in step_starts.iter().enumerate() {
            let lo = start.max(t + 1);
            let next = step_starts.get(n + 1).copied().unwrap_or(start + 1);
            if gradual {
                let hi = next.saturating_sub(1).max(lo);
                if self.count_at(hi) > room {
                    continue;
                }
                let (mut lo, mut hi) = (lo, hi);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if self.count_at(mid) <= room {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                return lo;
            } else if self.count_at(lo) <= room {
                return lo;
            }
        }
        panic!("no time fits room {room} after {t}");
    }

    /// The token bucket as a balance of available tokens × window_ms; counting over the limit
    /// drives it below zero, and refills repay that debt first.
    fn bucket(&mut self, strict: bool, cost: u64, t: u64) -> Decision {
        let q = self.quota;
        let w = q.window_ms as i128;
        let limit = q.limit as i128;
        let full = limit * w;
        let (balance, last) = self.bucket.unwrap_or((full, 0));
        let elapsed = t.saturating_sub(last) as i128;
        let refilled = full.min(balance + elapsed * limit);
        let need = cost as i128 * w;
        let allowed = refilled >= need;
        let recorded = cost > 0 && (allowed || q.count_over_limit);
        let mut after = if strict && !allowed && cost > 0 {
            balance
        } else {
            refilled
        };
        if recorded {
            after -= need;
        }
        if cost > 0 {
            self.bucket = Some((after, t.max(last)));
        }
        let deficit = (full - after) as u64;
        let retry = if allowed {
            0
        } else if cost > q.limit {
            q.window_ms
        } else {
            ((need - after) as u64).div_ceil(q.limit)
        };
        Decision {
            allowed,
            count: deficit.div_ceil(q.window_ms),
            limit: q.limit,
            remaining: (after.max(0) as u64) / q.window_ms,
            retry_after_ms: retry,
            reset_after_ms: deficit.div_ceil(q.limit),
        }
    }
}
