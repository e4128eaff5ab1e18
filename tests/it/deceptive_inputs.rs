//! Inputs that could deceive a recipient, a reviewer or the mail server are refused at the
//! edge, and every address that is accepted can be sent to.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};

async fn field_refused(api: &Api, body: Value) -> Option<String> {
    let resp = api.invite(body).await;
    if resp.status() != StatusCode::UNPROCESSABLE_ENTITY {
        return None;
    }
    let problem: Value = resp.json().await.expect("problem");
    problem["field"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deceptive_fields_are_refused_naming_the_field() {
    let stage = Stage::start("deceive", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let cases = [
        (
            json!({"sender_id": "u", "recipient": "ana@[127.0.0.1]"}),
            "recipient",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@127.0.0.1"}),
            "recipient",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@[IPv6:::1]"}),
            "recipient",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@example.com", "sender_name": "Pay\u{202e}lap"}),
            "sender_name",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@example.com", "sender_name": "Bo\u{2066}x\u{2069}"}),
            "sender_name",
        ),
        (
            json!({"sender_id": "u\u{2028}v", "recipient": "ana@example.com"}),
            "sender_id",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@example.com", "resource": "doc\u{2029}"}),
            "resource",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@example.com", "message": "see \u{202e}fdp.exe"}),
            "message",
        ),
    ];
    for (body, field) in cases {
        assert_eq!(
            field_refused(&api, body.clone()).await.as_deref(),
            Some(field),
            "{body}"
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM invites")
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(count, 0, "nothing refused was recorded");
    // Line breaks stay allowed in a message.
    let (status, _) = api
        .send(json!({"sender_id": "u", "recipient": "ana@example.com", "message": "line one\nline two"}))
        .await;
    assert_eq!(status, StatusCode::OK);
}

/// The domain is lower-cased and IDNA-encoded before it is counted or used, so the recipient
/// rule cannot be dodged by changing case or script; the message goes out to that address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipients_are_counted_as_one_whatever_their_case_or_script() {
    let stage = Stage::start("recipcase", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for (n, recipient) in [
        "Ana@Example.COM",
        "ana@example.com",
        "ANA@EXAMPLE.com",
        "ana@EXAMPLE.COM",
    ]
    .iter()
    .enumerate()
    {
        api.accepted(&format!("s{n}"), recipient).await;
    }
    let suppressed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'suppressed'")
            .fetch_one(&stage.pool)
            .await
            .expect("count");
    assert_eq!(
        suppressed, 1,
        "the fourth invite to one person is suppressed"
    );

    api.accepted("idn", "Jo@Bücher.Example").await;
    let stored: (String, String) =
        sqlx::query_as("SELECT recipient, recipient_domain FROM invites WHERE sender_id = 'idn'")
            .fetch_one(&stage.pool)
            .await
            .expect("stored");
    assert_eq!(
        stored,
        (
            "jo@xn--bcher-kva.example".to_owned(),
            "xn--bcher-kva.example".to_owned()
        )
    );
    stage.settle().await;
    assert!(
        stage
            .sink
            .messages()
            .iter()
            .any(|m| m.to.iter().any(|t| t == "jo@xn--bcher-kva.example")),
        "the encoded address is the one sent to"
    );
}
