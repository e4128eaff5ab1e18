//! What every request goes through: the bound on requests in flight of its route group,
//! timing by route and status, a request id, the one log line of an error's cause, and the
//! security headers on every answer.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::{ApiError, ErrorCause};
use crate::metrics::{DependencyError, Metrics, Route};

/// The middleware's state for one group of routes.
#[derive(Clone)]
pub struct Edge {
    /// Permits for this group's requests in flight: a saturated dashboard leaves the API its
    /// whole budget.
    pub in_flight: Arc<Semaphore>,
    pub metrics: Metrics,
}

impl Edge {
    pub fn new(budget: usize, metrics: &Metrics) -> Self {
        Edge {
            in_flight: Arc::new(Semaphore::new(budget)),
            metrics: metrics.clone(),
        }
    }
}

/// Bounds the requests in flight, times every request by route and status, and gives it an id:
/// the caller's `x-request-id` when it sent a sane one, a new one otherwise, returned in the
/// answer and on the log lines.
pub async fn observe(State(edge): State<Edge>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    // Beyond the bound, shed load at once rather than queue without end.
    let Ok(_permit) = edge.in_flight.clone().try_acquire_owned() else {
        edge.metrics.dependency_error(DependencyError::Overload);
        return ApiError::unavailable("too many requests in flight; retry shortly").into_response();
    };
    let route = Route::of(&request);
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
    let span = tracing::info_span!(
        "request",
        id = %id,
        method = %request.method(),
        route = route.as_str()
    );
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    if let Some(cause) = response.extensions_mut().remove::<ErrorCause>() {
        let _entered = span.enter();
        let status = response.status().as_u16();
        if cause.serious {
            tracing::error!(status, error = %cause.message, "request failed");
        } else {
            tracing::debug!(status, error = %cause.message, "request failed");
        }
    }
    edge.metrics
        .http_request(route, response.status(), started.elapsed());
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// Which security headers every answer carries.
#[derive(Clone, Copy, Debug)]
pub struct SecurityHeaders {
    /// Behind https: tell browsers to keep to it.
    pub hsts: bool,
}

/// Strict headers on every answer: no scripts at all, no framing, no sniffing, no caching, and
/// HSTS behind https. The API answers JSON, so the same policy costs it nothing.
pub async fn security_headers(
    State(headers): State<SecurityHeaders>,
    mut response: Response,
) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if headers.hsts {
        h.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}
