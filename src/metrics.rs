//! Counters and latency histograms, kept in process and written in the OpenMetrics text format,
//! which Prometheus scrapes. Gauges that describe the database (queue depth, senders awaiting
//! review) are read when scraped.
//!
//! Updates take no lock shared by all metrics and allocate nothing: label sets are made of
//! `&'static str`s, enums and integers, a labelled series is found under its own family's read
//! lock, a counter is an atomic add and a histogram locks only its own series. The two labels
//! whose values are not known at compile time, a rule's name and a request's route, are kept
//! as described at `Decisions` and `Route`.

use std::collections::HashMap;
use std::fmt::{self, Write};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

fn latency() -> Histogram {
    Histogram::new(BUCKETS)
}

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
    smtp_seconds: Histogram,
    http_request_seconds: Family<HttpLabels, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: DependencyError,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabel {
    table: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    rule: String,
    action: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: Route,
    status: u16,
}

/// What `sendguard_dependency_errors_total` counts, by its `kind` label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DependencyError {
    Redis,
    Postgres,
    Smtp,
    /// A request shed because its route group had too many in flight.
    Overload,
}

impl EncodeLabelValue for DependencyError {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(match self {
            DependencyError::Redis => "redis",
            DependencyError::Postgres => "postgres",
            DependencyError::Smtp => "smtp",
            DependencyError::Overload => "overload",
        })
    }
}

/// The `route` label of a request: the route template axum matched, or `unmatched`. Axum hands
/// every request of a route the same shared string, so keeping it costs a reference count
/// rather than a copy, and the set of values stays the fixed set of templates.
#[derive(Clone, Debug)]
pub struct Route(Option<MatchedPath>);

impl Route {
    pub fn of(request: &Request) -> Route {
        Route(request.extensions().get::<MatchedPath>().cloned())
    }

    pub fn as_str(&self) -> &str {
        self.0.as_ref().map_or("unmatched", MatchedPath::as_str)
    }
}

impl PartialEq for Route {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Route {}

impl Hash for Route {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.as_str())
    }
}

/// `sendguard_decisions_total`. Rule names are operators' strings, edited at run time, so they
/// cannot be static labels, and a lookup in the family would need an owned `String` per check.
/// Instead each rule's two counters are created on its first check and kept in a read-mostly
/// map looked up by `&str`: once a rule is known, counting its check is a lock-free load, a
/// hash of its name and an atomic add. A rule renamed or given another action gets new series;
/// the old ones stay, as counters do.
#[derive(Default)]
struct Decisions {
    family: Family<DecisionLabels, Counter>,
    by_rule: ArcSwap<HashMap<String, RuleCounters>>,
}

#[derive(Clone)]
struct RuleCounters {
    action: &'static str,
    ok: Counter,
    exceeded: Counter,
}

impl RuleCounters {
    fn count(&self, allowed: bool) {
        let counter = if allowed { &self.ok } else { &self.exceeded };
        counter.inc();
    }
}

impl Decisions {
    fn count(&self, rule: &str, action: &'static str, allowed: bool) {
        let known = self.by_rule.load();
        match known.get(rule).filter(|c| c.action == action) {
            Some(counters) => counters.count(allowed),
            None => self.add(rule, action).count(allowed),
        }
    }

    /// The counters of a rule not seen yet (or whose action changed). Two checks racing here
    /// get the same counters from the family.
    fn add(&self, rule: &str, action: &'static str) -> RuleCounters {
        let series = |outcome| {
            self.family.get_or_create_owned(&DecisionLabels {
                rule: rule.to_owned(),
                action,
                outcome,
            })
        };
        let counters = RuleCounters {
            action,
            ok: series("ok"),
            exceeded: series("exceeded"),
        };
        self.by_rule.rcu(|known| {
            let mut known = HashMap::clone(known);
            known.insert(rule.to_owned(), counters.clone());
            known
        });
        counters
    }
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
            smtp_seconds: latency(),
            http_request_seconds: Family::new_with_constructor(latency),
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
            "sendguard_smtp_seconds",
            "Latency of sending one email",
            inner.smtp_seconds.clone(),
        );
        r.register(
            "sendguard_http_request_seconds",
            "Latency of HTTP requests by route and status",
            inner.http_request_seconds.clone(),
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

#[cfg(test)]
mod tests {
    use axum::body::Body;

    use super::*;

    /// Each metric's `# HELP` and `# TYPE` lines, as dashboards have known them (a family is
    /// written once it has a series).
    #[test]
    fn every_metric_keeps_its_name_type_and_help() {
        let m = Metrics::default();
        m.decision("r", "monitor", true);
        m.invites("queued", 1);
        m.dependency_error(DependencyError::Redis);
        m.retention_removed("invites", 1);
        m.http_request(
            Route::of(&Request::new(Body::empty())),
            StatusCode::OK,
            Duration::ZERO,
        );
        let text = m.render(&[]).expect("render");
        for (name, kind, help) in [
            (
                "sendguard_decisions",
                "counter",
                "Rule checks by rule, action and outcome.",
            ),
            (
                "sendguard_invites",
                "counter",
                "Invites by the status they were given or reached.",
            ),
            (
                "sendguard_dependency_errors",
                "counter",
                "Failed calls to Redis, Postgres or SMTP.",
            ),
            ("sendguard_smtp_failures", "counter", "Failed deliveries."),
            (
                "sendguard_retention_removed",
                "counter",
                "Rows removed for being older than the retention, by table.",
            ),
            (
                "sendguard_redis_seconds",
                "histogram",
                "Latency of limiter calls to Redis.",
            ),
            (
                "sendguard_postgres_seconds",
                "histogram",
                "Latency of recording an invite in Postgres.",
            ),
            (
                "sendguard_smtp_seconds",
                "histogram",
                "Latency of sending one email.",
            ),
            (
                "sendguard_http_request_seconds",
                "histogram",
                "Latency of HTTP requests by route and status.",
            ),
        ] {
            let lines = format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
            assert!(text.contains(&lines), "{lines} in\n{text}");
        }
        assert!(
            text.contains("\nsendguard_smtp_failures_total 0\n"),
            "{text}"
        );
        assert!(text.ends_with("\n# EOF\n"), "{text}");
    }

    #[test]
    fn counters_histograms_and_gauges_render() {
        let m = Metrics::default();
        m.invites("held", 1);
        m.invites("held", 1);
        m.invites("sent", 3);
        m.dependency_error(DependencyError::Overload);
        m.retention_removed("audit_log", 5);
        m.redis_latency(Duration::from_millis(3));
        let text = m
            .render(&[("sendguard_outbox_queue_depth", "Queued invites", 4.0)])
            .expect("render");
        for series in [
            "sendguard_invites_total{status=\"held\"} 2",
            "sendguard_invites_total{status=\"sent\"} 3",
            "sendguard_dependency_errors_total{kind=\"overload\"} 1",
            "sendguard_retention_removed_total{table=\"audit_log\"} 5",
            "sendguard_redis_seconds_bucket{le=\"0.0025\"} 0",
            "sendguard_redis_seconds_bucket{le=\"0.005\"} 1",
            "sendguard_redis_seconds_bucket{le=\"+Inf\"} 1",
            "sendguard_redis_seconds_count 1",
            "sendguard_postgres_seconds_count 0",
            "# TYPE sendguard_outbox_queue_depth gauge",
            "sendguard_outbox_queue_depth 4.0",
        ] {
            assert!(text.contains(&format!("{series}\n")), "{series} in\n{text}");
        }
        let bounds: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("sendguard_smtp_seconds_bucket{le=\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert_eq!(
            bounds,
            [
                "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
                "0.5", "1.0", "2.5", "+Inf"
            ]
        );
    }

    #[test]
    fn decisions_count_by_rule_action_and_outcome() {
        let m = Metrics::default();
        m.decision("sender-hourly", "shadow_ban", true);
        m.decision("sender-hourly", "shadow_ban", true);
        m.decision("sender-hourly", "shadow_ban", false);
        // An operator changed the rule's action: its checks count under the new one.
        m.decision("sender-hourly", "hold", false);
        let text = m.render(&[]).expect("render");
        for series in [
            "{rule=\"sender-hourly\",action=\"shadow_ban\",outcome=\"ok\"} 2",
            "{rule=\"sender-hourly\",action=\"shadow_ban\",outcome=\"exceeded\"} 1",
            "{rule=\"sender-hourly\",action=\"hold\",outcome=\"exceeded\"} 1",
            "{rule=\"sender-hourly\",action=\"hold\",outcome=\"ok\"} 0",
        ] {
            let line = format!("sendguard_decisions_total{series}\n");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
    }

    #[test]
    fn requests_no_route_matched_share_one_label() {
        let m = Metrics::default();
        for _ in 0..2 {
            let request = Request::new(Body::empty());
            m.http_request(
                Route::of(&request),
                StatusCode::NOT_FOUND,
                Duration::from_millis(1),
            );
        }
        let text = m.render(&[]).expect("render");
        assert!(
            text.contains(
                "sendguard_http_request_seconds_count{route=\"unmatched\",status=\"404\"} 2\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.decision("a\"b\nc\\d", "monitor", true);
        let text = m.render(&[]).expect("render");
        assert!(text.contains(r#"rule="a\"b\nc\\d""#), "{text}");
    }
}
