//! Strict, predictable input for integrators (docs/DESIGN.md §4): an unknown field is refused by
//! name, the Idempotency-Key compares what a body means, an `accept_url` on a host the app does
//! not list says how to add it, and without `SENDGUARD_PUBLIC_URL` links point at the listener.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::api::Api;
use crate::support::app::{self, Stage, TestDb, wait_for};
use crate::support::serve::ServeProcess;
use crate::support::smtp::SmtpSink;

/// Posts `body` as it is written, bytes and all.
async fn post_raw(api: &Api, path: &str, key: Option<&str>, body: &str) -> (StatusCode, Value) {
    let mut request = api
        .http
        .post(format!("{}{path}", api.base))
        .bearer_auth(&api.key)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or_default())
}

/// `acceptUrl` and `senderName` were dropped silently, and the email said "Someone" with no
/// link: an unknown field of an invite or an event is a 422 that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_field_is_refused_by_name() {
    let stage = Stage::start("unknownfield", &[]).await;
    let api = Api::new(stage.base(), app::api_key(&stage.pool).await);
    for (field, value) in [("acceptUrl", "https://x.example/a"), ("senderName", "Bo")] {
        let mut body = json!({"sender_id": "u1", "recipient": "ana@example.com"});
        body[field] = json!(value);
        let (status, problem) = post_raw(&api, "/api/v1/invites", None, &body.to_string()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("unknown field") && detail.contains(field),
            "{detail}"
        );
    }
    assert_eq!(stage.settle().await, 0, "nothing was sent");

    let id = api.accepted("u1", "bea@example.com").await;
    let event = json!({"invite_id": id, "type": "bounce", "kind": "hard"});
    let (status, problem) = post_raw(&api, "/api/v1/events", None, &event.to_string()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "kind", "{problem}");
}

/// The same JSON value is the same request whatever its key order, whitespace or escapes, and
/// a `null` field is an absent one; another value is still a conflict. A key stored before
/// hashes were of the meaning (a hash of the raw bytes) answers its first invite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotency_key_compares_the_meaning_of_the_body() {
    let stage = Stage::start("idemmeaning", &[]).await;
    let api = Api::new(stage.base(), app::api_key(&stage.pool).await);
    let first = r#"{"sender_id":"u1","recipient":"ana@example.com","message":"hi"}"#;
    let (status, answer) = post_raw(&api, "/api/v1/invites", Some("k-1"), first).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let id = answer["id"].clone();
    let same = [
        r#"{ "message": "hi", "recipient": "ana@example.com", "sender_id": "u1" }"#,
        r#"{"recipient":"ana@example.com","sender_id":"\u0075\u0031","message":"h\u0069"}"#,
        r#"{"sender_id":"u1","recipient":"ana@example.com","message":"hi","resource":null}"#,
    ];
    for body in same {
        let (status, answer) = post_raw(&api, "/api/v1/invites", Some("k-1"), body).await;
        assert_eq!(status, StatusCode::OK, "{body}: {answer}");
        assert_eq!(answer["id"], id, "{body}");
    }
    let other = r#"{"sender_id":"u1","recipient":"ana@example.com","message":"hello"}"#;
    let (status, _) = post_raw(&api, "/api/v1/invites", Some("k-1"), other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "another body");

    // As stored before the upgrade: the SHA-256 of the bytes.
    sqlx::query("UPDATE idempotency_keys SET request_hash = sha256(convert_to($1, 'UTF8'))")
        .bind(first)
        .execute(&stage.pool)
        .await
        .expect("an old hash");
    let (status, answer) = post_raw(&api, "/api/v1/invites", Some("k-1"), same[0]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["id"], id);
    assert_eq!(stage.settle().await, 1, "sent once");
}

/// An `accept_url` on a host the app does not list says how to add the host, keeping the
/// hosts it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlisted_link_host_says_how_to_add_it() {
    let stage = Stage::start(
        "linkhint",
        &["UPDATE apps SET link_hosts = '{app.example}' WHERE name = 'default'"],
    )
    .await;
    let api = Api::new(stage.base(), app::api_key(&stage.pool).await);
    let body = json!({"sender_id": "u1", "recipient": "ana@example.com",
        "accept_url": "https://docs.example/join/1"});
    let (status, problem) = post_raw(&api, "/api/v1/invites", None, &body.to_string()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "accept_url");
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(
            "sendguard app update default --link-host app.example --link-host docs.example"
        ),
        "{detail}"
    );
    // A host that is no name a DNS server could hold is refused, never pasted into a command
    // an operator might run.
    for host in ["$(id)", "a;b", "`x`", "a&&b"] {
        let body = json!({"sender_id": "u1", "recipient": "ana@example.com",
            "accept_url": format!("https://{host}/join/1")});
        let (status, problem) = post_raw(&api, "/api/v1/invites", None, &body.to_string()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["field"], "accept_url");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(!detail.contains(host), "{detail}");
    }
}

/// The authentication scheme is case-insensitive (RFC 9110, section 11.1): `bearer` is
/// `Bearer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_read_in_any_case() {
    let stage = Stage::start("bearercase", &[]).await;
    let api = Api::new(stage.base(), app::api_key(&stage.pool).await);
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let response = api
            .http
            .post(format!("{}/api/v1/invites", api.base))
            .header("authorization", format!("{scheme} {}", api.key))
            .json(&json!({"sender_id": "u1", "recipient": "ana@example.com"}))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
    }
}

/// Without `SENDGUARD_PUBLIC_URL`, the email's links point at the address `serve` listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_public_url_links_point_at_the_listener() {
    let db = TestDb::create("publicurl").await;
    let pool = db.pool().await;
    let key = app::api_key(&pool).await;
    let sink = SmtpSink::start().await;
    let prefix = crate::support::unique_prefix("publicurl");
    let serve = ServeProcess::start(
        &db.url,
        prefix.as_str(),
        &[("SENDGUARD_SMTP_URL", sink.url())],
    )
    .await;
    let api = Api::new(&serve.base, key);
    api.accepted("u1", "ana@example.com").await;
    let sent = wait_for(Duration::from_secs(15), || async {
        !sink.messages().is_empty()
    })
    .await;
    assert!(sent, "the invite was sent");
    let text = sink.messages()[0].text();
    assert!(
        text.contains(&format!("{}/", serve.base)),
        "links under {}: {text}",
        serve.base
    );
}
