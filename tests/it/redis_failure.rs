//! Redis dies under traffic: what happens to invites under each policy, and after it returns.

use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, delivered, execute, queued, sender_state, wait_for};
use crate::support::redis_server::RedisServer;
use crate::support::rules;
use reqwest::StatusCode;
use sendguard::config::RedisPolicy;
use serde_json::json;
use sqlx::PgPool;

/// Transactions idle for over 250 ms (longer than between two statements of a short one on a
/// busy machine: waiting on something else) whose last statement contains `statement`.
async fn waiting_in_transaction(pool: &sqlx::PgPool, statement: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND state = 'idle in transaction'
             AND strpos(query, $1) > 0 AND state_change < now() - interval '250 milliseconds'",
    )
    .bind(statement)
    .fetch_one(pool)
    .await
    .expect("activity")
}

async fn statuses(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT status, count(*) FROM invites GROUP BY 1 ORDER BY 1")
        .fetch_all(pool)
        .await
        .expect("statuses")
}

fn counts(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
}

/// A stage on a Redis server of the test's own, which it may stop, with `policy` for when Redis
/// fails or is slower than `timeout_ms`; and an API client for it.
async fn on_own_redis(
    test: &str,
    setup: impl AsyncFnOnce(&PgPool),
    policy: RedisPolicy,
    timeout_ms: u64,
) -> (RedisServer, Stage, Api) {
    let redis = RedisServer::start().await;
    let url = redis.url();
    let stage = Stage::start_prepared(test, setup, |cfg| {
        cfg.redis_url = url;
        cfg.redis_timeout_ms = timeout_ms;
        cfg.on_redis_error = policy;
    })
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    (redis, stage, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_invites_are_checked_once_redis_returns() {
    let (mut redis, stage, api) = on_own_redis(
        "deferred",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 3).await,
        RedisPolicy::Defer,
        300,
    )
    .await;
    let (pool, sink) = (&stage.pool, &stage.sink);
    let invite = |n: u32| {
        api.invite(json!({"sender_id": "steady", "recipient": format!("d{n}@example.com")}))
    };
    for n in 0..2 {
        assert_eq!(invite(n).await.status(), StatusCode::OK);
    }
    wait_for(Duration::from_secs(10), || async {
        sink.messages().len() == 2
    })
    .await;

    redis.kill();
    for n in 2..6 {
        let resp = invite(n).await;
        assert_eq!(resp.status(), StatusCode::OK, "deferred, not refused");
    }
    assert_eq!(
        statuses(pool).await,
        counts(&[("deferred", 4), ("sent", 2)])
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sink.messages().len(), 2, "nothing is sent unchecked");

    // Back, empty: the four are counted from zero with their own timestamps; the fourth is over.
    redis.restart().await;
    let checked = wait_for(Duration::from_secs(15), || async {
        let deferred: i64 =
            sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'deferred'")
                .fetch_one(pool)
                .await
                .expect("deferred");
        deferred == 0 && queued(pool).await == 0
    })
    .await;
    assert!(
        checked,
        "deferred invites were not checked: {:?}",
        statuses(pool).await
    );
    delivered(&stage.app, pool).await;
    assert_eq!(statuses(pool).await, counts(&[("held", 1), ("sent", 5)]));
    assert_eq!(sink.messages().len(), 5);
    let state = sender_state(pool, "steady").await;
    assert_eq!(state, "shadow_banned");
    let marked: i64 =
        sqlx::query_scalar("SELECT count(*) FROM invites WHERE (decision->>'deferred')::boolean")
            .fetch_one(pool)
            .await
            .expect("marked");
    assert_eq!(marked, 4, "each re-checked invite says it was deferred");
    // New invites are checked live again.
    assert_eq!(invite(6).await.status(), StatusCode::OK);
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'held'")
        .fetch_one(pool)
        .await
        .expect("held");
    assert_eq!(held, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closed_policy_answers_503_and_records_nothing_while_redis_is_down() {
    let (mut redis, stage, api) =
        on_own_redis("closed", async |_| {}, RedisPolicy::Closed, 300).await;
    let pool = &stage.pool;
    let invite =
        |n: u32| api.invite(json!({"sender_id": "c", "recipient": format!("c{n}@example.com")}));
    assert_eq!(invite(0).await.status(), StatusCode::OK);
    redis.kill();
    for n in 1..4 {
        let resp = invite(n).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(resp.headers().contains_key("retry-after"));
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
    }
    let ready = api
        .http
        .get(format!("{}/readyz", api.base))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    redis.restart().await;
    let back = wait_for(Duration::from_secs(10), || async {
        invite(9).await.status() == StatusCode::OK
    })
    .await;
    assert!(back, "the service recovers by itself");
    let ready = api
        .http
        .get(format!("{}/readyz", api.base))
        .send()
        .await
        .expect("readyz");
    assert_eq!(
        ready.status(),
        StatusCode::OK,
        "ready again once Redis answers"
    );
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT recipient FROM invites ORDER BY recipient")
            .fetch_all(pool)
            .await
            .expect("recipients");
    assert_eq!(recorded, ["c0@example.com", "c9@example.com"]);
}

/// Sending unchecked while Redis is down skips the rules, not the sender's standing, which
/// Postgres keeps: a shadow-banned sender's invite is still held, with the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_policy_still_holds_a_banned_senders_invites() {
    let (mut redis, stage, api) = on_own_redis(
        "openheld",
        async |pool| {
            let held =
                "INSERT INTO senders (app_id, id, state) VALUES (1, 'banned', 'shadow_banned')";
            execute(pool, &[held]).await
        },
        RedisPolicy::Open,
        300,
    )
    .await;
    let (pool, sink) = (&stage.pool, &stage.sink);
    redis.kill();
    for (n, sender) in ["banned", "good"].into_iter().enumerate() {
        let resp = api
            .invite(json!({"sender_id": sender, "recipient": format!("o{n}@example.com")}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    delivered(&stage.app, pool).await;
    let to: Vec<String> = sink.messages().into_iter().flat_map(|m| m.to).collect();
    assert_eq!(to, ["o1@example.com"], "a banned sender's invite was sent");
    assert_eq!(statuses(pool).await, counts(&[("held", 1), ("sent", 1)]));
}

/// A deferred invite is decided against the rules with its sender's standing as cached, then
/// written: a ban that commits in between is not overtaken by that decision. Here Redis answers
/// the re-check only after the sender was shadow-banned; the invite ends held, not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_invite_is_not_sent_for_a_sender_banned_while_it_was_checked() {
    // A paused Redis is waited for, not given up on.
    let (mut redis, stage, api) =
        on_own_redis("deferban", async |_| {}, RedisPolicy::Defer, 10_000).await;
    let (pool, sink) = (&stage.pool, &stage.sink);
    redis.kill();
    let resp = api
        .invite(json!({"sender_id": "late", "recipient": "late@example.com"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(statuses(pool).await, counts(&[("deferred", 1)]));
    // The invite is kept from the re-check until Redis is back and paused: the re-check's call
    // then waits inside its transaction.
    let mut hold = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM invites WHERE status = 'deferred' FOR UPDATE")
        .execute(&mut *hold)
        .await
        .expect("hold the invite");
    redis.restart().await;
    redis.pause(5_000).await;
    hold.rollback().await.expect("let the invite go");
    let checking = wait_for(Duration::from_secs(4), || async {
        waiting_in_transaction(pool, "").await == 1
    })
    .await;
    assert!(checking, "the re-check did not start");
    // A rule shadow-bans the sender while the re-check waits for Redis.
    sqlx::query(
        "UPDATE senders SET state = 'shadow_banned', version = version + 1,
             state_changed_by = 'system' WHERE id = 'late'",
    )
    .execute(pool)
    .await
    .expect("ban");
    let decided = wait_for(Duration::from_secs(15), || async {
        statuses(pool)
            .await
            .iter()
            .all(|(status, _)| status != "deferred")
    })
    .await;
    assert!(decided, "the deferred invite was never decided");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(statuses(pool).await, counts(&[("held", 1)]));
    assert!(
        sink.messages().is_empty(),
        "a banned sender's invite was sent"
    );
}

/// A complaint that arrives while Redis is down is recorded (202) and counted once Redis
/// answers again, at the time it arrived: here it is over a limit of none, so the count bans
/// the sender. Nothing is lost, and nothing depends on the caller retrying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_during_a_redis_outage_is_counted_once_redis_returns() {
    let (mut redis, stage, api) = on_own_redis(
        "outcomeoutage",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 0).await,
        RedisPolicy::Defer,
        300,
    )
    .await;
    let id = api.accepted("plain", "c@example.com").await;
    redis.kill();
    assert_eq!(
        api.event(&id, "complaint").await,
        StatusCode::ACCEPTED,
        "recorded, not refused"
    );
    let counted = || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT counted FROM outcomes WHERE invite_id::text = $1 AND type = 'complaint'",
        )
        .bind(&id)
        .fetch_optional(&stage.pool)
        .await
        .expect("outcome")
    };
    assert_eq!(counted().await, Some(false), "kept, waiting to be counted");
    redis.restart().await;
    let banned = wait_for(Duration::from_secs(15), || async {
        sender_state(&stage.pool, "plain").await == "shadow_banned"
    })
    .await;
    assert!(banned, "the complaint was counted against its sender");
    assert_eq!(counted().await, Some(true));
}

/// A banned sender's invites sent during a Redis outage are deferred, then held when checked:
/// they keep to the held cap as held invites written at once do, the rest counted and stored
/// without their text, instead of every one of them kept whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_invites_of_a_banned_sender_keep_to_the_held_cap() {
    let mut redis = RedisServer::start().await;
    let url = redis.url();
    let stage = Stage::start_with("deferredcap", &[], |cfg| {
        cfg.redis_url = url;
        cfg.redis_timeout_ms = 300;
        cfg.on_redis_error = RedisPolicy::Defer;
        cfg.held_cap = 2;
    })
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    api.accepted("outcast", "first@example.com").await;
    sqlx::query("UPDATE senders SET state = 'banned', version = version + 1 WHERE id = 'outcast'")
        .execute(&stage.pool)
        .await
        .expect("ban");
    redis.kill();
    for n in 0..5 {
        let resp = api
            .invite(
                json!({"sender_id": "outcast", "recipient": format!("o{n}@example.com"),
                "message": "a long pitch"}),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    redis.restart().await;
    let checked = wait_for(Duration::from_secs(15), || async {
        !statuses(&stage.pool)
            .await
            .iter()
            .any(|(s, _)| s == "deferred")
    })
    .await;
    assert!(checked, "{:?}", statuses(&stage.pool).await);
    let kept: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT status, count(*), count(message) FROM invites
         WHERE sender_id = 'outcast' AND recipient LIKE 'o%' GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("invites");
    assert_eq!(
        kept,
        [("discarded".to_owned(), 3, 0), ("held".to_owned(), 2, 2)],
        "two held whole, three past the cap without their text"
    );
    let (stored, overflow): (i64, i64) =
        sqlx::query_as("SELECT held_stored, held_overflow FROM senders WHERE id = 'outcast'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!((stored, overflow), (2, 3));
}

/// An outcome is not counted inside a database transaction: while Redis is slow to answer, the
/// request holds no connection idle in a transaction (a stall would otherwise take the pool,
/// one connection per report, from the invites' idempotency checks and the dashboard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_waiting_on_a_slow_redis_holds_no_transaction() {
    let (redis, stage, api) =
        on_own_redis("outcomeslow", async |_| {}, RedisPolicy::Defer, 10_000).await;
    let id = api.accepted("calm", "w@example.com").await;
    redis.pause(2_000).await;
    let reporter = api.clone();
    let report = tokio::spawn(async move { reporter.event(&id, "complaint").await });
    // One of the outcome's (the deferred re-check's rounds, a transaction across Redis by
    // design, are not).
    let held = wait_for(Duration::from_millis(1_500), || async {
        waiting_in_transaction(&stage.pool, "outcomes").await > 0
    })
    .await;
    assert!(!held, "a transaction waited on Redis");
    assert_eq!(report.await.expect("report"), StatusCode::ACCEPTED);
}

/// A complaint whose request stops while Redis counts it (the client gives up while Redis is
/// slow, and its handler is dropped) is counted exactly once: the count goes on without the
/// request, and the task that counts outcomes once their lease is over finds it counted. With
/// a limit of two complaints, a second count of the second complaint would ban the sender; the
/// third complaint does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_whose_request_stopped_during_its_count_is_counted_once() {
    let (redis, stage, api) = on_own_redis(
        "outcomedropped",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 2).await,
        RedisPolicy::Defer,
        10_000,
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(api.accepted("dropped", &format!("d{n}@example.com")).await);
    }
    let complain = |id: String, timeout: Duration| {
        let api = api.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{}/api/v1/events", api.base))
                .bearer_auth(&api.key)
                .json(&json!({"invite_id": id, "type": "complaint"}))
                .timeout(timeout)
                .send()
                .await
                .map(|r| r.status())
        }
    };
    let long = Duration::from_secs(10);
    assert_eq!(
        complain(ids[0].clone(), long).await.ok(),
        Some(StatusCode::ACCEPTED)
    );
    redis.pause(1_500).await;
    let gave_up = complain(ids[1].clone(), Duration::from_millis(300)).await;
    assert!(gave_up.is_err(), "the client gave up: {gave_up:?}");
    // Redis answers again, and the count goes on without the request.
    let marked = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, bool>("SELECT bool_and(counted) FROM outcomes")
            .fetch_one(&stage.pool)
            .await
            .expect("outcomes")
    })
    .await;
    assert!(marked, "the dropped request's count was marked");
    // Were it left unmarked, its lease running out would have it counted again.
    sqlx::query("UPDATE outcomes SET counting_until = now() - interval '1 second'")
        .execute(&stage.pool)
        .await
        .expect("lease over");
    // Past the task's next round.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let state = || async { sender_state(&stage.pool, "dropped").await };
    assert_eq!(
        state().await,
        "active",
        "two complaints, limit 2: counted once each"
    );
    assert_eq!(
        complain(ids[2].clone(), long).await.ok(),
        Some(StatusCode::ACCEPTED)
    );
    assert_eq!(
        state().await,
        "shadow_banned",
        "the third is over the limit"
    );
}

/// A complaint kept during an outage and counted after a lift is evidence the admin already
/// set aside: the sender is not banned again for it (docs/DESIGN.md §3b).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_counted_late_after_a_lift_does_not_ban_the_sender_again() {
    let (mut redis, stage, api) = on_own_redis(
        "outcomelatelift",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 0).await,
        RedisPolicy::Defer,
        300,
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(api.accepted("pardoned", &format!("p{n}@example.com")).await);
    }
    let state = || async { sender_state(&stage.pool, "pardoned").await };
    assert_eq!(api.event(&ids[0], "complaint").await, StatusCode::ACCEPTED);
    assert_eq!(state().await, "shadow_banned");
    redis.kill();
    assert_eq!(
        api.event(&ids[1], "complaint").await,
        StatusCode::ACCEPTED,
        "kept"
    );
    // The admin lifts the ban (its part in Postgres) before Redis is back to count it.
    sqlx::query(
        "UPDATE senders SET state = 'active', version = version + 1, lifted_at = now(),
             state_changed_by = 'alice' WHERE id = 'pardoned'",
    )
    .execute(&stage.pool)
    .await
    .expect("lift");
    redis.restart().await;
    let counted = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, bool>("SELECT bool_and(counted) FROM outcomes")
            .fetch_one(&stage.pool)
            .await
            .expect("outcomes")
    })
    .await;
    assert!(counted, "the kept complaint was counted");
    assert_eq!(
        state().await,
        "active",
        "banned again for what the lift set aside"
    );
}

/// A call to a slow Redis that timed out still runs once Redis moves on, and counts. The
/// re-check of the invite it deferred waits until Redis has answered everything sent before
/// it, rather than sending a count each second into the stalled server, each to be added when
/// it moves on: one invite counts at most twice (its own call and the re-check), not once per
/// second of the stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_does_not_multiply_a_deferred_invites_count() {
    let (redis, stage, api) =
        on_own_redis("stallcount", async |_| {}, RedisPolicy::Defer, 300).await;
    let pool = &stage.pool;
    redis.pause(4_000).await;
    let resp = api
        .invite(json!({"sender_id": "patient", "recipient": "p@example.com"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let decided = wait_for(Duration::from_secs(20), || async {
        statuses(pool)
            .await
            .iter()
            .all(|(status, _)| status != "deferred")
    })
    .await;
    assert!(decided, "never re-checked: {:?}", statuses(pool).await);
    let counted: i64 = sqlx::query_scalar(
        "SELECT (r ->> 1)::int8 FROM invites, jsonb_array_elements(decision -> 'rules') r
         WHERE r ->> 0 = 'sender-hourly'",
    )
    .fetch_one(pool)
    .await
    .expect("the rule's count");
    assert!((1..=2).contains(&counted), "counted {counted} times");
}

/// The same for a complaint reported while Redis stalls: counted at most twice, so a limit of
/// two is not crossed by one complaint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_does_not_multiply_a_complaints_count() {
    let (redis, stage, api) = on_own_redis(
        "stallcomplaint",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 2).await,
        RedisPolicy::Defer,
        300,
    )
    .await;
    let id = api.accepted("plain", "c@example.com").await;
    redis.pause(4_000).await;
    assert_eq!(api.event(&id, "complaint").await, StatusCode::ACCEPTED);
    let counted = wait_for(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, bool>("SELECT counted FROM outcomes WHERE type = 'complaint'")
            .fetch_one(&stage.pool)
            .await
            .expect("outcome")
    })
    .await;
    assert!(counted, "the complaint was never counted");
    // Whatever the retries sent meanwhile has run by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sender_state(&stage.pool, "plain").await, "active");
}
