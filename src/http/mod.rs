//! Shared HTTP pieces: problem+json errors, the API-key and client-address extractors, body
//! deadlines, shares of a budget, the request middleware and the server loop.

mod address;
mod api_key;
mod body;
mod error;
mod middleware;
pub mod server;
mod shares;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use address::{ClientAddr, TrustedProxies, group};
pub use api_key::{ApiKey, ApiKeys};
pub use body::{BodyLimit, json_object, require_json, unknown_field};
pub use error::{ApiError, ErrorCause, Problem, RateLimited, RetryAfter};
pub use middleware::{Edge, Gate, SecurityHeaders, guard, observe, security_headers};

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
