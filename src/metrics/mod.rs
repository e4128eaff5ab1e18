//! Counters and latency histograms, kept in process and written in the OpenMetrics text format,
//! which Prometheus scrapes. Gauges that describe the database (queue depth, senders awaiting
//! review) are read when scraped.
//!
//! Updates take no lock shared by all metrics and allocate nothing: label sets are made of
//! `&'static str`s, enums and integers, a labelled series is found under its own family's read
//! lock, a counter is an atomic add and a histogram locks only its own series. The two labels
//! whose values are not known at compile time, a rule's name and a request's route, are kept
//! as described at `Decisions` and `Route`.

mod decisions;
mod labels;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use decisions::Decisions;
pub use labels::{DependencyError, Route};
use labels::{HttpLabels, KindLabel, StatusLabel, TableLabel};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

fn latency() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Upper bounds of the batch-size buckets, in invites, up to the largest batch.
const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Upper bounds of the buckets of how late a ban ends, in seconds: the task looks every second.
const LAG_BUCKETS: [f64; 8] = [0.5, 1.0, 2.0, 5.0, 15.0, 60.0, 300.0, 3600.0];

/// The process's metrics; clones share them.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

/// One field per metric, each registered once in `registry`.
struct Inner {
    registry: Registry,
    decisions: Decisions,
    invites: Family<StatusLabel, Counter>,
    dependency_errors: Family<KindLabel, Counter>,
    smtp_failures: Counter,
    retention_removed: Family<TableLabel, Counter>,
    redis_seconds: Histogram,
    postgres_seconds: Histogram,
    sender_read_seconds: Histogram,
    smtp_seconds: Histogram,
    http_request_seconds: Family<HttpLabels, Histogram, fn() -> Histogram>,
    batch_invites: Histogram,
    batch_retries: Counter,
    ban_expiry_lag_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut inner = Inner {
            registry: Registry::default(),
            decisions: Decisions::default(),
            invites: Family::default(),
            dependency_errors: Family::default(),
            smtp_failures: Counter::default(),
            retention_removed: Family::default(),
            redis_seconds: latency(),
            postgres_seconds: latency(),
            sender_read_seconds: latency(),
            smtp_seconds: latency(),
            http_request_seconds: Family::new_with_constructor(latency),
            batch_invites: Histogram::new(BATCH_BUCKETS),
            batch_retries: Counter::default(),
            ban_expiry_lag_seconds: Histogram::new(LAG_BUCKETS),
        };
        // Counters are registered without `_total`, which the encoder appends; help texts
        // without their final period, which it adds.
        let r = &mut inner.registry;
        r.register(
            "sendguard_decisions",
            "Rule checks by rule, action and outcome",
            inner.decisions.family.clone(),
        );
        r.register(
            "sendguard_invites",
            "Invites by the status they were given or reached",
            inner.invites.clone(),
        );
        r.register(
            "sendguard_dependency_errors",
            "Failed calls to Redis, Postgres or SMTP",
            inner.dependency_errors.clone(),
        );
        r.register(
            "sendguard_smtp_failures",
            "Failed deliveries",
            inner.smtp_failures.clone(),
        );
        r.register(
            "sendguard_retention_removed",
            "Rows removed for being older than the retention, by table",
            inner.retention_removed.clone(),
        );
        r.register(
            "sendguard_redis_seconds",
            "Latency of limiter calls to Redis",
            inner.redis_seconds.clone(),
        );
        r.register(
            "sendguard_postgres_seconds",
            "Latency of recording an invite in Postgres",
            inner.postgres_seconds.clone(),
        );
        r.register(
            "sendguard_sender_read_seconds",
            "Latency of reading a sender's standing that this instance had not cached",
            inner.sender_read_seconds.clone(),
        );
        r.register(
            "sendguard_smtp_seconds",
            "Latency of sending one email",
            inner.smtp_seconds.clone(),
        );
        r.register(
            "sendguard_http_request_seconds",
            "Latency of HTTP requests by route and status",
            inner.http_request_seconds.clone(),
        );
        r.register(
            "sendguard_batch_invites",
            "Invites written by one commit of the group commit",
            inner.batch_invites.clone(),
        );
        r.register(
            "sendguard_batch_retries",
            "Batches written again after Postgres aborted them as deadlocked",
            inner.batch_retries.clone(),
        );
        r.register(
            "sendguard_ban_expiry_lag_seconds",
            "Time from the end of a ban's term to the ban ended",
            inner.ban_expiry_lag_seconds.clone(),
        );
        Metrics {
            inner: Arc::new(inner),
        }
    }
}

impl Metrics {
    /// One rule checked for one invite; `action` is the rule's, `allowed` whether it passed.
    pub fn decision(&self, rule: &str, action: &'static str, allowed: bool) {
        self.inner.decisions.count(rule, action, allowed);
    }

    /// `n` invites given or reaching `status`.
    pub fn invites(&self, status: &'static str, n: u64) {
        self.inner
            .invites
            .get_or_create(&StatusLabel { status })
            .inc_by(n);
    }

    pub fn dependency_error(&self, kind: DependencyError) {
        self.inner
            .dependency_errors
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    pub fn smtp_failure(&self) {
        self.inner.smtp_failures.inc();
    }

    pub fn retention_removed(&self, table: &'static str, n: u64) {
        self.inner
            .retention_removed
            .get_or_create(&TableLabel { table })
            .inc_by(n);
    }

    /// One batch of limiter calls to Redis.
    pub fn redis_latency(&self, took: Duration) {
        self.inner.redis_seconds.observe(took.as_secs_f64());
    }

    /// One invite recorded in Postgres.
    pub fn postgres_latency(&self, took: Duration) {
        self.inner.postgres_seconds.observe(took.as_secs_f64());
    }

    /// One sender's standing read from Postgres, with the others missing from the cache.
    pub fn sender_read_latency(&self, took: Duration) {
        self.inner.sender_read_seconds.observe(took.as_secs_f64());
    }

    /// One batch of `invites` committed by the writer.
    pub fn batch_written(&self, invites: usize) {
        self.inner.batch_invites.observe(invites as f64);
    }

    /// One batch written again after a deadlock.
    pub fn batch_retried(&self) {
        self.inner.batch_retries.inc();
    }

    /// One ban ended, `late` after its term was over.
    pub fn ban_expiry_lag(&self, late: Duration) {
        self.inner
            .ban_expiry_lag_seconds
            .observe(late.as_secs_f64());
    }

    /// One email sent.
    pub fn smtp_latency(&self, took: Duration) {
        self.inner.smtp_seconds.observe(took.as_secs_f64());
    }

    pub fn http_request(&self, route: Route, status: StatusCode, took: Duration) {
        self.inner
            .http_request_seconds
            .get_or_create(&HttpLabels {
                route,
                status: status.as_u16(),
            })
            .observe(took.as_secs_f64());
    }

    /// The exposition: every metric, then `gauges` (name, help without its final period,
    /// value) read by the caller, then the closing `# EOF`.
    pub fn render(&self, gauges: &[(&str, &str, f64)]) -> Result<String, fmt::Error> {
        let mut read = Registry::default();
        for &(name, help, value) in gauges {
            read.register(name, help, ConstGauge::new(value));
        }
        let mut out = String::new();
        text::encode_registry(&mut out, &self.inner.registry)?;
        text::encode(&mut out, &read)?;
        Ok(out)
    }
}
