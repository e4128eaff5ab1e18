//! The app's side of a ban (docs/DESIGN.md §4): `POST /api/v1/appeals` passes on its user's
//! appeal, `GET /api/v1/senders/{sender_id}` reads its sender's standing for its own servers
//! and support tools.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{AppealError, Standing};
use crate::http::{ApiError, ApiKey, Problem, RetryAfter, json_object, require_json};
use crate::invites::validate::{free_text, sender_id_is_valid};
use crate::moderation::SenderState;
use crate::sender_key::SenderKey;

/// The fields of [`AppealRequest`].
const FIELDS: &[&str] = &["sender_id", "text"];

/// What the handlers need.
#[derive(Clone)]
pub struct AppealsApi {
    pub pool: PgPool,
}

/// A banned sender's appeal, in the user's words. Any other field is refused by name.
#[derive(Debug, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"sender_id": "u_123", "text": "I was inviting my own team."})))]
pub struct AppealRequest {
    /// The sender's account in the calling app; no control or invisible format characters.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub sender_id: String,
    /// The user's words, not blank: line breaks and tabs allowed, no other control characters
    /// and no bidirectional controls.
    #[schema(
        min_length = 1,
        max_length = 2000,
        pattern = r"^[^\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u0008\u000b-\u000c\u000e-\u001f\u007f-\u009f]*$"
    )]
    pub text: String,
}

/// An appeal received.
#[derive(Debug, Serialize, ToSchema)]
pub struct AppealReceipt {
    pub id: Uuid,
    #[schema(inline)]
    pub status: ReceiptStatus,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptStatus {
    Open,
}

/// Pass on a banned sender's appeal
///
/// The user asks for their ban to be reviewed again. Moderators answer it, and the app hears the
/// outcome and the reply through the `appeal.decided` webhook.
#[utoipa::path(
    post,
    path = "/api/v1/appeals",
    operation_id = "createAppeal",
    tag = "appeals",
    security(("apiKey" = [])),
    request_body = AppealRequest,
    responses(
        (status = 202, description = "Received: the appeal is open.", body = AppealReceipt),
        (status = 400, description = "The body is not a JSON object.", body = Problem,
            content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "The key's app has no banned sender of this id.",
            body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The sender has an appeal open, or already appealed this \
            ban.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than 16 KiB.", body = Problem,
            content_type = "application/problem+json"),
        (status = 415, description = "The body is not application/json.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field is invalid or unknown; `field` names it.",
            body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The appeal could not be recorded; retry later.",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = inline(RetryAfter)))),
    ),
)]
pub async fn create(
    State(api): State<AppealsApi>,
    key: ApiKey,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let appeal = parse(&body)?;
    let sender = SenderKey::new(key.app_id, appeal.sender_id);
    let id = super::submit(&api.pool, &sender, &appeal.text).await?;
    let receipt = AppealReceipt {
        id,
        status: ReceiptStatus::Open,
    };
    Ok((StatusCode::ACCEPTED, Json(receipt)).into_response())
}

fn parse(body: &[u8]) -> Result<AppealRequest, ApiError> {
    let obj = json_object(body, FIELDS)?;
    let string = |field: &'static str| {
        obj.get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::Invalid {
                field,
                detail: "is required, as a string".into(),
            })
    };
    let sender_id = string("sender_id")?;
    sender_id_is_valid(sender_id)?;
    let text = free_text("text", string("text")?)?;
    if text.trim().is_empty() {
        return Err(ApiError::Invalid {
            field: "text",
            detail: "must not be empty".into(),
        });
    }
    Ok(AppealRequest {
        sender_id: sender_id.to_owned(),
        text,
    })
}

impl From<AppealError> for ApiError {
    fn from(e: AppealError) -> Self {
        match e {
            AppealError::NotFound(_) => ApiError::NotFound,
            AppealError::Conflict => ApiError::Conflict(e.to_string()),
            AppealError::Db(e) => e.into(),
            AppealError::Stale { .. } | AppealError::Review(_) => ApiError::Unavailable {
                detail: "the appeal could not be recorded; retry later".into(),
                cause: Some(e.to_string()),
            },
        }
    }
}

/// A sender's standing, for the app's servers and support tools: never show a shadow ban to
/// the sender, whom it would tell that they were caught.
#[derive(Debug, Serialize, ToSchema)]
pub struct SenderStanding {
    pub sender_id: String,
    #[schema(inline)]
    pub state: StateName,
    /// When a `banned` sender's term ends (RFC 3339); `null` otherwise, and for a permanent
    /// ban.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub banned_until: Option<DateTime<Utc>>,
    /// Confirmed bans in the last 90 days that count (not removed by a granted appeal or as a
    /// mistake).
    #[schema(minimum = 0)]
    pub strikes: i64,
    /// The sender's latest appeal, if any.
    pub appeal: Option<AppealView>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StateName {
    Active,
    ShadowBanned,
    Banned,
    Trusted,
}

/// An appeal as its app sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AppealView {
    pub id: Uuid,
    /// `moot`: the ban ended (its term, or a lift) before a moderator decided.
    #[schema(inline)]
    pub status: AppealStatus,
    /// The moderator's reply, once decided.
    pub reply: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AppealStatus {
    Open,
    Granted,
    Denied,
    Moot,
}

impl SenderStanding {
    fn from_stored(s: Standing) -> Option<SenderStanding> {
        let state = match s.state.parse::<SenderState>().ok()? {
            SenderState::Active => StateName::Active,
            SenderState::ShadowBanned => StateName::ShadowBanned,
            SenderState::Banned => StateName::Banned,
            SenderState::Trusted => StateName::Trusted,
        };
        let appeal = match (s.appeal_id, s.appeal_status.as_deref()) {
            (Some(id), Some(status)) => Some(AppealView {
                id,
                status: match status {
                    "open" => AppealStatus::Open,
                    "granted" => AppealStatus::Granted,
                    "denied" => AppealStatus::Denied,
                    _ => AppealStatus::Moot,
                },
                reply: s.appeal_reply,
            }),
            _ => None,
        };
        Some(SenderStanding {
            sender_id: s.sender_id,
            state,
            banned_until: s.banned_until,
            strikes: s.strikes,
            appeal,
        })
    }
}

/// Read a sender's standing
///
/// For the app's servers and support tools, never for the sender: showing a shadow ban to the
/// sender tells them they were caught. The id is percent-encoded as one path segment.
#[utoipa::path(
    get,
    path = "/api/v1/senders/{sender_id}",
    operation_id = "getSender",
    tag = "senders",
    security(("apiKey" = [])),
    params(("sender_id" = String, Path, description = "The sender's id in the app.")),
    responses(
        (status = 200, description = "The sender's standing.", body = SenderStanding),
        (status = 401, description = "No valid API key.", body = Problem,
            content_type = "application/problem+json"),
        (status = 404, description = "The key's app has no sender of this id.", body = Problem,
            content_type = "application/problem+json"),
        (status = 503, description = "The database did not answer; retry later.",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = inline(RetryAfter)))),
    ),
)]
pub async fn sender(
    State(api): State<AppealsApi>,
    key: ApiKey,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<SenderStanding>, ApiError> {
    // A segment that does not decode to text, or to an id no sender can have, names no sender.
    let Ok(Path(sender_id)) = path else {
        return Err(ApiError::NotFound);
    };
    if sender_id_is_valid(&sender_id).is_err() {
        return Err(ApiError::NotFound);
    }
    let sender = SenderKey::new(key.app_id, sender_id);
    super::standing(&api.pool, &sender)
        .await?
        .and_then(SenderStanding::from_stored)
        .map(Json)
        .ok_or(ApiError::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_requires_both_fields_and_refuses_others() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(AppealRequest::schema()).expect("schema");
        assert_eq!(schema["required"], serde_json::json!(FIELDS));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["text"]["maxLength"], 2000);
        let appeal = parse(br#"{"sender_id":"u_1","text":"line one\r\nline two"}"#).expect("ok");
        assert_eq!(appeal.text, "line one\nline two");
        for body in [
            &br#"{"sender_id":"u_1","text":" \n "}"#[..],
            br#"{"sender_id":"","text":"hi"}"#,
            br#"{"sender_id":"u_1"}"#,
            br#"{"sender_id":"u_1","text":"hi","extra":1}"#,
        ] {
            assert!(parse(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }
}
