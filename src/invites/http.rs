//! `POST /api/v1/invites`: parse, call the flow, map the outcome; and how the flow's errors
//! become API answers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::policy::Rejection;
use super::{InvalidBody, InviteError, InviteService, Outcome, Submission, validate};
use crate::apps::AppCache;
use crate::http::{ApiError, ApiKey, RateLimited, require_json};

/// Largest accepted body (DESIGN.md §4), enforced by `http::read_body`.
pub const MAX_BODY: usize = 16 * 1024;

/// What the handler needs.
#[derive(Clone)]
pub struct InviteApi {
    pub service: InviteService,
    pub apps: AppCache,
}

pub async fn create(
    State(api): State<InviteApi>,
    key: ApiKey,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    require_json(&headers)?;
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
    // The body arrived whole, within its deadline and under MAX_BODY (`http::read_body`).
    let invite = validate::parse(&bytes)?;
    let app = api
        .apps
        .fetch(&api.service.pool, key.app_id)
        .await
        .map_err(InviteError::Db)?
        .ok_or_else(|| ApiError::unavailable("the key's app is not loaded yet; retry shortly"))?;
    validate::check_for_app(&invite, &app)?;
    let outcome = api
        .service
        .submit(Submission {
            api_key_id: key.id,
            app,
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
        Outcome::Rejected(r) => Err(r.into()),
    }
}

impl From<InvalidBody> for ApiError {
    fn from(e: InvalidBody) -> Self {
        match e {
            InvalidBody::Field { field, detail } => ApiError::Invalid { field, detail },
            other => ApiError::BadRequest(other.to_string()),
        }
    }
}

impl From<InviteError> for ApiError {
    fn from(e: InviteError) -> Self {
        match e {
            InviteError::IdempotencyConflict => ApiError::Unprocessable(e.to_string()),
            InviteError::Unavailable(reason) => ApiError::unavailable(reason),
            // The invite was not recorded: say so, never 200.
            InviteError::Db(_) | InviteError::Batch(_) | InviteError::Limiter(_) => {
                ApiError::Unavailable {
                    detail: "the invite could not be recorded; retry later".into(),
                    cause: Some(e.to_string()),
                }
            }
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> Self {
        ApiError::TooManyRequests(RateLimited {
            policy: r.rule,
            limit: r.limit,
            remaining: r.remaining,
            window_secs: r.window_secs,
            retry_after_secs: r.retry_after_secs,
            reset_secs: r.reset_secs,
        })
    }
}
