//! A webhook receiver on 127.0.0.1: a real HTTP server that checks every request with the
//! Standard Webhooks reference library (the three headers, a timestamp within five minutes, any
//! of several `v1,` signatures, compared in constant time) and keeps what it accepted. It can
//! refuse the first valid deliveries with 503, as a receiver that is down for a while.
//! Also a server that answers everything with a redirect, to show redirects are not followed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How far a timestamp may be from now, either way.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// One delivery the receiver verified and accepted.
#[derive(Debug, Clone)]
pub struct Received {
    pub id: String,
    pub kind: String,
    pub timestamp: i64,
    /// The `webhook-signature` header as it arrived.
    pub signature: String,
    /// The body as it arrived.
    pub raw: String,
    pub body: serde_json::Value,
}

/// Why a request was refused with 401.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    MissingHeader(&'static str),
    BadTimestamp,
    TooOld,
    TooNew,
    BadSignature,
}

/// The receiving side of the scheme, for one secret.
pub struct Verifier(standardwebhooks::Webhook);

impl Verifier {
    /// From a `whsec_` secret (the prefix is optional, as in the scheme's libraries).
    pub fn new(secret: &str) -> Verifier {
        Verifier(standardwebhooks::Webhook::new(secret).expect("a base64 webhook secret"))
    }

    /// The event id and timestamp of a request whose headers and signature check out now.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(String, i64), Refusal> {
        use standardwebhooks::WebhookError as E;
        self.0.verify(body, headers).map_err(|e| match e {
            E::MissingHeader(name) | E::InvalidHeader(name) => Refusal::MissingHeader(match name {
                "id" => "webhook-id",
                "timestamp" => "webhook-timestamp",
                _ => "webhook-signature",
            }),
            E::InvalidTimestamp => Refusal::BadTimestamp,
            E::TimestampTooOldError => Refusal::TooOld,
            E::FutureTimestampError => Refusal::TooNew,
            _ => Refusal::BadSignature,
        })?;
        let header = |name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .expect("verified")
        };
        let timestamp = header("webhook-timestamp").parse().expect("verified");
        Ok((header("webhook-id").to_owned(), timestamp))
    }
}

pub fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

struct Shared {
    verifier: Verifier,
    refuse_first: usize,
    requests: AtomicUsize,
    /// The webhook-id of every verified request, refused with 503 or accepted, in order.
    verified: Mutex<Vec<String>>,
    received: Mutex<Vec<Received>>,
}

pub struct WebhookReceiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl WebhookReceiver {
    /// Listens on a random loopback port; answers 503 to the first `refuse_first` valid
    /// deliveries, 200 to the others, 401 to any that fails verification.
    pub async fn start(secret: &str, refuse_first: usize) -> WebhookReceiver {
        let shared = Arc::new(Shared {
            verifier: Verifier::new(secret),
            refuse_first,
            requests: AtomicUsize::new(0),
            verified: Mutex::default(),
            received: Mutex::default(),
        });
        let router = Router::new().fallback(receive).with_state(shared.clone());
        let (addr, task) = serve(router).await;
        WebhookReceiver { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hooks/sendguard", self.addr)
    }

    /// Every delivery verified and accepted, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("receiver lock").clone()
    }

    /// The webhook-id of every verified request, including those refused with 503.
    pub fn verified_ids(&self) -> Vec<String> {
        self.shared.verified.lock().expect("receiver lock").clone()
    }

    /// Every request that reached the receiver, verified or not.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Waits until `n` deliveries were accepted or `timeout` passes; returns whether they were.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.received().len() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Stops accepting connections.
impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let (id, timestamp) = match shared.verifier.verify(&headers, &body) {
        Ok(verified) => verified,
        Err(refusal) => return (StatusCode::UNAUTHORIZED, format!("{refusal:?}")),
    };
    let valid_so_far = {
        let mut verified = shared.verified.lock().expect("receiver lock");
        verified.push(id.clone());
        verified.len()
    };
    if valid_so_far <= shared.refuse_first {
        return (StatusCode::SERVICE_UNAVAILABLE, "down for now".into());
    }
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "the body is not JSON".into());
    };
    let received = Received {
        id,
        kind: json["type"].as_str().unwrap_or_default().to_owned(),
        timestamp,
        signature: headers
            .get("webhook-signature")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        raw: String::from_utf8_lossy(&body).into_owned(),
        body: json,
    };
    shared
        .received
        .lock()
        .expect("receiver lock")
        .push(received);
    (StatusCode::OK, String::new())
}

/// Answers every request with a 307 to `location`, counting them.
pub struct Redirector {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Redirector {
    pub async fn start(location: String) -> Redirector {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let router = Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let location = location.clone();
            async move {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, location)],
                )
            }
        });
        let (addr, task) = serve(router).await;
        Redirector { addr, hits, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Redirector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(router: Router) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("receiver address");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (addr, task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const BODY: &str = r#"{"type":"sender.banned","data":{"sender_id":"u1"}}"#;

    fn signed(id: &str, timestamp: i64, body: &str) -> HeaderMap {
        let signature = sendguard::webhooks::sign(SECRET, id, timestamp, body).expect("signs");
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_str(id).expect("id"));
        headers.insert("webhook-timestamp", timestamp.into());
        headers.insert(
            "webhook-signature",
            HeaderValue::from_str(&signature).expect("signature"),
        );
        headers
    }

    #[test]
    fn a_signed_request_passes() {
        let now = unix_now();
        let verified = Verifier::new(SECRET).verify(&signed("e1", now, BODY), BODY.as_bytes());
        assert_eq!(verified, Ok(("e1".to_owned(), now)));
    }

    #[test]
    fn a_tampered_body_or_id_is_refused() {
        let now = unix_now();
        let verifier = Verifier::new(SECRET);
        let headers = signed("e1", now, BODY);
        let tampered = BODY.replace("u1", "u2");
        assert_eq!(
            verifier.verify(&headers, tampered.as_bytes()),
            Err(Refusal::BadSignature)
        );
        let mut other_id = headers.clone();
        other_id.insert("webhook-id", HeaderValue::from_static("e2"));
        assert_eq!(
            verifier.verify(&other_id, BODY.as_bytes()),
            Err(Refusal::BadSignature)
        );
        let wrong_secret = Verifier::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
        assert_eq!(
            wrong_secret.verify(&headers, BODY.as_bytes()),
            Err(Refusal::BadSignature)
        );
    }

    #[test]
    fn an_old_or_future_timestamp_is_refused() {
        let now = unix_now();
        let verifier = Verifier::new(SECRET);
        let old = now - TOLERANCE_SECS - 1;
        assert_eq!(
            verifier.verify(&signed("e1", old, BODY), BODY.as_bytes()),
            Err(Refusal::TooOld)
        );
        let future = now + TOLERANCE_SECS + 1;
        assert_eq!(
            verifier.verify(&signed("e1", future, BODY), BODY.as_bytes()),
            Err(Refusal::TooNew)
        );
        // Within the tolerance, by a few seconds for the clock to move on while the test runs.
        let edge = now - TOLERANCE_SECS + 5;
        assert!(
            verifier
                .verify(&signed("e1", edge, BODY), BODY.as_bytes())
                .is_ok()
        );
        let mut garbled = signed("e1", now, BODY);
        garbled.insert("webhook-timestamp", HeaderValue::from_static("soon"));
        assert_eq!(
            verifier.verify(&garbled, BODY.as_bytes()),
            Err(Refusal::BadTimestamp)
        );
    }

    #[test]
    fn every_header_is_required() {
        let now = unix_now();
        let verifier = Verifier::new(SECRET);
        for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let mut headers = signed("e1", now, BODY);
            headers.remove(name);
            assert_eq!(
                verifier.verify(&headers, BODY.as_bytes()),
                Err(Refusal::MissingHeader(name))
            );
        }
    }

    #[test]
    fn any_of_several_v1_signatures_passes() {
        let now = unix_now();
        let verifier = Verifier::new(SECRET);
        let valid = sendguard::webhooks::sign(SECRET, "e1", now, BODY).expect("signs");
        let bogus = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=";
        let mut headers = signed("e1", now, BODY);
        let several = format!("{bogus} {valid} {bogus}");
        headers.insert(
            "webhook-signature",
            HeaderValue::from_str(&several).expect("h"),
        );
        assert!(verifier.verify(&headers, BODY.as_bytes()).is_ok());
        // The right MAC under another version does not count.
        let v2 = valid.replacen("v1,", "v2,", 1);
        headers.insert("webhook-signature", HeaderValue::from_str(&v2).expect("h"));
        assert_eq!(
            verifier.verify(&headers, BODY.as_bytes()),
            Err(Refusal::BadSignature)
        );
    }
}
