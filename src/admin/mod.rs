//! The dashboard under `/admin`: server-rendered pages (askama), one file per page or concern.
//! This file holds the router, the dashboard's state and the security headers every response
//! carries.

pub mod accounts;
mod audit;
mod auth;
mod error;
mod format;
mod overview;
mod queue;
mod rules;
mod senders;
pub mod setup;

use axum::Router;
use axum::extract::FromRef;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sqlx::PgPool;

use crate::limiter::{KeyPrefix, Limiter};
use crate::rules::RuleCache;

/// What the dashboard's handlers need.
#[derive(Clone)]
pub struct Dashboard {
    pub pool: PgPool,
    pub limiter: Limiter,
    /// The prefix of the counters' keys, to show and clear a sender's counters.
    pub keys: KeyPrefix,
    pub rules: RuleCache,
    /// Mark cookies `Secure` (the public URL is https).
    pub secure_cookies: bool,
    /// The first-admin link, while no admin exists.
    pub setup: setup::SetupLink,
}

pub fn router<S>() -> Router<S>
where
    Dashboard: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/admin", get(overview::overview))
        .route("/admin/audit", get(audit::audit_log))
        .route("/admin/rules", get(rules::list))
        .route("/admin/rules/new", get(rules::new_form).post(rules::create))
        .route(
            "/admin/rules/{id}",
            get(rules::edit_form).post(rules::update),
        )
        .route("/admin/login", get(auth::login_page).post(auth::log_in))
        .route("/admin/setup", get(setup::form).post(setup::create))
        .route("/admin/logout", post(auth::log_out))
        .route("/admin/queue", get(queue::queue))
        .route("/admin/queue/confirm", post(queue::confirm_selected))
        .route("/admin/senders", get(senders::find_sender))
        .route("/admin/senders/{id}", get(senders::sender_page))
        .route("/admin/senders/{id}/review", post(senders::review_sender))
        .route("/admin/static/admin.css", get(stylesheet))
        .layer(axum::middleware::map_response(security_headers))
}

/// Strict headers on every dashboard response: no scripts at all, no framing, no sniffing.
async fn security_headers(mut response: Response) -> Response {
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
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/admin.css"),
    )
}
