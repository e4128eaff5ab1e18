//! The API's errors as RFC 9457 problems: every error the API answers with maps to a response
//! here, in one place. The cause behind an error is attached to the response, and the request
//! middleware logs it once, with the request's id.

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// Why a request failed, for the log: attached to the response by the error that produced it
/// and logged by [`super::observe`].
#[derive(Debug, Clone)]
pub struct ErrorCause {
    pub message: String,
    /// Logged as an error (a fault to look at) rather than at debug level (an outage already
    /// reported once, or a caller's mistake).
    pub serious: bool,
}

impl ErrorCause {
    pub fn attach(self, response: &mut Response) {
        response.extensions_mut().insert(self);
    }
}

/// What a 429 tells the caller about the rule it ran into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    pub policy: String,
    pub limit: u64,
    pub remaining: u64,
    pub window_secs: u64,
    pub retry_after_secs: u64,
    pub reset_secs: u64,
}

/// An RFC 9457 problem: the body of every error the API answers with.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The status's name.
    pub title: &'static str,
    /// The HTTP status code.
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    /// What went wrong.
    pub detail: String,
    /// The invalid or unknown field, on 422.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub field: Option<String>,
}

/// The Retry-After header's value in the description: whole seconds, at least one (the limiter
/// rounds up; an outage says 5). The header has no type of its own to derive this from.
pub struct RetryAfter;

impl PartialSchema for RetryAfter {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .into()
    }
}

impl ToSchema for RetryAfter {}

/// Every error the API answers with.
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
    /// A misspelt field would otherwise be dropped silently.
    #[error("unknown field `{field}`; the fields are {}", known.join(", "))]
    UnknownField {
        field: String,
        known: &'static [&'static str],
    },
    #[error("the body is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the body must be application/json")]
    UnsupportedMediaType,
    #[error("rate limit exceeded")]
    TooManyRequests(RateLimited),
    /// `cause` is logged, never shown.
    #[error("temporarily unavailable: {detail}")]
    Unavailable {
        detail: String,
        cause: Option<String>,
    },
    #[error("no such resource")]
    NotFound,
    #[error("{0}")]
    Conflict(String),
    #[error("the body did not arrive in time")]
    Timeout,
    #[error("this method is not allowed here")]
    MethodNotAllowed,
}

impl ApiError {
    pub fn unavailable(detail: impl Into<String>) -> Self {
        ApiError::Unavailable {
            detail: detail.into(),
            cause: None,
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        if crate::db::refused_text(&e) {
            return ApiError::BadRequest(crate::db::REFUSED_TEXT.into());
        }
        ApiError::Unavailable {
            detail: "the database is unavailable; retry later".into(),
            cause: Some(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, title) = match &self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "Bad request"),
            ApiError::Invalid { .. }
            | ApiError::Unprocessable(_)
            | ApiError::UnknownField { .. } => {
                (StatusCode::UNPROCESSABLE_ENTITY, "Unprocessable content")
            }
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "Body too large"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported media type")
            }
            ApiError::TooManyRequests(_) => (StatusCode::TOO_MANY_REQUESTS, "Too many requests"),
            ApiError::Unavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "Service unavailable")
            }
            ApiError::NotFound => (StatusCode::NOT_FOUND, "Not found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
            ApiError::Timeout => (StatusCode::REQUEST_TIMEOUT, "Request timeout"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "Method not allowed"),
        };
        let body = Problem {
            kind: "about:blank",
            title,
            status: status.as_u16(),
            detail: self.to_string(),
            field: match &self {
                ApiError::Invalid { field, .. } => Some((*field).to_owned()),
                ApiError::UnknownField { field, .. } => Some(field.clone()),
                _ => None,
            },
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        match &self {
            ApiError::TooManyRequests(r) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after_secs));
                // IETF RateLimit fields: the policy, and what is left of it.
                let policy = format!("\"{}\";q={};w={}", r.policy, r.limit, r.window_secs);
                let limit = format!("\"{}\";r={};t={}", r.policy, r.remaining, r.reset_secs);
                for (name, value) in [("ratelimit-policy", policy), ("ratelimit", limit)] {
                    if let Ok(v) = HeaderValue::from_str(&value) {
                        headers.insert(name, v);
                    }
                }
            }
            ApiError::Unavailable { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(5u32));
            }
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        let cause = match &self {
            ApiError::Unavailable {
                cause: Some(cause), ..
            } => Some(cause.clone()),
            _ => None,
        };
        let mut response = (status, headers, Json(body)).into_response();
        if let Some(message) = cause {
            // Outages are reported once where they are detected; each request only at debug.
            ErrorCause {
                message,
                serious: false,
            }
            .attach(&mut response);
        }
        response
    }
}
