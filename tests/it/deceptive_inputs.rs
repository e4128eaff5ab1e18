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
        // A quoted local part names the same mailbox as the bare one (`"ana"@` is `ana@`) but
        // would be counted and matched against unsubscribes as another; some cannot be sent.
        (
            json!({"sender_id": "u", "recipient": "\"ana\"@example.com"}),
            "recipient",
        ),
        (
            json!({"sender_id": "u", "recipient": "\"a,b\"@example.com"}),
            "recipient",
        ),
        // An encoded word, which mail programs decode in a subject: "paypal.com security".
        (
            json!({"sender_id": "u", "recipient": "ana@example.com",
                   "sender_name": "=?utf-8?b?cGF5cGFsLmNvbSBzZWN1cml0eQ==?="}),
            "sender_name",
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

/// Invisible format characters, and names that read as a domain once normalised or once their
/// look-alike dots are read as dots, are refused naming the field (docs/DESIGN.md §4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisible_characters_and_look_alike_names_are_refused() {
    let stage = Stage::start("lookalike", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let named =
        |name: &str| json!({"sender_id": "u", "recipient": "ana@example.com", "sender_name": name});
    let mut cases = vec![
        (
            json!({"sender_id": "u\u{200b}", "recipient": "ana@example.com"}),
            "sender_id",
        ),
        (
            json!({"sender_id": "u", "recipient": "ana@example.com", "resource": "doc\u{00ad}42"}),
            "resource",
        ),
    ];
    for name in [
        "paypal\u{200b}.com",
        "PayPal.Com",
        "Paypal.Com Security",
        "paypal . com",
        "paypal·com",
        "paypal,com",
        "Bo\u{2060}b",
        "\u{feff}Bo",
        "Bo\u{00ad}b",
        // Joiners where no script needs them.
        "pay\u{200c}pal",
        "Bo\u{200d}b",
    ] {
        cases.push((named(name), "sender_name"));
    }
    for (body, field) in cases {
        assert_eq!(
            field_refused(&api, body.clone()).await.as_deref(),
            Some(field),
            "{body}"
        );
    }

    // Joiners where a script or an emoji needs them, and commas in prose, pass.
    for (n, name) in [
        "👩\u{200d}💻 Ana",
        "👩🏽\u{200d}💻",
        "🏳\u{fe0f}\u{200d}🌈 Bo",
        "می\u{200c}خواهم",
        "क्\u{200d}षमा",
        "Acme, Inc",
        "Ana, Paris",
        "Dr. Love",
        "J. R. R. Tolkien",
    ]
    .iter()
    .enumerate()
    {
        let (status, _) = api
            .send(json!({"sender_id": format!("ok{n}"), "recipient": format!("r{n}@example.com"), "sender_name": name}))
            .await;
        assert_eq!(status, StatusCode::OK, "{name}");
    }
}
