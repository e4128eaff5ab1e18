//! The limiter against the real Redis: the race, expiry of every key, the size of a hash,
//! recovery from a flushed script cache, and one script call per invite on a single server.

use std::sync::Arc;
use std::time::Duration;

use sendguard::limiter::{Algorithm, EdgeMode, Limiter, Quota, now_ms};

/// 200 decisions at once on one key with limit 50 admit exactly 50, for every algorithm: no
/// read-then-write race, at one instant and on Redis `TIME`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_decisions_admit_exactly_the_limit() {
    // Several connections, so decisions really interleave at the server.
    let mut limiters = Vec::new();
    for _ in 0..8 {
        limiters.push(Limiter::Redis(crate::support::redis_store().await));
    }
    let limiters = Arc::new(limiters);
    let instant = now_ms();
    for algorithm in Algorithm::ALL {
        for at in [Some(instant), None] {
            // On Redis time a fixed window could roll over mid-test; a day-long window makes
            // that a one-in-a-day event for every algorithm.
            let quota = Quota::new(50, 86_400, algorithm);
            let prefix = crate::support::unique_prefix("race");
            let key = Arc::new(prefix.key("sender:racer", "rule", &quota));
            let mut tasks = Vec::new();
            for n in 0..200 {
                let limiters = limiters.clone();
                let key = key.clone();
                tasks.push(tokio::spawn(async move {
                    let limiter = &limiters[n % limiters.len()];
                    limiter.check(&key, &quota, 1, at).await.expect("decision")
                }));
            }
            let mut admitted = 0;
            for task in tasks {
                if task.await.expect("task").allowed {
                    admitted += 1;
                }
            }
            assert_eq!(admitted, 50, "{algorithm} at {at:?}");
            limiters[0].clear(&[(&key, &quota)]).await.expect("clear");
        }
    }
}

/// No key the engine writes lives forever.
#[tokio::test]
async fn every_key_has_a_ttl() {
    let store = crate::support::redis_store().await;
    let limiter = Limiter::Redis(store.clone());
    let prefix = crate::support::unique_prefix("ttl");
    let mut expected = std::collections::BTreeSet::new();
    for algorithm in Algorithm::ALL {
        for over in [false, true] {
            let mut quota = Quota::new(3, 60, algorithm);
            quota.count_over_limit = over;
            let key = prefix.key(&format!("sender:{over}"), "rule", &quota);
            // Variants of one family (edge modes, strict) share a key: switching keeps counts.
            expected.insert(key.as_str().to_owned());
            if algorithm == Algorithm::SlidingLog {
                expected.insert(format!("{}:seq", key.as_str()));
            }
            // Past the limit, at Redis time and with explicit timestamps.
            for n in 0..5 {
                let at = (n % 2 == 0).then(|| now_ms() + n);
                limiter.check(&key, &quota, 1, at).await.expect("decision");
            }
        }
    }
    let keys = crate::support::keys_under(&store, &prefix).await;
    assert_eq!(
        keys.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        expected
    );
    for key in keys {
        let ttl: i64 = crate::support::query(&store, redis::cmd("PTTL").arg(&key)).await;
        assert!(ttl > 0, "{key} has PTTL {ttl}");
        let () = crate::support::query(&store, redis::cmd("DEL").arg(&key)).await;
    }
}

/// 1,000 decisions over two hours keep an hourly key at 61 fields or fewer, in a listpack, and
/// its expiry at one window and one sub-window.
#[tokio::test]
async fn an_hourly_hash_stays_small() {
    let store = crate::support::redis_store().await;
    let limiter = Limiter::Redis(store.clone());
    for edge in [EdgeMode::Harsh, EdgeMode::Lenient, EdgeMode::Weighted] {
        let quota = Quota::new(100, 3600, Algorithm::HashCounters(edge)).counting_over_limit();
        let key = crate::support::unique_prefix("size").key("sender:busy", "sender-hourly", &quota);
        let start = 1_700_006_400_000u64;
        let mut max_fields = 0;
        for n in 0..1000u64 {
            let at = start + n * 7_200_000 / 1000;
            limiter
                .check(&key, &quota, 1, Some(at))
                .await
                .expect("decision");
            if n % 50 == 49 {
                let fields: u64 =
                    crate::support::query(&store, redis::cmd("HLEN").arg(key.as_str())).await;
                max_fields = max_fields.max(fields);
            }
        }
        let fields: u64 = crate::support::query(&store, redis::cmd("HLEN").arg(key.as_str())).await;
        let encoding: String = crate::support::query(
            &store,
            redis::cmd("OBJECT").arg("ENCODING").arg(key.as_str()),
        )
        .await;
        let ttl: i64 = crate::support::query(&store, redis::cmd("PTTL").arg(key.as_str())).await;
        assert_eq!(fields, 61, "{edge:?}: a busy hour fills every sub-window");
        assert!(max_fields <= 61, "{edge:?}: {max_fields} fields");
        assert_eq!(encoding, "listpack", "{edge:?}");
        assert!(ttl > 3_600_000 && ttl <= 3_660_000, "{edge:?}: PTTL {ttl}");
        limiter.clear(&[(&key, &quota)]).await.expect("clear");
    }
}

/// After `SCRIPT FLUSH` the next decision still runs, once: NOSCRIPT falls back to EVAL.
#[tokio::test]
async fn a_flushed_script_cache_is_reloaded() {
    let store = crate::support::redis_store().await;
    let limiter = Limiter::Redis(store.clone());
    let quota = Quota::new(5, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let other = Quota::new(5, 3600, Algorithm::SlidingLog);
    let prefix = crate::support::unique_prefix("noscript");
    let key = prefix.key("sender:x", "a", &quota);
    let key2 = prefix.key("sender:x", "b", &other);
    let at = Some(now_ms());
    limiter.check(&key, &quota, 1, at).await.expect("first");
    let () = crate::support::query(&store, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let checks = [
        sendguard::limiter::Check::new(&key, &quota, 1),
        sendguard::limiter::Check::new(&key2, &other, 2),
    ];
    let out = limiter.check_batch(&checks, at).await.expect("after flush");
    assert_eq!(out[0].count, 2, "counted once after the flush");
    assert_eq!(out[1].count, 2);
    // And EVALSHA works again: the fallback loaded the script.
    let d = limiter.check(&key, &quota, 1, at).await.expect("again");
    assert_eq!(d.count, 3);
    limiter
        .clear(&[(&key, &quota), (&key2, &other)])
        .await
        .expect("clear");
}

/// A sub-window opened by a denied attempt and then written by an allowed one keeps the key alive
/// until that write leaves the window, not just until the older writes do.
#[tokio::test]
async fn a_later_write_extends_the_expiry() {
    let store = crate::support::redis_store().await;
    let limiter = Limiter::Redis(store.clone());
    let quota = Quota::new(2, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let key = crate::support::unique_prefix("expiry").key("sender:late", "r", &quota);
    // The first write comes at the end of its minute, so it leaves the window 59.9 s before a
    // write at the start of a later minute does: the two expiries tell which one was set.
    let t0 = 1_700_006_400_000u64 - 100;
    let half_hour = 1_800_000 + 100;
    assert!(
        limiter
            .check(&key, &quota, 1, Some(t0))
            .await
            .expect("first")
            .allowed
    );
    // Half an hour later: too costly to fit, then one that fits, in the same minute.
    let denied = limiter
        .check(&key, &quota, 2, Some(t0 + half_hour))
        .await
        .expect("denied");
    assert!(!denied.allowed);
    let allowed = limiter
        .check(&key, &quota, 1, Some(t0 + half_hour + 1000))
        .await
        .expect("allowed");
    assert!(allowed.allowed);
    let ttl: i64 = crate::support::query(&store, redis::cmd("PTTL").arg(key.as_str())).await;
    // Set by the last write: 61 minutes less the 1 s into its minute (the first gave 60 min 0.1 s).
    assert!(
        ttl > 3_630_000,
        "PTTL {ttl}: the key would die before its last write left the window"
    );
    limiter.clear(&[(&key, &quota)]).await.expect("clear");
}

/// A store on a private `redis-server`, so that no other test's commands are counted.
async fn private_store() -> (
    crate::support::redis_server::RedisServer,
    sendguard::limiter::RedisStore,
) {
    let server = crate::support::redis_server::RedisServer::start().await;
    let store = sendguard::limiter::RedisStore::connect(&sendguard::limiter::RedisSettings::new(
        server.url(),
    ))
    .await
    .expect("connect");
    (server, store)
}

/// Calls of each command the store's server ran, scripts' own commands included, from `INFO
/// commandstats`.
pub(crate) async fn command_calls(store: &sendguard::limiter::RedisStore) -> Vec<(String, u64)> {
    let stats: String = crate::support::query(store, redis::cmd("INFO").arg("commandstats")).await;
    stats
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// On a single server the rules of every subject of an invite go in one script call: each
/// EVALSHA has a fixed cost in Redis that three calls per invite paid three times. A private
/// server, so that no other test's calls are counted.
#[tokio::test]
async fn an_invites_rules_are_one_script_call_on_a_single_server() {
    let (_server, store) = private_store().await;
    let quota = Quota::new(5, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let prefix = crate::support::unique_prefix("onecall");
    let keys = [
        prefix.key("sender:1:u", "sender-hourly", &quota),
        prefix.key("ip:10.0.0.1", "ip-hourly", &quota),
        prefix.key("recipient:r@example.com", "recipient-daily", &quota),
    ];
    let checks: Vec<_> = keys
        .iter()
        .map(|key| sendguard::limiter::Check::new(key, &quota, 1))
        .collect();
    let out = store.check_batch(&checks, None).await.expect("decide");
    assert!(out.iter().all(|d| d.count == 1), "{out:?}");
    let stats = command_calls(&store).await;
    let calls: u64 = stats
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum();
    assert_eq!(calls, 1, "script calls for three subjects: {stats:?}");
}

/// A denied attempt of a rule whose wait nobody reads (every action but `reject`) costs the
/// script two commands: the count and taking it back. Reading the key's sub-windows for the
/// wait (HMGET, HGETALL, HSET) is left to rules that report it, which still get one.
#[tokio::test]
async fn a_denied_attempt_without_a_reported_wait_is_two_commands() {
    let (_server, store) = private_store().await;
    let prefix = crate::support::unique_prefix("quiet");
    let reporting = Quota::new(1, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let quiet = reporting.without_wait();
    for (quota, subject) in [(&quiet, "sender:1:quiet"), (&reporting, "sender:1:loud")] {
        let key = prefix.key(subject, "sender-hourly", quota);
        let check = [sendguard::limiter::Check::new(&key, quota, 1)];
        let first = store.check_batch(&check, None).await.expect("decide");
        assert!(first[0].allowed, "{first:?}");
        let _: () = crate::support::query(&store, redis::cmd("CONFIG").arg("RESETSTAT")).await;
        let denied = store.check_batch(&check, None).await.expect("decide")[0];
        assert!(!denied.allowed, "{denied:?}");
        assert_eq!((denied.count, denied.remaining), (1, 0), "{denied:?}");
        let calls: Vec<(String, u64)> = command_calls(&store)
            .await
            .into_iter()
            .filter(|(name, _)| !["evalsha", "config|resetstat"].contains(&name.as_str()))
            .collect();
        if quota.reports_wait {
            assert!(denied.retry_after_ms > 0, "{denied:?}");
            assert!(calls.len() > 1, "the wait needs the sub-windows: {calls:?}");
        } else {
            assert_eq!((denied.retry_after_ms, denied.reset_after_ms), (0, 0));
            assert_eq!(calls, [("hincrby".to_owned(), 2)], "{calls:?}");
        }
        // The attempt was taken back: the count is still the first attempt's.
        let read = [sendguard::limiter::Check::new(&key, quota, 0)];
        let after = store.check_batch(&read, None).await.expect("read")[0];
        assert_eq!(after.count, 1, "{after:?}");
    }
}

/// `bench replay` sends a `MONITOR` capture's script calls again and splits their time: every
/// call of the limiter's script and of the campaign group script is counted once per repeat,
/// the commands the scripts run are counted apart from the calls, and a capture of a script this
/// build does not have is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_times_each_script_apart_from_its_commands() {
    use sendguard::campaigns::groups::Groups;
    use sendguard::limiter::GROUP_SCRIPT;
    use sendguard::limiter::replay::{self, Known};
    let (server, store) = private_store().await;
    let capture_file = std::env::temp_dir().join(format!("sg-replay-{}", server.port));
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "monitor"])
        .stdout(std::fs::File::create(&capture_file).expect("capture file"))
        .spawn()
        .expect("redis-cli is installed");
    // MONITOR answers OK once it is on: nothing is sent before that.
    let on = crate::support::app::wait_for(Duration::from_secs(10), || {
        let file = capture_file.clone();
        async move { std::fs::read_to_string(file).is_ok_and(|t| t.starts_with("OK")) }
    })
    .await;
    assert!(on, "MONITOR did not start");
    let limiter = Limiter::Redis(store.clone());
    let prefix = crate::support::unique_prefix("replay");
    let quota = Quota::new(100, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    for n in 0..4 {
        let key = prefix.key(&format!("sender:r{n}"), "hourly", &quota);
        limiter.check(&key, &quota, 1, None).await.expect("check");
    }
    let groups = Groups::new(&limiter, &prefix);
    for n in 0..2u32 {
        let text = format!("a note number {n} about the shared design review this week");
        let f =
            sendguard::campaigns::fingerprint::of_invite(Some(&text), None).expect("a fingerprint");
        groups.group_of(&f.signature, 86_400).await.expect("group");
    }
    let captured = crate::support::app::wait_for(Duration::from_secs(10), || {
        let file = capture_file.clone();
        async move {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            replay::script_calls(&text).len() >= 6
        }
    })
    .await;
    let _ = monitor.kill();
    let _ = monitor.wait();
    let capture = std::fs::read_to_string(&capture_file).expect("capture");
    let _ = std::fs::remove_file(&capture_file);
    assert!(captured, "the capture holds the 6 calls: {capture}");

    let limiter_source = sendguard::limiter::script_source();
    let known = [
        Known {
            name: "limiter",
            source: &limiter_source,
        },
        Known {
            name: "groups",
            source: GROUP_SCRIPT,
        },
    ];
    let settings = sendguard::limiter::RedisSettings::new(server.url());
    // Calls of each script in the capture: at least those sent above, and a call that met a
    // server without the script (NOSCRIPT, then sent again) counts as captured too.
    let captured = |source: &str| {
        let sha = redis::Script::new(source).get_hash().to_owned();
        (replay::script_calls(&capture).iter())
            .filter(|call| call[1] == sha.as_bytes())
            .count()
    };
    let (limiter_calls, group_calls) = (captured(&limiter_source), captured(GROUP_SCRIPT));
    assert!(
        limiter_calls >= 4 && group_calls >= 2,
        "{limiter_calls} limiter and {group_calls} group calls captured: {capture}"
    );
    let rows = replay::run(&settings, &capture, &known, 2)
        .await
        .expect("replay");
    let names: Vec<(&str, usize)> = rows.iter().map(|r| (r.script.as_str(), r.calls)).collect();
    assert_eq!(
        names,
        [("limiter", 2 * limiter_calls), ("groups", 2 * group_calls)]
    );
    for row in &rows {
        assert!(
            row.commands >= 1.0,
            "{}: every call runs a command: {row:?}",
            row.script
        );
        assert!(row.call_us >= row.commands_us, "{row:?}");
    }

    let none = replay::run(&settings, &capture, &known, 0).await;
    assert!(
        matches!(&none, Err(e) if e.to_string().contains("--repeat")),
        "{none:?}"
    );
    let foreign = r#"1.0 [0 127.0.0.1:1] "EVALSHA" "0123456789abcdef0123456789abcdef01234567" "0""#;
    let refused = replay::run(&settings, foreign, &known, 1).await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("not one of this build's")),
        "{refused:?}"
    );
}
