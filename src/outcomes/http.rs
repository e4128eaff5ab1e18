//! `POST /api/v1/events`: the calling app reports what happened to an invite (DESIGN.md §4).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{OutcomeError, OutcomeType, Outcomes};
use crate::http::{ApiError, ApiKey, require_json};

/// What the handler needs.
#[derive(Clone)]
pub struct Events {
    pub outcomes: Outcomes,
}

pub async fn record(
    State(events): State<Events>,
    key: ApiKey,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
    let (invite_id, kind) = parse(&body)?;
    events
        .outcomes
        .record(invite_id, kind, Some(key.app_id))
        .await?;
    // The same answer whether this outcome was new or a repeat: it is counted once either way.
    Ok((StatusCode::ACCEPTED, Json(json!({"status": "recorded"}))).into_response())
}

fn parse(body: &[u8]) -> Result<(Uuid, OutcomeType), ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    };
    let invalid = |field, detail: &str| ApiError::Invalid {
        field,
        detail: detail.into(),
    };
    let invite_id = obj
        .get("invite_id")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("invite_id", "is required, as a string"))?
        .parse::<Uuid>()
        .map_err(|_| invalid("invite_id", "must be an invite's id (a UUID)"))?;
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("type", "is required: bounce, complaint or accepted"))?
        .parse::<OutcomeType>()
        .map_err(|_| invalid("type", "must be bounce, complaint or accepted"))?;
    Ok((invite_id, kind))
}

impl From<OutcomeError> for ApiError {
    fn from(e: OutcomeError) -> Self {
        match e {
            OutcomeError::NotFound => ApiError::NotFound,
            OutcomeError::Db(_) | OutcomeError::Limiter(_) => ApiError::Unavailable {
                detail: "the event could not be recorded; retry later".into(),
                cause: Some(e.to_string()),
            },
        }
    }
}
