//! The send-invite API as a client app calls it: a bearer key and JSON bodies.

use reqwest::StatusCode;
use serde_json::{Value, json};

#[derive(Clone)]
pub struct Api {
    /// `http://host:port` of one instance.
    pub base: String,
    pub key: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: impl Into<String>, key: impl Into<String>) -> Api {
        Api {
            base: base.into(),
            key: key.into(),
            http: reqwest::Client::new(),
        }
    }

    /// The same key at another instance.
    pub fn at(&self, base: impl Into<String>) -> Api {
        Api {
            base: base.into(),
            ..self.clone()
        }
    }

    pub fn url(&self) -> String {
        format!("{}/api/v1/invites", self.base)
    }

    pub async fn invite(&self, body: Value) -> reqwest::Response {
        self.http
            .post(self.url())
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .expect("request")
    }

    /// Sends an invite; answers its status and, when accepted, its id.
    pub async fn send(&self, body: Value) -> (StatusCode, Option<String>) {
        status_and_id(self.invite(body).await).await
    }

    /// As `send`, with an `Idempotency-Key`.
    pub async fn send_keyed(&self, key: &str, body: &Value) -> (StatusCode, Option<String>) {
        let resp = self
            .http
            .post(self.url())
            .bearer_auth(&self.key)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .expect("request");
        status_and_id(resp).await
    }

    /// Reports outcome `kind` of `invite` (`POST /api/v1/events`); answers the status.
    pub async fn event(&self, invite: &str, kind: &str) -> StatusCode {
        self.http
            .post(format!("{}/api/v1/events", self.base))
            .bearer_auth(&self.key)
            .json(&json!({"invite_id": invite, "type": kind}))
            .send()
            .await
            .expect("event")
            .status()
    }

    /// Passes on `sender`'s appeal (`POST /api/v1/appeals`); answers the status and the body.
    pub async fn appeal(&self, sender: &str, text: &str) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}/api/v1/appeals", self.base))
            .bearer_auth(&self.key)
            .json(&json!({"sender_id": sender, "text": text}))
            .send()
            .await
            .expect("appeal");
        (resp.status(), resp.json().await.unwrap_or_default())
    }

    /// Reads a sender's standing (`GET /api/v1/senders/{id}`, the id percent-encoded as one
    /// segment); answers the status and the body.
    pub async fn standing(&self, sender: &str) -> (StatusCode, Value) {
        let resp = self
            .http
            .get(format!(
                "{}/api/v1/senders/{}",
                self.base,
                sendguard::urls::component(sender)
            ))
            .bearer_auth(&self.key)
            .send()
            .await
            .expect("standing");
        (resp.status(), resp.json().await.unwrap_or_default())
    }

    /// An invite that must be answered 200; answers its id.
    pub async fn accepted(&self, sender: &str, recipient: &str) -> String {
        let (status, id) = self
            .send(json!({"sender_id": sender, "recipient": recipient}))
            .await;
        assert_eq!(status, StatusCode::OK, "invite from {sender}");
        id.expect("the invite's id")
    }
}

async fn status_and_id(resp: reqwest::Response) -> (StatusCode, Option<String>) {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or_default();
    (status, body["id"].as_str().map(str::to_owned))
}
