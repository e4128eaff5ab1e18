//! The algorithms as pure state machines over explicit millisecond timestamps.
//!
//! Each one is the exact mirror of its Lua script in `lua/`: same state, same integer arithmetic,
//! same answers. The in-process store and the simulations run them directly; the Redis store runs
//! the scripts. Timestamps earlier than the state's newest one (late events in a replay) are judged
//! at the newest one.

use super::distinct::Distinct;
use super::{Algorithm, Decision, EdgeMode, Quota, SUB_WINDOWS, to_ms};

/// Ring slots of `hash_counters`: the current sub-window and the 59 before it. The 61st, oldest
/// sub-window the window's edge cuts through is kept beside the ring.
pub const RING: i64 = SUB_WINDOWS as i64;

/// The state of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Boxed: its ring is far larger than the other states.
    HashCounters(Box<HashCounters>),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    SlidingLog(SlidingLog),
    Distinct(Distinct),
}

impl State {
    pub fn new(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::HashCounters(_) => State::HashCounters(Box::default()),
            Algorithm::FixedWindow => State::FixedWindow(FixedWindow::default()),
            Algorithm::SlidingWindow => State::SlidingWindow(SlidingWindow::default()),
            Algorithm::TokenBucket { .. } => State::TokenBucket(TokenBucket::default()),
            Algorithm::SlidingLog => State::SlidingLog(SlidingLog::default()),
            Algorithm::Distinct => State::Distinct(Distinct::default()),
        }
    }

    /// Counts `cost` at `now_ms` and answers. A cost of 0 only reads.
    pub fn decide(&mut self, q: &Quota, cost: u64, now_ms: u64) -> Decision {
        self.decide_member(q, cost, None, now_ms)
    }

    /// As [`State::decide`], with the member a distinct count counts; without one, a distinct
    /// count is only read.
    pub fn decide_member(
        &mut self,
        q: &Quota,
        cost: u64,
        member: Option<u32>,
        now_ms: u64,
    ) -> Decision {
        let decision = match (self, q.algorithm) {
            (State::Distinct(s), Algorithm::Distinct) => match member {
                Some(m) => s.decide(q, m, cost, now_ms),
                None => s.decide(q, 0, 0, now_ms),
            },
            (State::HashCounters(s), Algorithm::HashCounters(edge)) => {
                s.decide(q, edge, cost, now_ms)
            }
            (State::FixedWindow(s), _) => s.decide(q, cost, now_ms),
            (State::SlidingWindow(s), _) => s.decide(q, cost, now_ms),
            (State::TokenBucket(s), Algorithm::TokenBucket { strict }) => {
                s.decide(q, strict, cost, now_ms)
            }
            (State::SlidingLog(s), _) => s.decide(q, cost, now_ms),
            (state, algorithm) => {
                // Keys name their algorithm, so a state never meets another algorithm's quota;
                // should it happen, start over rather than misread.
                *state = State::new(algorithm);
                state.decide_member(q, cost, member, now_ms)
            }
        };
        q.reported(decision)
    }

    /// How long the Redis script keeps the key after a write at `now_ms`: the in-process store
    /// forgets idle keys after the same time.
    pub fn ttl_ms(&self, q: &Quota) -> u64 {
        let w = q.window_ms;
        match self {
            State::HashCounters(_) | State::Distinct(_) => {
                (w * (SUB_WINDOWS + 1)).div_ceil(SUB_WINDOWS)
            }
            State::FixedWindow(_) | State::SlidingLog(_) => w,
            State::SlidingWindow(_) => 2 * w,
            State::TokenBucket(b) => w.max(b.used.div_ceil(q.limit)) + 1,
        }
    }
}

fn decision(q: &Quota, allowed: bool, count: u64, retry_after_ms: u64, reset: u64) -> Decision {
    Decision {
        allowed,
        count,
        limit: q.limit,
        remaining: q.limit.saturating_sub(count),
        retry_after_ms,
        reset_after_ms: reset,
    }
}

/// Whether the attempt is written: allowed ones always, denied ones when the rule says so. A
/// cost of 0 is a read.
fn records(q: &Quota, allowed: bool, cost: u64) -> bool {
    cost > 0 && (allowed || q.count_over_limit)
}

/// Figma's counters: 60 sub-windows per window, with a running total corrected as sub-windows
/// leave, so a decision touches only what changed. The ring holds sub-windows `head-59 ..= head`;
/// `oldest` holds sub-window `head-60`, which shares its ring slot with the head.
///
/// Time is measured in "a-units" (`ms × 60`) so that a sub-window is exactly `window_ms` a-units
/// long for any window, and all arithmetic stays in integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashCounters {
    slots: [u64; RING as usize],
    oldest: u64,
    total: u64,
    /// Newest sub-window index seen.
    head: Option<i64>,
}

impl Default for HashCounters {
    fn default() -> Self {
        HashCounters {
            slots: [0; RING as usize],
            oldest: 0,
            total: 0,
            head: None,
        }
    }
}

fn ring_slot(j: i64) -> usize {
    j.rem_euclid(RING) as usize
}

impl HashCounters {
    /// The count of sub-window `j`, zero outside the window.
    fn value(&self, j: i64, head: i64) -> u64 {
        if j == head - RING {
            self.oldest
        } else if j > head || j < head - RING {
            0
        } else {
            self.slots[ring_slot(j)]
        }
    }

    fn decide(&mut self, q: &Quota, edge: EdgeMode, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms as i64;
        let limit = q.limit;
        let mut a = now_ms as i64 * SUB_WINDOWS as i64;
        let i = a.div_euclid(w);
        let head = match self.head {
            None => i,
            Some(h) if i > h => {
                if i - h > RING {
                    *self = HashCounters::default();
                } else {
                    // Sub-windows h-60 ..= i-61 leave; i-60 becomes the oldest and gives its
                    // slot to the new head.
                    self.total -= self.oldest;
                    for j in h - RING + 1..=i - RING - 1 {
                        let s = ring_slot(j);
                        self.total -= self.slots[s];
                        self.slots[s] = 0;
                    }
                    self.oldest = std::mem::take(&mut self.slots[ring_slot(i)]);
                }
                i
            }
            Some(h) => {
                if i < h {
                    a = h * w; // a late event is judged at the start of the newest sub-window
                }
                h
            }
        };
        self.head = Some(head);
        let x = a - head * w;
        let count = match edge {
            EdgeMode::Harsh => self.total,
            EdgeMode::Lenient => self.total - self.oldest,
            EdgeMode::Weighted => self.total - (self.oldest as i64 * x / w) as u64,
        };
        let allowed = count + cost <= limit;
        // A late event older than the window has already left it: it is not written.
        let recorded = records(q, allowed, cost) && i >= head - RING;
        let mut count_after = count;
        if recorded {
            if i == head - RING {
                self.oldest += cost;
            } else {
                self.slots[ring_slot(i)] += cost;
            }
            self.total += cost;
            count_after += cost;
        }
        if self.total == 0 {
            self.head = None;
        }
        let retry = if allowed {
            0
        } else if cost > limit {
            q.window_ms
        } else {
            let at = self.retry_at(edge, head, w, limit, cost);
            to_ms(at - a)
        };
        let reset = if self.total == 0 {
            0
        } else {
            // The newest sub-window with a count leaves last.
            let newest = (head - RING..=head)
                .rev()
                .find(|&j| self.value(j, head) > 0)
                .unwrap_or(head);
            let span = if edge == EdgeMode::Lenient {
                RING
            } else {
                RING + 1
            };
            to_ms((newest + span) * w - a)
        };
        decision(q, allowed, count_after, retry, reset)
    }

    /// The first a-unit time at which `cost` fits, if nothing else arrives.
    fn retry_at(&self, edge: EdgeMode, head: i64, w: i64, limit: u64, cost: u64) -> i64 {
        let room = (limit - cost) as i64;
        match edge {
            EdgeMode::Harsh | EdgeMode::Lenient => {
                // Counted at sub-window k: harsh from k-60, lenient from k-59.
                let lag = if edge == EdgeMode::Harsh {
                    RING + 1
                } else {
                    RING
                };
                let mut sum = self.total as i64;
                let mut k = head;
                if edge == EdgeMode::Lenient {
                    sum -= self.oldest as i64;
                }
                while sum > room {
                    k += 1;
                    sum -= self.value(k - lag, head) as i64;
                }
                k * w
            }
            EdgeMode::Weighted => {
                // In sub-window k the count is A + B - floor(B*x/w): A the sub-windows fully
                // inside, B the oldest one, x the offset into k.
                let mut full = self.total as i64 - self.oldest as i64;
                let mut k = head;
                loop {
                    let oldest = self.value(k - RING, head) as i64;
                    let need = full + oldest - room;
                    if need <= 0 {
                        return k * w;
                    }
                    if oldest > 0 && need <= oldest {
                        let x = (need * w + oldest - 1) / oldest;
                        if x < w {
                            return k * w + x;
                        }
                    }
                    k += 1;
                    full -= self.value(k - RING, head) as i64;
                    if k > head + RING + 1 {
                        return k * w; // everything has left by now
                    }
                }
            }
        }
    }
}

/// One counter per fixed window, reset when the window changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FixedWindow {
    window: Option<u64>,
    count: u64,
}

impl FixedWindow {
    fn decide(&mut self, q: &Quota, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms;
        let mut t = now_ms;
        let mut idx = t / w;
        match self.window {
            Some(cur) if cur > idx => {
                idx = cur;
                t = cur * w;
            }
            Some(cur) if cur == idx => {}
            _ => self.count = 0,
        }
        self.window = Some(idx);
        let allowed = self.count + cost <= q.limit;
        if records(q, allowed, cost) {
            self.count += cost;
        }
        let reset = (idx + 1) * w - t;
        let retry = match (allowed, cost > q.limit) {
            (true, _) => 0,
            (false, true) => w,
            (false, false) => reset,
        };
        let reset = if self.count == 0 { 0 } else { reset };
        decision(q, allowed, self.count, retry, reset)
    }
}

/// The sliding-window counter: this window's count plus the previous one's, weighted by how
/// much of it the sliding window still covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindow {
    window: Option<u64>,
    current: u64,
    previous: u64,
}

impl SlidingWindow {
    fn decide(&mut self, q: &Quota, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms;
        let mut t = now_ms;
        let mut idx = t / w;
        match self.window {
            Some(cur) if cur > idx => {
                idx = cur;
                t = cur * w;
            }
            Some(cur) if cur == idx => {}
            Some(cur) if cur + 1 == idx => {
                self.previous = self.current;
                self.current = 0;
            }
            _ => {
                self.previous = 0;
                self.current = 0;
            }
        }
        self.window = Some(idx);
        let x = t - idx * w;
        let count = self.current + self.previous - self.previous * x / w;
        let allowed = count + cost <= q.limit;
        let mut count_after = count;
        if records(q, allowed, cost) {
            self.current += cost;
            count_after += cost;
        }
        let retry = if allowed {
            0
        } else if cost > q.limit {
            w
        } else {
            self.retry_at(idx, w, q.limit - cost) - t
        };
        let reset = if self.current > 0 {
            (idx + 2) * w - t
        } else if self.previous > 0 {
            (idx + 1) * w - t
        } else {
            0
        };
        decision(q, allowed, count_after, retry, reset)
    }

    fn retry_at(&self, idx: u64, w: u64, room: u64) -> u64 {
        // This window: current + previous*(1 - x/w) must fall to `room`.
        let need = (self.current + self.previous).saturating_sub(room);
        if self.current <= room && self.previous > 0 && need <= self.previous {
            let x = (need * w).div_ceil(self.previous);
            if x < w {
                return idx * w + x;
            }
        }
        // Next window: this window's count becomes the weighted one.
        let need = self.current.saturating_sub(room);
        if need == 0 {
            return (idx + 1) * w;
        }
        let x = (need * w).div_ceil(self.current);
        if x < w {
            (idx + 1) * w + x
        } else {
            (idx + 2) * w
        }
    }
}

/// A token bucket of `limit` tokens refilled at `limit` per window. `used` is the bucket's
/// deficit in token-milliseconds×limit units (`tokens × window_ms`), so refill is exact integer
/// arithmetic: one millisecond gives back `limit` units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenBucket {
    used: u64,
    updated_ms: u64,
}

impl TokenBucket {
    fn decide(&mut self, q: &Quota, strict: bool, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms;
        let limit = q.limit;
        let capacity = limit * w;
        let elapsed = now_ms.saturating_sub(self.updated_ms);
        let refilled = if elapsed >= self.used.div_ceil(limit) {
            0
        } else {
            self.used - elapsed * limit
        };
        let need = cost * w;
        let allowed = refilled + need <= capacity;
        // Strict: a denied attempt forfeits the refill since the last update.
        let base = if strict && !allowed && cost > 0 {
            self.used
        } else {
            refilled
        };
        let used = if records(q, allowed, cost) {
            base + need
        } else {
            base
        };
        self.used = used;
        self.updated_ms = self.updated_ms.max(now_ms);
        let retry = if allowed {
            0
        } else if cost > limit {
            w
        } else {
            (used + need - capacity).div_ceil(limit)
        };
        Decision {
            allowed,
            count: used.div_ceil(w),
            limit,
            remaining: capacity.saturating_sub(used) / w,
            retry_after_ms: retry,
            reset_after_ms: used.div_ceil(limit),
        }
    }
}

/// Every counted attempt with its timestamp: exact, and the costliest in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLog {
    /// (timestamp, cost), sorted by timestamp.
    entries: std::collections::VecDeque<(u64, u64)>,
}

impl SlidingLog {
    fn decide(&mut self, q: &Quota, cost: u64, now_ms: u64) -> Decision {
        let w = q.window_ms;
        let cutoff = now_ms.saturating_sub(w);
        while self.entries.front().is_some_and(|&(t, _)| t <= cutoff) {
            self.entries.pop_front();
        }
        let count: u64 = self.entries.iter().map(|&(_, c)| c).sum();
        let allowed = count + cost <= q.limit;
        let mut count_after = count;
        if records(q, allowed, cost) {
            let at = self.entries.partition_point(|&(t, _)| t <= now_ms);
            self.entries.insert(at, (now_ms, cost));
            count_after += cost;
        }
        let retry = if allowed {
            0
        } else if cost > q.limit {
            w
        } else {
            // The oldest entries must leave until `cost` fits.
            let mut must_leave = count_after + cost - q.limit;
            let mut at = now_ms;
            for &(t, c) in &self.entries {
                at = t + w;
                if c >= must_leave {
                    break;
                }
                must_leave -= c;
            }
            at.saturating_sub(now_ms)
        };
        let reset = self
            .entries
            .back()
            .map_or(0, |&(t, _)| (t + w).saturating_sub(now_ms));
        decision(q, allowed, count_after, retry, reset)
    }
}
