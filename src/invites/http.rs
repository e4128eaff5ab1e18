//! `POST /api/v1/invites`: parse, call the flow, map the outcome.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Outcome, Submission, validate};
use crate::AppState;
use crate::http::{ApiError, ApiKey};

/// Largest accepted body (DESIGN.md §4).
pub const MAX_BODY: usize = 16 * 1024;

pub async fn create(
    State(state): State<AppState>,
    ApiKey(api_key_id): ApiKey,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::UnsupportedMediaType);
    }
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::BadRequest("Idempotency-Key must be 1-255 visible characters".into())
                })?,
        ),
    };
    let bytes = tokio::time::timeout(state.read_timeout, axum::body::to_bytes(body, MAX_BODY))
        .await
        .map_err(|_| ApiError::Timeout)?
        .map_err(|_| ApiError::TooLarge(MAX_BODY))?;
    let invite = validate::parse(&bytes)?;
    let outcome = state
        .invites
        .submit(Submission {
            api_key_id,
            idempotency_key,
            body: &bytes,
            invite,
        })
        .await?;
    match outcome {
        // The same answer for sent, held and suppressed invites.
        Outcome::Accepted(id) => Ok((
            StatusCode::OK,
            Json(json!({"id": id, "status": "accepted"})),
        )
            .into_response()),
        Outcome::Rejected(r) => Err(ApiError::TooManyRequests(r)),
    }
}
