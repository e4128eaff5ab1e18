//! What operators and orchestrators ask of a running instance: liveness, readiness and the
//! Prometheus metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;
use tokio::sync::Mutex;

use crate::appeals;
use crate::limiter::Limiter;
use crate::mail;
use crate::metrics::Metrics;
use crate::moderation;

/// What the probes need.
#[derive(Clone)]
pub struct Ops {
    pool: PgPool,
    limiter: Limiter,
    metrics: Metrics,
    /// The gauges read from Postgres and when: a scrape costs at most one read per
    /// [`GAUGES_FOR`], however often it comes.
    gauges: Arc<Mutex<Option<Read>>>,
}

/// Gauges as read at one moment.
struct Read {
    at: Instant,
    gauges: Vec<Gauge>,
}

/// How long gauges read from Postgres are served before they are read again.
const GAUGES_FOR: Duration = Duration::from_secs(5);

/// Name, help text (without its final period, which the encoder adds) and value.
type Gauge = (&'static str, &'static str, f64);

impl Ops {
    pub fn new(pool: PgPool, limiter: Limiter, metrics: Metrics) -> Self {
        Ops {
            pool,
            limiter,
            metrics,
            gauges: Arc::default(),
        }
    }

    /// The gauges, read again when the last read is older than [`GAUGES_FOR`]; none while
    /// Postgres does not answer.
    async fn gauges(&self) -> Vec<Gauge> {
        if let Some(read) = &*self.gauges.lock().await
            && read.at.elapsed() < GAUGES_FOR
        {
            return read.gauges.clone();
        }
        let outbox = mail::outbox_state(&self.pool).await.ok();
        // The count the dashboard's overview shows, by the same definition.
        let awaiting = moderation::senders::awaiting_review(&self.pool).await.ok();
        let appeals = appeals::waiting(&self.pool).await.ok();
        let (Some((depth, oldest)), Some(awaiting), Some((appeals, oldest_appeal))) =
            (outbox, awaiting, appeals)
        else {
            return Vec::new();
        };
        let gauges = vec![
            (
                "sendguard_outbox_queue_depth",
                "Invites waiting to be sent",
                depth as f64,
            ),
            (
                "sendguard_outbox_oldest_seconds",
                "Age of the oldest invite waiting to be sent",
                oldest,
            ),
            (
                "sendguard_senders_awaiting_review",
                "Shadow-banned senders waiting for a decision",
                awaiting as f64,
            ),
            (
                "sendguard_appeals_open",
                "Appeals waiting for a decision",
                appeals as f64,
            ),
            (
                "sendguard_appeals_oldest_seconds",
                "How long the oldest open appeal has waited",
                oldest_appeal,
            ),
        ];
        *self.gauges.lock().await = Some(Read {
            at: Instant::now(),
            gauges: gauges.clone(),
        });
        gauges
    }
}

/// How long a readiness probe waits for each dependency (probes time out themselves).
const PROBE: Duration = Duration::from_secs(1);

/// The process is up
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "health",
    tag = "service",
    responses((status = 200, description = "Up.", body = String, content_type = "text/plain")),
)]
pub async fn healthz() -> &'static str {
    "ok"
}

/// Postgres and Redis answer
///
/// 200 only when Postgres and the counters answer, each within a second.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "ready",
    tag = "service",
    responses(
        (status = 200, description = "Ready.", body = String, content_type = "text/plain"),
        (status = 503, description = "A dependency is down; the body says which.", body = String,
            content_type = "text/plain"),
    ),
)]
pub async fn readyz(State(ops): State<Ops>) -> (StatusCode, &'static str) {
    let pg = tokio::time::timeout(PROBE, sqlx::query("SELECT 1").execute(&ops.pool))
        .await
        .is_ok_and(|r| r.is_ok());
    let counters = tokio::time::timeout(PROBE, ops.limiter.ping())
        .await
        .is_ok_and(|r| r.is_ok());
    match (pg, counters) {
        (true, true) => (StatusCode::OK, "ready"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "postgres unavailable"),
        (_, false) => (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable"),
    }
}

/// OpenMetrics text: the process's counters and histograms, and gauges read from Postgres at
/// most every few seconds (left out while it does not answer).
pub async fn metrics(State(ops): State<Ops>) -> Response {
    let gauges = ops.gauges().await;
    match ops.metrics.render(&gauges) {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "metrics could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Prometheus picks its parser by the answer's type: OpenMetrics, whose text ends in `# EOF`.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
