//! Every algorithm, in process and in Redis, against a naive reference model on random
//! sequences: sub-window boundaries, costs above 1, reads (cost 0), counting over the limit, and
//! windows of a minute, an hour and a day.

mod support;

use std::sync::OnceLock;

use proptest::prelude::*;
use sendguard::limiter::algorithms::State;
use sendguard::limiter::{Algorithm, Limiter, Quota, RedisStore};
use support::reference::Reference;

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

fn case() -> impl Strategy<Value = Case> {
    (
        0..Algorithm::ALL.len(),
        0..WINDOWS.len(),
        1u64..12,
        any::<bool>(),
    )
        .prop_flat_map(|(a, w, limit, over)| {
            let window_secs = WINDOWS[w];
            let w_ms = window_secs * 1000;
            let sub = w_ms / 60;
            let gap = prop_oneof![
                6 => 0..(sub / 4).max(2),
                2 => sub.saturating_sub(3)..sub + 3,
                2 => 0..2 * sub,
                1 => 0..2 * w_ms,
            ];
            let cost = prop_oneof![1 => Just(0u64), 8 => Just(1u64), 3 => 2u64..=4];
            (
                Just(Quota {
                    limit,
                    window_ms: w_ms,
                    algorithm: Algorithm::ALL[a],
                    count_over_limit: over,
                }),
                0..w_ms,
                prop::collection::vec((gap, cost), 1..60),
            )
        })
        .prop_map(|(quota, offset, ops)| Case {
            quota,
            start: DAY_START + offset,
            ops,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

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
    STORE.get_or_init(|| runtime().block_on(support::redis_store()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn redis_matches_the_reference(case in case()) {
        let limiter = Limiter::Redis(store().clone());
        let prefix = support::unique_prefix("model");
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
