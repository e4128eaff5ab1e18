//! sendguard: rate limits, shadow bans and moderation in front of invitation emails.
//!
//! This file declares the modules and assembles the router; [`startup`] connects and runs it.

pub mod admin;
pub mod api_keys;
pub mod audit;
pub mod cache;
mod changes;
pub mod config;
pub mod db;
pub mod http;
pub mod incident;
pub mod invites;
pub mod limiter;
pub mod mail;
pub mod metrics;
pub mod moderation;
mod names;
pub mod ops;
pub mod reports;
pub mod retention;
pub mod rules;
pub mod startup;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::{get, post};
use tokio::sync::Semaphore;

pub use startup::{Running, StartError};

/// Requests served at once; more are answered 503 at once.
const MAX_IN_FLIGHT: usize = 1024;
/// Largest body any route reads (the invite API bounds its own to 16 KiB).
const MAX_BODY: usize = 64 * 1024;

/// The state of the whole router; each handler takes the part it needs.
#[derive(Clone, FromRef)]
struct AppState {
    invites: invites::http::InviteApi,
    api_keys: http::ApiKeys,
    dashboard: admin::Dashboard,
    ops: ops::Ops,
}

fn router(state: AppState, edge: http::Edge) -> Router {
    Router::new()
        .route(
            "/api/v1/invites",
            post(invites::http::create).fallback(http::method_not_allowed),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/api/openapi.json", get(http::openapi))
        .merge(admin::router())
        .fallback(http::not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(edge, http::observe))
        .with_state(state)
}

/// Connects everything, applies migrations and starts serving on `cfg.listen`.
pub async fn start(cfg: &config::Config) -> Result<Running, StartError> {
    let services = startup::Services::connect(cfg).await?;
    let state = AppState {
        invites: invites::http::InviteApi {
            service: services.invites.clone(),
            read_timeout: cfg.read_timeout(),
        },
        api_keys: http::ApiKeys {
            pool: services.pool.clone(),
            cache: services.api_keys.clone(),
        },
        dashboard: services.dashboard.clone(),
        ops: ops::Ops {
            pool: services.pool.clone(),
            limiter: services.limiter.clone(),
            metrics: services.metrics.clone(),
        },
    };
    let edge = http::Edge {
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        metrics: services.metrics.clone(),
    };
    startup::launch(cfg, services, router(state, edge)).await
}
