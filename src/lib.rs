//! sendguard: rate limits, shadow bans and moderation in front of invitation emails.
//!
//! This file declares the modules and assembles the router; [`startup`] connects and runs it.

pub mod admin;
pub mod api_keys;
pub mod appeals;
pub mod apps;
pub mod audit;
mod backoff;
pub mod cache;
pub mod campaigns;
mod changes;
pub mod coalesce;
pub mod config;
pub mod db;
pub mod http;
pub mod incident;
pub mod invite_counts;
pub mod invites;
pub mod limiter;
pub mod mail;
pub mod metrics;
pub mod moderation;
mod names;
mod openapi;
pub mod ops;
pub mod outcomes;
pub mod recipients;
pub mod retention;
pub mod rules;
pub mod sender_key;
pub mod signals;
pub mod startup;
mod tokens;
pub mod urls;
pub mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use axum::middleware::{from_fn_with_state, map_response_with_state};
use axum::routing::{get, post};
use tokio::sync::Semaphore;

pub use startup::{Running, StartError};

/// Requests in flight per route group; more are answered 503 at once. The groups draw on
/// separate budgets, so a saturated dashboard leaves the API all of its own, and a request
/// takes its group's budget only once its body is in (`http::guard`).
const API_IN_FLIGHT: usize = 1024;
const DASHBOARD_IN_FLIGHT: usize = 256;
const OPS_IN_FLIGHT: usize = 64;
const RECIPIENT_IN_FLIGHT: usize = 128;
/// How long an invite's or an event's body (at most 16 KiB) may take to arrive, when the read
/// timeout is longer: a client worth serving sends it in far less.
const API_BODY_DEADLINE: Duration = Duration::from_secs(2);
/// Largest body of a recipient's page post (the one-click body is 26 bytes).
const RECIPIENT_BODY: usize = 4 * 1024;
/// Largest body of a dashboard form.
const FORM_BODY: usize = 64 * 1024;
/// Key lookups in the database at once (of a pool of 16 connections).
const KEY_LOOKUPS: usize = 4;

/// The state of the whole router, behind one reference count: axum clones it for every
/// request. Each handler takes the part it needs.
#[derive(Clone)]
struct AppState(Arc<Parts>);

struct Parts {
    invites: invites::http::InviteApi,
    appeals: appeals::http::AppealsApi,
    events: outcomes::http::Events,
    dashboard: admin::Dashboard,
    recipients: recipients::pages::RecipientPages,
    trusted: http::TrustedProxies,
    ops: ops::Ops,
}

/// `State<Part>` for each part of [`Parts`].
macro_rules! from_parts {
    ($($field:ident: $part:ty),* $(,)?) => {
        $(impl FromRef<AppState> for $part {
            fn from_ref(state: &AppState) -> $part {
                state.0.$field.clone()
            }
        })*
    };
}

from_parts!(
    invites: invites::http::InviteApi,
    appeals: appeals::http::AppealsApi,
    events: outcomes::http::Events,
    dashboard: admin::Dashboard,
    recipients: recipients::pages::RecipientPages,
    trusted: http::TrustedProxies,
    ops: ops::Ops,
);

/// The public router: the API, the dashboard and the probes, each group behind its own guard
/// (`http::guard`): its own budget of requests in flight, its own body bound. Unknown paths are
/// answered at once, without a body or a budget.
fn router(
    state: AppState,
    keys: http::ApiKeys,
    cfg: &config::Config,
    metrics: &metrics::Metrics,
) -> Router {
    let deadline = cfg.read_timeout();
    let body = |max_bytes| http::BodyLimit {
        max_bytes,
        deadline,
    };
    let guard = |gate, budget, body| {
        from_fn_with_state(http::Edge::new(gate, budget, body, metrics), http::guard)
    };
    let by_client = || http::Gate::Client(state.0.trusted.clone());
    let api_body = http::BodyLimit {
        max_bytes: invites::http::MAX_BODY,
        deadline: deadline.min(API_BODY_DEADLINE),
    };
    let api = Router::new()
        .route(
            "/api/v1/invites",
            post(invites::http::create).fallback(http::method_not_allowed),
        )
        .route(
            "/api/v1/events",
            post(outcomes::http::record).fallback(http::method_not_allowed),
        )
        .route(
            "/api/v1/appeals",
            post(appeals::http::create).fallback(http::method_not_allowed),
        )
        .route(
            "/api/v1/senders/{sender_id}",
            get(appeals::http::sender).fallback(http::method_not_allowed),
        )
        .layer(guard(http::Gate::ApiKey(keys), API_IN_FLIGHT, api_body));
    let dashboard = admin::router().layer(guard(by_client(), DASHBOARD_IN_FLIGHT, body(FORM_BODY)));
    let recipient_pages = Router::new()
        .route(
            "/r/{invite}/unsubscribe",
            get(recipients::pages::unsubscribe_page).post(recipients::pages::unsubscribe),
        )
        .route(
            "/r/{invite}/report",
            get(recipients::pages::report_page).post(recipients::pages::report),
        )
        .layer(guard(
            by_client(),
            RECIPIENT_IN_FLIGHT,
            body(RECIPIENT_BODY),
        ));
    let probes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route(
            "/api/openapi.json",
            get(openapi::serve).fallback(http::method_not_allowed),
        )
        .layer(guard(by_client(), OPS_IN_FLIGHT, body(FORM_BODY)));
    let headers = http::SecurityHeaders {
        hsts: cfg.public_url.starts_with("https://"),
    };
    api.merge(dashboard)
        .merge(recipient_pages)
        .merge(probes)
        .fallback(http::not_found)
        .layer(from_fn_with_state(metrics.clone(), http::observe))
        .layer(map_response_with_state(headers, http::security_headers))
        .with_state(state)
}

/// The metrics listener's router: `/metrics` and nothing else.
fn metrics_router(ops: ops::Ops) -> Router {
    Router::new()
        .route("/metrics", get(ops::metrics))
        .fallback(http::not_found)
        .with_state(ops)
}

/// Connects everything, applies migrations and starts serving on `cfg.listen` (and the metrics
/// on `cfg.metrics_listen`).
pub async fn start(cfg: &config::Config) -> Result<Running, StartError> {
    let services = startup::Services::connect(cfg).await?;
    let ops = ops::Ops::new(
        services.pool.clone(),
        services.limiter.clone(),
        services.metrics.clone(),
    );
    let state = AppState(Arc::new(Parts {
        invites: invites::http::InviteApi {
            service: Arc::new(services.invites.clone()),
            apps: services.apps.clone(),
        },
        events: outcomes::http::Events {
            outcomes: services.outcomes.clone(),
        },
        appeals: appeals::http::AppealsApi {
            pool: services.pool.clone(),
        },
        dashboard: services.dashboard.clone(),
        recipients: recipients::pages::RecipientPages {
            pool: services.pool.clone(),
            key: services.links.clone(),
            apps: services.apps.clone(),
            outcomes: services.outcomes.clone(),
        },
        trusted: services.trusted.clone(),
        ops: ops.clone(),
    }));
    let keys = http::ApiKeys {
        pool: services.pool.clone(),
        cache: services.api_keys.clone(),
        lookups: Arc::new(Semaphore::new(KEY_LOOKUPS)),
    };
    let app = router(state, keys, cfg, &services.metrics);
    startup::launch(cfg, services, app, metrics_router(ops)).await
}
