//! Shared HTTP pieces: problem+json errors (every error maps to a response here, in one place)
//! and the API-key extractor.

use std::time::Instant;

use axum::Json;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::AppState;
use crate::invites::{InvalidBody, InviteError, Rejection};

/// Every error the API answers with, as an RFC 9457 problem.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("{field}: {detail}")]
    Invalid { field: &'static str, detail: String },
    #[error("{0}")]
    Unprocessable(String),
    #[error("the body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the body must be application/json")]
    UnsupportedMediaType,
    #[error("rate limit exceeded")]
    TooManyRequests(Rejection),
    #[error("temporarily unavailable: {0}")]
    Unavailable(String),
    #[error("no such resource")]
    NotFound,
    #[error("the body did not arrive in time")]
    Timeout,
    #[error("this method is not allowed here")]
    MethodNotAllowed,
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
            InviteError::Unavailable(reason) => ApiError::Unavailable(reason),
            // The invite was not recorded: say so, never 200. The outage itself is logged
            // once, where it is detected.
            InviteError::Db(_) | InviteError::Limiter(_) | InviteError::StateChanged(_) => {
                tracing::debug!(error = %e, "invite not recorded");
                ApiError::Unavailable("the invite could not be recorded; retry later".into())
            }
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        tracing::debug!(error = %e, "database unavailable");
        ApiError::Unavailable("the database is unavailable; retry later".into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, title) = match &self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Bad request"),
            ApiError::Invalid { .. } | ApiError::Unprocessable(_) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Invalid invite")
            }
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "Body too large"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported media type")
            }
            ApiError::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "Too many requests"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "Service unavailable"),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Not found"),
            ApiError::Timeout => (StatusCode::REQUEST_TIMEOUT, "Request timeout"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
        };
        let mut body = json!({
            "type": "about:blank",
            "title": title,
            "status": status.as_u16(),
            "detail": self.to_string(),
        });
        if let ApiError::Invalid { field, .. } = &self {
            body["field"] = json!(field);
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match &self {
            ApiError::TooManyRequests(r) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after_secs));
                // IETF RateLimit fields: the policy, and what is left of it.
                let policy = format!("\"{}\";q={};w={}", r.rule, r.limit, r.window_secs);
                let limit = format!("\"{}\";r={};t={}", r.rule, r.remaining, r.reset_secs);
                for (name, value) in [("ratelimit-policy", policy), ("ratelimit", limit)] {
                    if let Ok(v) = HeaderValue::from_str(&value) {
                        headers.insert(name, v);
                    }
                }
            }
            ApiError::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(5u32));
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        (status, headers, Json(body)).into_response()
    }
}

/// The id of the API key the request carries (`Authorization: Bearer <key>`).
pub struct ApiKey(pub i64);

impl FromRequestParts<AppState> for ApiKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let key = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|k| !k.is_empty() && k.len() <= 128)
            .ok_or(ApiError::Unauthorized)?;
        crate::api_keys::verify(&state.pool, &state.api_keys, key)
            .await?
            .map(ApiKey)
            .ok_or(ApiError::Unauthorized)
    }
}

/// Bounds the requests in flight, times every request by route and status, and gives it an id: the caller's `x-request-id`
/// when it sent a sane one, a new one otherwise, returned in the answer and on the log lines.
pub async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    // Beyond the bound, shed load at once rather than queue without end.
    let Ok(_permit) = state.in_flight.clone().try_acquire_owned() else {
        state
            .metrics
            .count("sendguard_dependency_errors_total", &[("kind", "overload")]);
        return ApiError::Unavailable("too many requests in flight; retry shortly".into())
            .into_response();
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let span = tracing::info_span!("request", id = %id, method = %request.method(), route = %route);
    let mut response = tracing::Instrument::instrument(next.run(request), span).await;
    state.metrics.observe(
        "sendguard_http_request_seconds",
        &[("route", &route), ("status", response.status().as_str())],
        started.elapsed(),
    );
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// Unknown paths: a problem under /api/, a plain 404 elsewhere.
pub async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api/") {
        ApiError::NotFound.into_response()
    } else {
        (StatusCode::NOT_FOUND, "not found").into_response()
    }
}

/// A known API path with a method it does not take.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
