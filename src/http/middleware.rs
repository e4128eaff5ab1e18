//! What every request goes through: the guard of its route group (the caller's share, the
//! body, then the group's budget of requests in flight), timing by route and status, a request
//! id, the one log line of an error's cause, and the security headers on every answer.

use std::sync::Arc;
use std::time::Instant;

use axum::RequestExt;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use tokio::sync::Semaphore;

use super::body::{self, BodyLimit};
use super::shares::Shares;
use super::{ApiError, ApiKeys, ClientAddr, ErrorCause, TrustedProxies};
use crate::metrics::{DependencyError, Metrics, Route};

/// Of a group's budget, what one client address (IPv6: its /64) may hold before a key is
/// known: an eighth (32 of the dashboard's requests, more than a browser or an office behind
/// one address sends at once).
const CLIENT_SHARE: usize = 8;
/// Of the API's budget, what one key may hold: a quarter, so that one app's burst leaves the
/// others theirs.
const KEY_SHARE: usize = 4;

/// Who holds a share of a group's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Holder {
    Client(IpNet),
    Key(i64),
}

/// How a group tells its callers apart.
#[derive(Clone)]
pub enum Gate {
    /// By client address, as the trusted proxies report it.
    Client(TrustedProxies),
    /// By API key, checked first: a request without a live key is answered at once.
    ApiKey(ApiKeys),
}

/// One route group's guard.
#[derive(Clone)]
pub struct Edge {
    gate: Gate,
    /// What one holder may have of `in_flight` at once.
    share: usize,
    shares: Shares<Holder>,
    body: BodyLimit,
    /// Permits for this group's requests in flight: a saturated dashboard leaves the API its
    /// whole budget.
    in_flight: Arc<Semaphore>,
    metrics: Metrics,
}

impl Edge {
    pub fn new(gate: Gate, budget: usize, body: BodyLimit, metrics: &Metrics) -> Self {
        let divisor = match gate {
            Gate::Client(_) => CLIENT_SHARE,
            Gate::ApiKey(_) => KEY_SHARE,
        };
        Edge {
            gate,
            share: (budget / divisor).max(1),
            shares: Shares::default(),
            body,
            in_flight: Arc::new(Semaphore::new(budget)),
            metrics: metrics.clone(),
        }
    }

    /// Whose share the request draws on; the API key found goes into the request for handlers.
    async fn holder(&self, request: &mut Request) -> Result<Holder, ApiError> {
        match &self.gate {
            Gate::Client(trusted) => {
                let Ok(ClientAddr(net)) = request.extract_parts_with_state(trusted).await;
                Ok(Holder::Client(net))
            }
            Gate::ApiKey(keys) => {
                let key = keys.check(request.headers()).await?;
                request.extensions_mut().insert(key);
                Ok(Holder::Key(key.id))
            }
        }
    }

    fn overloaded(&self, why: &'static str) -> Response {
        self.metrics.dependency_error(DependencyError::Overload);
        ApiError::unavailable(why).into_response()
    }
}

/// Guards a route group, in an order that lets no one hold the group's budget on a promise:
/// the caller is told apart (its key checked, on the API) and takes a unit of its share, its
/// body is read whole within the group's deadline, and only then does the request take a
/// permit of the group's budget. Beyond a share or the budget the answer is 503 at once,
/// rather than a queue without end.
pub async fn guard(State(edge): State<Edge>, mut request: Request, next: Next) -> Response {
    let holder = match edge.holder(&mut request).await {
        Ok(holder) => holder,
        Err(e) => return e.into_response(),
    };
    let Some(_share) = edge.shares.take(holder, edge.share) else {
        return edge.overloaded("too many requests in flight from this client; retry shortly");
    };
    let request = match body::read(edge.body, request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    let Ok(_permit) = edge.in_flight.clone().try_acquire_owned() else {
        return edge.overloaded("too many requests in flight; retry shortly");
    };
    next.run(request).await
}

/// Times every request by route and status, and gives it an id: the caller's `x-request-id`
/// when it sent a sane one, a new one otherwise, returned in the answer and on the log lines.
pub async fn observe(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    let started = Instant::now();
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
    metrics.http_request(route, response.status(), started.elapsed());
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
