//! Every algorithm, in process and in Redis, against a naive reference model on random
//! sequences: sub-window boundaries, costs above 1, reads (cost 0), counting over the limit, and
//! windows of a minute, an hour and a day; and every script against its in-process mirror when
//! time steps back.

use std::sync::OnceLock;

use crate::support::reference::Reference;
use proptest::prelude::*;
use sendguard::limiter::algorithms::State;
use sendguard::limiter::{Algorithm, Check, Limiter, Quota, RedisStore};

const WINDOWS: [u64; 3] = [60, 3600, 86_400];
/// A day boundary, so fixed windows of every length line up.
const DAY_START: u64 = 1_700_006_400_000;

#[derive(Debug, Clone)]
struct Case {
    quota: Quota,
    start: u64,
    /// (gap since the previous request in ms, cost)
    ops: Vec<(u64, u64)>,
}

/// Cases per property: `PROPTEST_CASES` raises it for a soak run.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A rule of any algorithm and window with a small limit, counting over it or not, reporting
/// the wait of a denied attempt or not.
fn rule() -> impl Strategy<Value = Quota> {
    (
        0..Algorithm::ALL.len(),
        0..WINDOWS.len(),
        1u64..12,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(a, w, limit, over, wait)| Quota {
            limit,
            window_ms: WINDOWS[w] * 1000,
            algorithm: Algorithm::ALL[a],
            count_over_limit: over,
            reports_wait: wait,
        })
}

/// Mostly single attempts, some heavier ones, some reads.
fn cost() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 8 => Just(1u64), 3 => 2u64..=4]
}

fn case() -> impl Strategy<Value = Case> {
    rule()
        .prop_flat_map(|quota| {
            let w_ms = quota.window_ms;
            let sub = w_ms / 60;
            let gap = prop_oneof![
                6 => 0..(sub / 4).max(2),
                2 => sub.saturating_sub(3)..sub + 3,
                2 => 0..2 * sub,
                1 => 0..2 * w_ms,
            ];
            (
                Just(quota),
                0..w_ms,
                prop::collection::vec((gap, cost()), 1..60),
            )
        })
        .prop_map(|(quota, offset, ops)| Case {
            quota,
            start: DAY_START + offset,
            ops,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(600)))]

    #[test]
    fn in_process_matches_the_reference(case in case()) {
        let mut engine = State::new(case.quota.algorithm);
        let mut reference = Reference::new(case.quota);
        let mut t = case.start;
        for (n, &(gap, cost)) in case.ops.iter().enumerate() {
            t += gap;
            let expected = reference.decide(cost, t);
            // Cost 0 reads: the store runs it on a copy, so the state must not matter here.
            let got = if cost == 0 {
                engine.clone().decide(&case.quota, cost, t)
            } else {
                engine.decide(&case.quota, cost, t)
            };
            prop_assert_eq!(got, expected, "step {} at t={} cost={}", n, t - case.start, cost);
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

fn store() -> &'static RedisStore {
    static STORE: OnceLock<RedisStore> = OnceLock::new();
    STORE.get_or_init(|| runtime().block_on(crate::support::redis_store()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(200)))]

    #[test]
    fn redis_matches_the_reference(case in case()) {
        let limiter = Limiter::Redis(store().clone());
        let prefix = crate::support::unique_prefix("model");
        let key = prefix.key("sender:p", "rule", &case.quota);
        let mut reference = Reference::new(case.quota);
        let mut t = case.start;
        for (n, &(gap, cost)) in case.ops.iter().enumerate() {
            t += gap;
            let expected = reference.decide(cost, t);
            let got = runtime()
                .block_on(limiter.check(&key, &case.quota, cost, Some(t)))
                .expect("decision");
            prop_assert_eq!(got, expected, "step {} at t={} cost={}", n, t - case.start, cost);
        }
        runtime().block_on(limiter.clear(&[(&key, &case.quota)])).expect("clear");
    }
}

/// Like [`case`], but time may step back, as it does when deferred invites are replayed with
/// their own timestamps: a late event is judged at the newest sub-window and written into its
/// own. The reference models need time to move forward, so here each script is held to its
/// in-process mirror, which the first property holds to the reference.
fn late_case() -> impl Strategy<Value = (Quota, u64, Vec<(i64, u64)>)> {
    rule().prop_flat_map(|quota| {
        let w_ms = quota.window_ms as i64;
        let sub = w_ms / 60;
        let step = prop_oneof![
            4 => 0..sub / 2,
            2 => sub - 3..sub + 3,
            2 => -(2 * sub)..0,
            1 => -(2 * w_ms)..2 * w_ms,
        ];
        (
            Just(quota),
            0..quota.window_ms,
            prop::collection::vec((step, cost()), 1..80),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(200)))]

    #[test]
    fn redis_matches_in_process_when_time_steps_back((quota, offset, ops) in late_case()) {
        let limiter = Limiter::Redis(store().clone());
        let key = crate::support::unique_prefix("late").key("sender:p", "rule", &quota);
        let mut engine = State::new(quota.algorithm);
        let mut t = DAY_START + offset;
        for (n, &(step, cost)) in ops.iter().enumerate() {
            t = t.saturating_add_signed(step);
            let expected = if cost == 0 {
                engine.clone().decide(&quota, cost, t)
            } else {
                engine.decide(&quota, cost, t)
            };
            let got = runtime()
                .block_on(limiter.check(&key, &quota, cost, Some(t)))
                .expect("decision");
            prop_assert_eq!(got, expected, "step {} at t={} cost={}", n, t, cost);
        }
        runtime().block_on(limiter.clear(&[(&key, &quota)])).expect("clear");
    }
}

/// A distinct rule: a small limit, windows of every length, counting over the limit or not,
/// reporting the wait of a denied attempt or not.
fn distinct_rule() -> impl Strategy<Value = Quota> {
    (0..WINDOWS.len(), 0u64..6, any::<bool>(), any::<bool>()).prop_map(|(w, limit, over, wait)| {
        Quota {
            limit,
            window_ms: WINDOWS[w] * 1000,
            algorithm: Algorithm::Distinct,
            count_over_limit: over,
            reports_wait: wait,
        }
    })
}

/// (step in ms, which of a few members, cost 0 or 1): few members, so the same ones come back.
/// Half the cases also step back in time.
fn distinct_case() -> impl Strategy<Value = (Quota, u64, Vec<(i64, u32, u64)>)> {
    (distinct_rule(), any::<bool>()).prop_flat_map(|(quota, late)| {
        let w_ms = quota.window_ms as i64;
        let sub = w_ms / 60;
        let back = if late { 1 } else { 0 };
        let step = prop_oneof![
            5 => 0..sub / 2,
            2 => sub - 3..sub + 3,
            2 => 0..2 * w_ms,
            back => -(2 * sub)..0,
        ];
        let cost = prop_oneof![1 => Just(0u64), 6 => Just(1u64)];
        (
            Just(quota),
            0..quota.window_ms,
            prop::collection::vec((step, 0u32..9, cost), 1..80),
        )
    })
}

/// The plainest reading of a distinct count, for time that moves forward: every admitted
/// member with the sub-window it was last admitted in, counted while that is one of the last 61.
fn distinct_reference(
    seen: &mut std::collections::HashMap<u32, u64>,
    quota: &Quota,
    member: u32,
    cost: u64,
    t: u64,
) -> (bool, u64) {
    let sub = t * 60 / quota.window_ms;
    let live = |last: u64| last + 61 > sub;
    let known = seen.get(&member).is_some_and(|&last| live(last));
    let count = seen.values().filter(|&&last| live(last)).count() as u64;
    let fresh = cost > 0 && !known;
    let after = count + u64::from(fresh);
    let allowed = after <= quota.limit;
    let keep = fresh && (allowed || (quota.count_over_limit && count == quota.limit));
    if cost > 0 && (known || keep) {
        seen.insert(member, sub);
    }
    (allowed, if fresh && !keep { count } else { after })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(300)))]

    /// The in-process mirror against the plain reading, and the script against the mirror
    /// (whole decisions, late events included): a recipient counted twice, or one forgotten
    /// early, shows up here.
    #[test]
    fn distinct_counts_match_the_reference_and_the_script((quota, offset, ops) in distinct_case()) {
        let limiter = Limiter::Redis(store().clone());
        let key = crate::support::unique_prefix("distinct").key("sender:p", "rule", &quota);
        let mut engine = State::new(quota.algorithm);
        let mut seen = std::collections::HashMap::new();
        let mut t = DAY_START + offset;
        let mut newest = t;
        for (n, &(step, member, cost)) in ops.iter().enumerate() {
            t = t.saturating_add_signed(step);
            let expected = if cost == 0 {
                engine.clone().decide_member(&quota, cost, Some(member), t)
            } else {
                engine.decide_member(&quota, cost, Some(member), t)
            };
            if t >= newest {
                newest = t;
                let (allowed, count) = distinct_reference(&mut seen, &quota, member, cost, t);
                prop_assert_eq!(
                    (expected.allowed, expected.count),
                    (allowed, count),
                    "mirror vs reference, step {} at t={} member={} cost={}", n, t, member, cost
                );
            } else {
                // A late event: the reference has no reading for it, the mirror and the script
                // judge it at the newest sub-window; from here on only they are compared.
                seen.clear();
                newest = u64::MAX;
            }
            let check = Check { member: Some(member), ..Check::new(&key, &quota, cost) };
            let got = runtime()
                .block_on(limiter.check_batch(&[check], Some(t)))
                .expect("decision")
                .pop()
                .expect("one answer");
            prop_assert_eq!(got, expected, "script vs mirror, step {} at t={} member={} cost={}", n, t, member, cost);
        }
        runtime().block_on(limiter.clear(&[(&key, &quota)])).expect("clear");
    }
}
