//! One delivery attempt: the target checked again, then a signed POST whose answer's status is
//! all that is read. The client never follows a redirect, uses no proxy, and resolves names
//! only through the target check.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use reqwest::header::CONTENT_TYPE;
use reqwest::redirect::Policy;
use reqwest::{StatusCode, Url};
use uuid::Uuid;

use super::sign::signatures;
use super::target::{CheckedResolver, check_form};
use super::{SecretBox, WebhookError};

/// Bound on one attempt, from connecting to the answer's status line.
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest `last_error` kept.
const MAX_ERROR: usize = 500;

/// What an attempt sends, and where: an event's id and body with its app's target as it is now.
pub(super) struct Delivery<'a> {
    pub(super) id: Uuid,
    pub(super) payload: &'a str,
    pub(super) webhook_url: Option<&'a str>,
    /// Sealed, as stored.
    pub(super) webhook_secret: Option<&'a str>,
    /// The secret before a rotation, sealed, while it still signs.
    pub(super) previous_webhook_secret: Option<&'a str>,
}

#[derive(Debug)]
pub(super) enum Outcome {
    Delivered(u16),
    Failed {
        status: Option<u16>,
        error: String,
    },
    /// Nothing to attempt: the app has no target any more.
    GiveUp(&'static str),
}

/// The delivery client. Its only resolver is the target check's.
pub(super) fn client(allow_private: bool) -> Result<reqwest::Client, WebhookError> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(CheckedResolver { allow_private }))
        // A proxy would resolve and connect for us, past the resolver's check.
        .no_proxy()
        .redirect(Policy::none())
        .https_only(!allow_private)
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("sendguard-webhooks/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| WebhookError::Client(e.to_string()))
}

/// One attempt: the target checked again, then a signed POST. No connection is made to a
/// target that fails the check; only the status of the answer is read. Signed with the app's
/// secret and, during a rotation, the previous one too.
pub(super) async fn attempt(
    client: &reqwest::Client,
    event: Delivery<'_>,
    secrets: &SecretBox,
    allow_private: bool,
) -> Outcome {
    let Some(url) = present(event.webhook_url) else {
        return Outcome::GiveUp("the app has no webhook URL any more");
    };
    let Some(secret) = present(event.webhook_secret) else {
        return Outcome::GiveUp("the app has no webhook secret");
    };
    let failed = |error: WebhookError| Outcome::Failed {
        status: None,
        error: truncate(error.to_string()),
    };
    let url = match Url::parse(url) {
        Ok(url) => url,
        Err(e) => return failed(WebhookError::InvalidUrl(e.to_string())),
    };
    if let Err(e) = check_form(&url, allow_private) {
        return failed(e);
    }
    let id = event.id.to_string();
    // The timestamp of this attempt, not of the event: receivers refuse old ones.
    let timestamp = Utc::now().timestamp();
    let opened = std::iter::once(secret)
        .chain(present(event.previous_webhook_secret))
        .map(|sealed| secrets.open(sealed).map(|o| o.secret))
        .collect::<Result<Vec<_>, _>>();
    let signed = opened.and_then(|secrets| {
        signatures(
            secrets.iter().map(String::as_str),
            &id,
            timestamp,
            event.payload,
        )
    });
    let signature = match signed {
        Ok(signature) => signature,
        Err(e) => return failed(e),
    };
    let sent = client
        .post(url)
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header(CONTENT_TYPE, "application/json")
        .body(event.payload.to_owned())
        .send()
        .await;
    match sent {
        // The body is dropped unread.
        Ok(answer) if answer.status().is_success() => Outcome::Delivered(answer.status().as_u16()),
        Ok(answer) => Outcome::Failed {
            status: Some(answer.status().as_u16()),
            error: answered(answer.status()),
        },
        Err(e) => Outcome::Failed {
            status: None,
            error: truncate(describe(&e)),
        },
    }
}

fn present(v: Option<&str>) -> Option<&str> {
    v.map(str::trim).filter(|v| !v.is_empty())
}

fn answered(status: StatusCode) -> String {
    if status.is_redirection() {
        format!("the receiver answered {status} (redirects are not followed)")
    } else {
        format!("the receiver answered {status}")
    }
}

/// A failed request in words: the target check's own message when the resolver refused the
/// host, otherwise the chain of causes.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return format!("no answer within {} s", ATTEMPT_TIMEOUT.as_secs());
    }
    let mut causes: Vec<String> = Vec::new();
    let mut source = e.source();
    for _ in 0..16 {
        let Some(cause) = source else { break };
        if let Some(refused) = cause.downcast_ref::<WebhookError>() {
            return refused.to_string();
        }
        let text = cause.to_string();
        if causes.last() != Some(&text) {
            causes.push(text);
        }
        source = cause.source();
    }
    let head = if e.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    if causes.is_empty() {
        head.to_owned()
    } else {
        format!("{head}: {}", causes.join(": "))
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_ERROR {
        let mut end = MAX_ERROR;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_on_a_character_boundary() {
        let cut = truncate("é".repeat(MAX_ERROR));
        assert!(cut.len() <= MAX_ERROR && cut.chars().all(|c| c == 'é'));
        assert_eq!(truncate("short".into()), "short");
    }

    #[test]
    fn a_redirect_is_named_as_not_followed() {
        let text = answered(StatusCode::TEMPORARY_REDIRECT);
        assert!(
            text.contains("307") && text.contains("not followed"),
            "{text}"
        );
        assert_eq!(
            answered(StatusCode::SERVICE_UNAVAILABLE),
            "the receiver answered 503 Service Unavailable"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_described_with_its_cause() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let client = client(true).expect("client");
        let e = client
            .post(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .expect_err("nothing listens there");
        let text = describe(&e);
        assert!(text.starts_with("cannot connect: "), "{text}");
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }
}
