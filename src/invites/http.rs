//! `POST /api/v1/invites`: parse, call the flow, map the outcome; and how the flow's errors
//! become API answers.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::policy::Rejection;
use super::validate::{self, Invite};
use super::{InvalidBody, InviteError, InviteService, Outcome, Submission};
use crate::apps::AppCache;
use crate::http::{ApiError, ApiKey, Problem, RateLimited, RetryAfter, require_json};

/// Largest accepted body (docs/DESIGN.md §4), enforced by `http::read_body`.
pub const MAX_BODY: usize = 16 * 1024;
/// Longest Idempotency-Key, in bytes.
const IDEMPOTENCY_KEY_MAX: usize = 255;

/// The answer to a recorded invite, the same whether it is queued, held or suppressed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// The invite's id, as `POST /api/v1/events` names it.
    pub id: Uuid,
    #[schema(inline)]
    pub status: AcceptedStatus,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AcceptedStatus {
    Accepted,
}

/// What the handler needs.
#[derive(Clone)]
pub struct InviteApi {
    /// Shared: the handler's state is cloned for every request.
    pub service: Arc<InviteService>,
    pub apps: AppCache,
}

/// Send an invitation
///
/// Answers 200 only once the invite is recorded: queued for sending, held or suppressed alike.
#[utoipa::path(
    post,
    path = "/api/v1/invites",
    operation_id = "createInvite",
    tag = "invites",
    security(("apiKey" = [])),
    params((
        "Idempotency-Key" = Option<String>,
        Header,
        nullable = false,
        min_length = 1,
        max_length = 255,
        description = "The same key with the same body (the same JSON value: key order, \
            whitespace and escapes aside, a null field as an absent one) returns the first \
            answer and sends once; with another body it is a 422."
    )),
    request_body = Invite,
    responses(
        (status = 200, description = "Recorded.", body = Accepted),
        (status = 400, description = "The body is not a JSON object, or the Idempotency-Key \
            is not 1-255 visible characters.", body = Problem,
            content_type = "application/problem+json"),
        (status = 401, description = "No valid API key.", body = Problem,
            content_type = "application/problem+json"),
        (status = 413, description = "The body is larger than 16 KiB.", body = Problem,
            content_type = "application/problem+json"),
        (status = 415, description = "The body is not application/json.", body = Problem,
            content_type = "application/problem+json"),
        (status = 422, description = "A field is invalid or unknown (`field` names it), \
            `accept_url` is not on one of the app's link hosts, or the Idempotency-Key was used \
            with another body.", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "A reject rule is exceeded.", body = Problem,
            content_type = "application/problem+json", headers(
                ("Retry-After" = inline(RetryAfter), description = "Seconds until the rule \
                    would allow the invite."),
                ("RateLimit-Policy" = String, description = "The rule: \
                    `\"name\";q=limit;w=window seconds`."),
                ("RateLimit" = String, description = "What is left of it: \
                    `\"name\";r=remaining;t=seconds until the window resets`."),
            )),
        (status = 503, description = "The invite could not be recorded; nothing was accepted.",
            body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = inline(RetryAfter)))),
    ),
)]
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
                .filter(|k| !k.is_empty() && k.len() <= IDEMPOTENCY_KEY_MAX)
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
            Json(Accepted {
                id,
                status: AcceptedStatus::Accepted,
            }),
        )
            .into_response()),
        Outcome::Rejected(r) => Err(r.into()),
    }
}

impl From<InvalidBody> for ApiError {
    fn from(e: InvalidBody) -> Self {
        match e {
            InvalidBody::Field { field, detail } => ApiError::Invalid { field, detail },
            InvalidBody::UnknownField(field) => ApiError::UnknownField {
                field,
                known: validate::FIELDS,
            },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_states_the_key_limit() {
        let operation =
            serde_json::to_value(<__path_create as utoipa::Path>::operation()).expect("operation");
        let key = &operation["parameters"][0];
        assert_eq!(key["name"], "Idempotency-Key");
        assert_eq!(key["schema"]["maxLength"], IDEMPOTENCY_KEY_MAX);
    }
}
