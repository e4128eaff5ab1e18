//! Outgoing webhooks: each app is told about moderation events by a signed HTTP POST, in the
//! Standard Webhooks scheme (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,...`).
//!
//! Callers write an event into the outbox (`webhook_events`) inside their own transaction with
//! [`enqueue`], so an event exists exactly when the change it reports was committed. The
//! [`Deliverer`] claims due events and posts them, retrying with backoff until delivered.
//! A target URL is checked when an app is saved ([`check_url`]) and again at every delivery,
//! down to the address actually connected to.

mod attempt;
mod deliver;
pub mod seal;
mod sign;
mod target;

use std::fmt;
use std::net::IpAddr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

pub use deliver::{Deliverer, WebhookSettings};
pub use seal::{Opened, SecretBox};
pub use sign::{new_secret, sign};
pub use target::check_url;

/// What happened, as named on the wire (`type` in the body).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    SenderShadowBanned,
    SenderBanned,
    SenderLifted,
    SenderTrusted,
    InviteHeld,
    CampaignDetected,
    AppealDecided,
}

impl EventType {
    pub const ALL: [EventType; 7] = [
        EventType::SenderShadowBanned,
        EventType::SenderBanned,
        EventType::SenderLifted,
        EventType::SenderTrusted,
        EventType::InviteHeld,
        EventType::CampaignDetected,
        EventType::AppealDecided,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SenderShadowBanned => "sender.shadow_banned",
            EventType::SenderBanned => "sender.banned",
            EventType::SenderLifted => "sender.lifted",
            EventType::SenderTrusted => "sender.trusted",
            EventType::InviteHeld => "invite.held",
            EventType::CampaignDetected => "campaign.detected",
            EventType::AppealDecided => "appeal.decided",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong with a webhook target, secret or the deliverer's settings. The
/// messages are shown to operators as they are.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("the webhook URL is not a valid URL: {0}")]
    InvalidUrl(String),
    #[error("the webhook URL is longer than {0} characters")]
    UrlTooLong(usize),
    #[error("the webhook URL must use https, not {0}")]
    Scheme(String),
    #[error("the webhook URL must not contain a user name or password")]
    Credentials,
    #[error("the webhook URL has no host")]
    NoHost,
    #[error("the webhook URL points to {addr}, {reason}; webhooks go to public addresses only")]
    RefusedAddress { addr: IpAddr, reason: &'static str },
    #[error(
        "the webhook host {host} resolves to {addr}, {reason}; webhooks go to public addresses only"
    )]
    RefusedHost {
        host: String,
        addr: IpAddr,
        reason: &'static str,
    },
    #[error("the webhook host {host} could not be resolved: {error}")]
    Resolve { host: String, error: String },
    #[error("the webhook host {0} has no address")]
    NoAddress(String),
    #[error("the webhook secret is not of the form whsec_<base64>")]
    Secret,
    #[error(
        "a stored webhook secret opens with neither the secret key nor the previous one \
         (set SENDGUARD_PREVIOUS_SECRET_KEY to the key it was sealed with)"
    )]
    Sealed,
    #[error("invalid webhook settings: {0}")]
    Settings(String),
    #[error("cannot build the webhook HTTP client: {0}")]
    Client(String),
}

/// The body of every webhook, in the order its fields are written.
#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: &'a Map<String, Value>,
}

/// Writes one event into the outbox inside the caller's transaction; returns its id, which is
/// also the `webhook-id` of every attempt to deliver it. `data` gets `"app": app_name`. The body
/// is serialized here, once, and stored as it will be signed and sent.
pub async fn enqueue(
    conn: &mut PgConnection,
    app_id: i64,
    app_name: &str,
    kind: EventType,
    at: DateTime<Utc>,
    mut data: Map<String, Value>,
) -> Result<Uuid, sqlx::Error> {
    data.insert("app".into(), Value::String(app_name.to_owned()));
    let body = Body {
        kind: kind.as_str(),
        timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
        data: &data,
    };
    let payload = serde_json::to_string(&body).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO webhook_events (id, app_id, type, payload) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(app_id)
        .bind(kind.as_str())
        .bind(payload)
        .execute(conn)
        .await?;
    Ok(id)
}

/// One event of an app and where its delivery stands, for the dashboard.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Delivery {
    pub id: Uuid,
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub attempts: i32,
    pub delivered_at: Option<DateTime<Utc>>,
    pub gave_up_at: Option<DateTime<Utc>>,
    pub next_attempt_at: DateTime<Utc>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

/// An app's most recent events, newest first (at most 1,000).
pub async fn recent(pool: &PgPool, app_id: i64, limit: i64) -> Result<Vec<Delivery>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, type AS kind, created_at, attempts, delivered_at, gave_up_at,
                next_attempt_at, last_status, last_error
         FROM webhook_events WHERE app_id = $1
         ORDER BY created_at DESC, id LIMIT $2",
    )
    .bind(app_id)
    .bind(limit.clamp(1, 1000))
    .fetch_all(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names() {
        let names: Vec<String> = EventType::ALL.iter().map(|k| k.to_string()).collect();
        assert_eq!(
            names,
            [
                "sender.shadow_banned",
                "sender.banned",
                "sender.lifted",
                "sender.trusted",
                "invite.held",
                "campaign.detected",
                "appeal.decided"
            ]
        );
    }

    #[test]
    fn the_body_names_type_timestamp_and_data() {
        let mut data = Map::new();
        data.insert("sender_id".into(), "u1".into());
        let at = DateTime::parse_from_rfc3339("2025-03-01T12:00:00Z")
            .expect("a valid time")
            .with_timezone(&Utc);
        let body = Body {
            kind: EventType::InviteHeld.as_str(),
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            data: &data,
        };
        assert_eq!(
            serde_json::to_string(&body).expect("serializes"),
            r#"{"type":"invite.held","timestamp":"2025-03-01T12:00:00.000Z","data":{"sender_id":"u1"}}"#
        );
    }
}
