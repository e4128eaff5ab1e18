//! `/metrics`, on its own listener, after a scripted scenario: the counters moved as the
//! scenario says.

use std::time::Duration;

use crate::support::app::{Stage, api_key, listening, queued, series, wait_for};
use crate::support::rules;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_scripted_scenario() {
    let stage = Stage::start_prepared(
        "metrics",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 2).await,
        |_| {},
    )
    .await;
    let (pool, sink, app) = (&stage.pool, &stage.sink, &stage.app);
    // The standings read below are counted from a cache the change listener has emptied once.
    assert!(
        listening(&stage.db.name).await,
        "the change listener connects"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let base = format!("http://{}", app.addr);
    let key = api_key(pool).await;
    let http = reqwest::Client::new();
    // Three invites from one sender (the third held), one bad request.
    for n in 0..3 {
        let resp = http
            .post(format!("{base}/api/v1/invites"))
            .bearer_auth(&key)
            .header("x-request-id", format!("scenario-{n}"))
            .json(&json!({"sender_id": "m", "recipient": format!("m{n}@example.com")}))
            .send()
            .await
            .expect("invite");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["x-request-id"],
            format!("scenario-{n}").as_str()
        );
    }
    let bad = http
        .post(format!("{base}/api/v1/invites"))
        .bearer_auth(&key)
        .json(&json!({"sender_id": "m"}))
        .send()
        .await
        .expect("invite");
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.headers().contains_key("x-request-id"),
        "a new id when none was sent"
    );
    wait_for(Duration::from_secs(10), || async {
        queued(pool).await == 0 && sink.messages().len() == 2
    })
    .await;

    let resp = http
        .get(format!("http://{}/metrics", app.metrics_addr))
        .send()
        .await
        .expect("metrics");
    assert_eq!(
        resp.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = resp.text().await.expect("text");
    assert!(text.ends_with("\n# EOF\n"), "one closing line in\n{text}");
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    let expect = |name: &str, value: f64| {
        assert_eq!(series(&text, name), Some(value), "{name} in\n{text}");
    };
    expect("sendguard_invites_total{status=\"queued\"}", 2.0);
    expect("sendguard_invites_total{status=\"held\"}", 1.0);
    expect("sendguard_invites_total{status=\"sent\"}", 2.0);
    expect(
        "sendguard_decisions_total{rule=\"sender-hourly\",action=\"shadow_ban\",outcome=\"exceeded\"}",
        1.0,
    );
    expect(
        "sendguard_decisions_total{rule=\"sender-hourly\",action=\"shadow_ban\",outcome=\"ok\"}",
        2.0,
    );
    expect("sendguard_redis_seconds_count", 3.0);
    expect("sendguard_postgres_seconds_count", 3.0);
    // The sender's first invite read its standing; the next two found it cached.
    expect("sendguard_sender_read_seconds_count", 1.0);
    // One at a time: a batch each.
    expect("sendguard_batch_invites_count", 3.0);
    expect("sendguard_batch_invites_sum", 3.0);
    expect("sendguard_batch_retries_total", 0.0);
    expect("sendguard_smtp_seconds_count", 2.0);
    expect(
        "sendguard_http_request_seconds_count{route=\"/api/v1/invites\",status=\"200\"}",
        3.0,
    );
    expect(
        "sendguard_http_request_seconds_count{route=\"/api/v1/invites\",status=\"422\"}",
        1.0,
    );
    expect("sendguard_outbox_queue_depth", 0.0);
    expect("sendguard_senders_awaiting_review", 1.0);
}
