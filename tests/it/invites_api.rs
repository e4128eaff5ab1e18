//! The send-invite API end to end: the real Postgres, Redis and an SMTP server on 127.0.0.1.

use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, config, delivered, migrated, sender_state, wait_for};
use crate::support::rules;
use crate::support::smtp::SmtpSink;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

/// Drives `app`'s outbox until it has nothing left to send; answers how many messages the sink
/// holds.
async fn sent(app: &sendguard::Running, pool: &PgPool, sink: &SmtpSink) -> usize {
    delivered(app, pool).await;
    sink.messages().len()
}

async fn status_counts(pool: &PgPool, sender: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT status, count(*) FROM invites WHERE sender_id = $1 GROUP BY status ORDER BY status",
    )
    .bind(sender)
    .fetch_all(pool)
    .await
    .expect("counts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_over_the_limit_is_shadow_banned_and_sees_no_difference() {
    let stage = Stage::start_prepared(
        "shadow",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 5).await,
        |_| {},
    )
    .await;
    let (pool, sink, app) = (&stage.pool, &stage.sink, &stage.app);
    let api = Api::new(format!("http://{}", app.addr), api_key(pool).await);

    let mut answers = Vec::new();
    for n in 0..8 {
        let resp = api
            .invite(json!({"sender_id": "spammer", "recipient": format!("r{n}@example.com")}))
            .await;
        let status = resp.status();
        let mut headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            // The date and the request id differ per answer whatever the decision.
            .filter(|(name, _)| *name != "date" && *name != "x-request-id")
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        headers.sort();
        let body: Value = resp.json().await.expect("json");
        answers.push((status, headers, body));
    }
    for (status, headers, body) in &answers {
        assert_eq!(*status, StatusCode::OK);
        assert_eq!(
            headers, &answers[0].1,
            "every answer carries the same headers"
        );
        assert_eq!(body["status"], "accepted");
        let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["id", "status"]);
    }
    // A second sender in the same test is unaffected.
    for n in 0..2 {
        let resp = api
            .invite(json!({"sender_id": "friend", "recipient": format!("f{n}@example.org")}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }

    assert_eq!(
        sent(app, pool, sink).await,
        7,
        "five from the spammer, two from the friend"
    );
    let spam_delivered = sink
        .messages()
        .iter()
        .filter(|m| m.to.iter().any(|t| t.ends_with("@example.com")))
        .count();
    assert_eq!(spam_delivered, 5);
    let state = sender_state(pool, "spammer").await;
    assert_eq!(state, "shadow_banned");
    let (rule, observed, limit): (String, i64, i64) = sqlx::query_as(
        "SELECT rule_name, observed, limit_count FROM flags WHERE sender_id = 'spammer'",
    )
    .fetch_one(pool)
    .await
    .expect("one flag");
    assert_eq!((rule.as_str(), observed, limit), ("sender-hourly", 6, 5));
    assert_eq!(
        status_counts(pool, "spammer").await,
        [("held".to_owned(), 3), ("sent".to_owned(), 5)]
    );
    assert_eq!(
        status_counts(pool, "friend").await,
        [("sent".to_owned(), 2)]
    );
    // After the ban the sender's invites still went through the rules (same work, same timing)
    // and still counted: the seventh and eighth attempts are the 7th and 8th of the hour.
    let counts: Vec<i64> = sqlx::query_scalar(
        "SELECT (r->>1)::bigint FROM invites, jsonb_array_elements(decision->'rules') r
         WHERE sender_id = 'spammer' AND decision->>'reason' = 'sender_shadow_banned'
           AND r->>0 = 'sender-hourly'
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("decision records");
    assert_eq!(counts, [7, 8]);
    let audit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE sender_id = 'spammer' AND actor = 'system' AND action = 'shadow_ban'",
    )
    .fetch_one(pool)
    .await
    .expect("audit");
    assert_eq!(audit, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_invite_to_one_recipient_is_suppressed_without_a_flag() {
    let stage = Stage::start("suppress", &[]).await;
    let (pool, sink, app) = (&stage.pool, &stage.sink, &stage.app);
    let api = Api::new(format!("http://{}", app.addr), api_key(pool).await);
    for n in 0..4 {
        let resp = api
            .invite(json!({"sender_id": format!("s{n}"), "recipient": "popular@example.com"}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    assert_eq!(sent(app, pool, sink).await, 3);
    let suppressed: Vec<String> =
        sqlx::query_scalar("SELECT sender_id FROM invites WHERE status = 'suppressed'")
            .fetch_all(pool)
            .await
            .expect("suppressed");
    assert_eq!(suppressed, ["s3"]);
    let flags: i64 = sqlx::query_scalar("SELECT count(*) FROM flags")
        .fetch_one(pool)
        .await
        .expect("flags");
    assert_eq!(flags, 0);
    let decision: Value =
        sqlx::query_scalar("SELECT decision FROM invites WHERE status = 'suppressed'")
            .fetch_one(pool)
            .await
            .expect("decision");
    assert_eq!(decision["action"], "suppress");
    let exceeded: Vec<&Value> = decision["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r[4] == "exceeded")
        .collect();
    assert_eq!(exceeded.len(), 1);
    // [rule, count, limit, window_secs, outcome]
    assert_eq!(exceeded[0][0], "recipient-daily");
    assert_eq!(exceeded[0][1], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reject_rule_answers_429_with_its_headers() {
    let stage = Stage::start_prepared(
        "reject",
        async |pool| rules::set(pool, "ip-hourly", |r| r.limit = 2).await,
        |_| {},
    )
    .await;
    let (pool, app) = (&stage.pool, &stage.app);
    let api = Api::new(format!("http://{}", app.addr), api_key(pool).await);
    for n in 0..2 {
        let resp = api
            .invite(json!({"sender_id": format!("ip{n}"), "recipient": format!("x{n}@example.com"), "sender_ip": "203.0.113.9"}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = api
        .invite(
            json!({"sender_id": "ip2", "recipient": "x2@example.com", "sender_ip": "203.0.113.9"}),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("content-type"), "application/problem+json");
    assert_eq!(header("ratelimit-policy"), "\"ip-hourly\";q=2;w=3600");
    let retry: u64 = header("retry-after").parse().expect("Retry-After seconds");
    // Harsh counters free the two requests when their minute leaves the hour: 60-61 minutes.
    assert!((3540..=3660).contains(&retry), "Retry-After {retry}");
    let ratelimit = header("ratelimit");
    assert!(ratelimit.starts_with("\"ip-hourly\";r=0;t="), "{ratelimit}");
    let reset: u64 = ratelimit
        .rsplit("t=")
        .next()
        .and_then(|t| t.parse().ok())
        .expect("t=");
    assert!((3540..=3660).contains(&reset), "reset {reset}");
    // Another address is not limited by it.
    let resp = api
        .invite(
            json!({"sender_id": "ip3", "recipient": "x3@example.com", "sender_ip": "198.51.100.1"}),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE sender_id = 'ip2'")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(recorded, 0, "a rejected invite is not recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_problem_naming_the_field_and_records_nothing() {
    let stage = Stage::start("badinput", &[]).await;
    let (pool, sink, app) = (&stage.pool, &stage.sink, &stage.app);
    let api = Api::new(format!("http://{}", app.addr), api_key(pool).await);
    let url = api.url();
    let long = |n: usize| "x".repeat(n);
    let ok = json!({"sender_id": "u", "recipient": "a@example.com"});
    let with = |field: &str, value: Value| {
        let mut v = ok.clone();
        v[field] = value;
        v.to_string()
    };
    let without = |field: &str| {
        let mut v = ok.clone();
        v.as_object_mut().expect("object").remove(field);
        v.to_string()
    };
    // (body, content type, expected status, field named)
    let cases: Vec<(String, &str, u16, Option<&str>)> = vec![
        (
            without("sender_id"),
            "application/json",
            422,
            Some("sender_id"),
        ),
        (
            without("recipient"),
            "application/json",
            422,
            Some("recipient"),
        ),
        (
            with("sender_id", json!("")),
            "application/json",
            422,
            Some("sender_id"),
        ),
        (
            with("sender_id", json!(long(129))),
            "application/json",
            422,
            Some("sender_id"),
        ),
        (
            with("sender_id", json!(12)),
            "application/json",
            422,
            Some("sender_id"),
        ),
        (
            with("recipient", json!("not-an-address")),
            "application/json",
            422,
            Some("recipient"),
        ),
        (
            with("recipient", json!(format!("{}@example.com", long(250)))),
            "application/json",
            422,
            Some("recipient"),
        ),
        (
            with("recipient", json!(["a@example.com"])),
            "application/json",
            422,
            Some("recipient"),
        ),
        (
            with("sender_ip", json!("300.1.1.1")),
            "application/json",
            422,
            Some("sender_ip"),
        ),
        (
            with("resource", json!(long(257))),
            "application/json",
            422,
            Some("resource"),
        ),
        (
            with("sender_name", json!(long(129))),
            "application/json",
            422,
            Some("sender_name"),
        ),
        (
            with("sender_name", json!("Bo\r\nBcc: victim@example.com")),
            "application/json",
            422,
            Some("sender_name"),
        ),
        (
            with("message", json!(long(2001))),
            "application/json",
            422,
            Some("message"),
        ),
        (
            with("message", json!(false)),
            "application/json",
            422,
            Some("message"),
        ),
        ("{not json".into(), "application/json", 400, None),
        ("[1, 2]".into(), "application/json", 400, None),
        (ok.to_string(), "text/plain", 415, None),
        (
            with("message", json!(long(17_000))),
            "application/json",
            413,
            None,
        ),
    ];
    for (body, content_type, expected, field) in cases {
        let resp = api
            .http
            .post(&url)
            .bearer_auth(&api.key)
            .header("content-type", content_type)
            .body(body.clone())
            .send()
            .await
            .expect("request");
        let short: String = body.chars().take(60).collect();
        assert_eq!(resp.status().as_u16(), expected, "{short}");
        assert_eq!(
            resp.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{short}"
        );
        let problem: Value = resp.json().await.expect("problem body");
        assert_eq!(problem["status"], expected, "{short}");
        if let Some(field) = field {
            assert_eq!(problem["field"], field, "{short}");
        }
    }
    // Without a key, or with a wrong one.
    let resp = api.http.post(&url).json(&ok).send().await.expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let resp = api
        .http
        .post(&url)
        .bearer_auth("sg_wrong")
        .json(&ok)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // A revoked key stops working at once.
    let doomed = sendguard::api_keys::create(pool, "doomed", 1, "test")
        .await
        .expect("key");
    let with_key = |key: String| api.http.post(&url).bearer_auth(key).json(&ok).send();
    assert!(
        sendguard::api_keys::revoke(pool, "doomed", "test")
            .await
            .expect("revoke")
    );
    let resp = with_key(doomed).await.expect("request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM invites")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(recorded, 0);
    assert_eq!(sent(app, pool, sink).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_replays_the_first_answer_and_sends_once() {
    let stage = Stage::start("idempotency", &[]).await;
    let (pool, sink, app) = (&stage.pool, &stage.sink, &stage.app);
    let api = Api::new(format!("http://{}", app.addr), api_key(pool).await);
    let url = api.url();
    let body = json!({"sender_id": "u_idem", "recipient": "once@example.com"});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let resp = api
            .http
            .post(&url)
            .bearer_auth(&api.key)
            .header("idempotency-key", "k-1")
            .json(&body)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::OK);
        let v: Value = resp.json().await.expect("json");
        ids.push(v["id"].as_str().expect("id").to_owned());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let resp = api
        .http
        .post(&url)
        .bearer_auth(&api.key)
        .header("idempotency-key", "k-1")
        .json(&json!({"sender_id": "u_idem", "recipient": "other@example.com"}))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(sent(app, pool, sink).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invites_accepted_while_smtp_is_down_arrive_once_it_is_up() {
    let (db, pool) = migrated("smtpdown", &[]).await;
    // Reserve a port, then leave nothing listening on it.
    let port = crate::support::free_port();
    let app = sendguard::start(&config(&db, Some(format!("smtp://127.0.0.1:{port}"))))
        .await
        .expect("start");
    let api = Api::new(format!("http://{}", app.addr), api_key(&pool).await);
    for n in 0..3 {
        let resp = api
            .invite(
                json!({"sender_id": format!("d{n}"), "recipient": format!("late{n}@example.com")}),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    // The worker tries and fails, and keeps the invites queued with their error.
    let retried = wait_for(Duration::from_secs(10), || async {
        let failed_attempts: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM invites WHERE status = 'queued' AND attempts > 0 AND last_error IS NOT NULL",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        failed_attempts == 3
    })
    .await;
    assert!(retried, "the worker should have tried all three");
    let sink = SmtpSink::start_on(port).await;
    assert_eq!(sent(&app, &pool, &sink).await, 3);
    let mut recipients: Vec<String> = sink.messages().iter().flat_map(|m| m.to.clone()).collect();
    recipients.sort();
    assert_eq!(
        recipients,
        [
            "late0@example.com",
            "late1@example.com",
            "late2@example.com"
        ]
    );
}

/// A global rule is counted in process, not in Redis per invite: one instance decides exactly
/// on its own count, the shared key learns nothing until a flush, and shutdown flushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_rule_is_counted_in_process_and_flushed_to_redis() {
    let prefix = crate::support::unique_prefix("global");
    let stage = Stage::start_prepared(
        "global",
        async |pool| {
            rules::set(pool, "global-minute", |r| {
                r.limit = 5;
                r.action = "suppress".into();
            })
            .await
        },
        |cfg| {
            cfg.key_prefix = prefix.as_str().to_owned();
            // No periodic flush within the test: only the one at start and the one at shutdown.
            cfg.global_flush_ms = 600_000;
        },
    )
    .await;
    let api = Api::new(
        format!("http://{}", stage.app.addr),
        api_key(&stage.pool).await,
    );
    for n in 0..8 {
        let resp = api
            .invite(json!({"sender_id": format!("g{n}"), "recipient": format!("g{n}@example.com")}))
            .await;
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let suppressed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'suppressed'")
            .fetch_one(&stage.pool)
            .await
            .expect("count");
    assert_eq!(suppressed, 3, "exactly the limit admitted by one instance");

    let quota = sendguard::limiter::Quota::new(
        5,
        60,
        sendguard::limiter::Algorithm::HashCounters(Default::default()),
    );
    let key = prefix.key("global", "global-minute", &quota);
    let limiter = sendguard::limiter::Limiter::Redis(crate::support::redis_store().await);
    let shared = || async {
        limiter
            .check(&key, &quota, 0, None)
            .await
            .expect("read the shared key")
            .count
    };
    assert_eq!(
        shared().await,
        0,
        "no invite went to the shared key one by one"
    );
    stage.app.shutdown().await;
    assert_eq!(
        shared().await,
        5,
        "shutdown flushed the five admitted invites"
    );
}

/// Forty invites of one new sender at once, limit 5: the counters admit exactly five, and no
/// admitted invite is held because a later invite of the same burst banned the sender first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_sends_exactly_the_limit() {
    let stage = Stage::start_prepared(
        "burst",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 5).await,
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let burst: Vec<_> = (0..40)
        .map(|n| {
            let api = api.clone();
            tokio::spawn(async move {
                api.send(json!({"sender_id": "burst", "recipient": format!("b{n}@example.com")}))
                    .await
                    .0
            })
        })
        .collect();
    for answer in burst {
        assert_eq!(answer.await.expect("task"), StatusCode::OK);
    }
    assert_eq!(stage.settle().await, 5, "exactly the limit is delivered");
    assert_eq!(
        status_counts(&stage.pool, "burst").await,
        [("held".to_owned(), 35), ("sent".to_owned(), 5)]
    );
}

/// The public URL is the base of every email's unsubscribe and report links: one an email may
/// not carry (plain http to another machine, a user and password in it, no URL at all) stops
/// the start with a message naming it, instead of links that go nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_refuses_a_public_url_its_emails_cannot_carry() {
    let (db, _pool) = migrated("publicurl", &[]).await;
    for bad in [
        "http://links.example",
        "https://user:secret@links.example",
        "links.example",
    ] {
        let mut cfg = config(&db, None);
        cfg.public_url = bad.to_owned();
        match sendguard::start(&cfg).await {
            Err(sendguard::StartError::Config(e)) => {
                assert!(e.contains("SENDGUARD_PUBLIC_URL"), "{bad}: {e}")
            }
            Err(e) => panic!("{bad}: {e}"),
            Ok(_) => panic!("{bad}: started"),
        }
    }
    let mut cfg = config(&db, None);
    cfg.public_url = "https://links.example".to_owned();
    let app = sendguard::start(&cfg).await.expect("an https public URL");
    app.shutdown().await;
}
