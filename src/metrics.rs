//! Counters and latency histograms in Prometheus' text format, kept in process. Gauges that
//! describe the database (queue depth, senders awaiting review) are read when scraped.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

type Labels = Vec<(&'static str, String)>;

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

#[derive(Default)]
struct Inner {
    counters: BTreeMap<(&'static str, Labels), u64>,
    histograms: BTreeMap<(&'static str, Labels), Histogram>,
}

/// Every metric name with its help text, in the order they are written.
const HELP: [(&str, &str, &str); 9] = [
    (
        "sendguard_decisions_total",
        "counter",
        "Rule checks by rule, action and outcome.",
    ),
    (
        "sendguard_invites_total",
        "counter",
        "Invites by the status they were given or reached.",
    ),
    (
        "sendguard_dependency_errors_total",
        "counter",
        "Failed calls to Redis, Postgres or SMTP.",
    ),
    (
        "sendguard_smtp_failures_total",
        "counter",
        "Failed deliveries.",
    ),
    (
        "sendguard_retention_removed_total",
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
];

#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

impl Metrics {
    pub fn count(&self, name: &'static str, pairs: &[(&'static str, &str)]) {
        self.add(name, pairs, 1);
    }

    pub fn add(&self, name: &'static str, pairs: &[(&'static str, &str)], n: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *inner.counters.entry((name, labels(pairs))).or_default() += n;
    }

    pub fn observe(&self, name: &'static str, pairs: &[(&'static str, &str)], took: Duration) {
        let seconds = took.as_secs_f64();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let h = inner.histograms.entry((name, labels(pairs))).or_default();
        for (count, bound) in h.counts.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *count += 1;
            }
        }
        h.sum += seconds;
        h.total += 1;
    }

    /// The text exposition, followed by `gauges` (name, help, value) read by the caller.
    pub fn render(&self, gauges: &[(&str, &str, f64)]) -> String {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for (name, kind, help) in HELP {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for ((n, l), value) in &inner.counters {
                if *n == name {
                    let _ = writeln!(out, "{name}{} {value}", format_labels(l, None));
                }
            }
            for ((n, l), h) in &inner.histograms {
                if *n != name {
                    continue;
                }
                for (count, bound) in h.counts.iter().zip(BUCKETS) {
                    let le = bound.to_string();
                    let _ = writeln!(out, "{name}_bucket{} {count}", format_labels(l, Some(&le)));
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    format_labels(l, Some("+Inf")),
                    h.total
                );
                let _ = writeln!(out, "{name}_sum{} {}", format_labels(l, None), h.sum);
                let _ = writeln!(out, "{name}_count{} {}", format_labels(l, None), h.total);
            }
        }
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        out
    }
}

/// `{a="x",b="y"}` with values escaped as the format asks.
fn format_labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_histograms_render_in_text_format() {
        let m = Metrics::default();
        m.count("sendguard_invites_total", &[("status", "held")]);
        m.count("sendguard_invites_total", &[("status", "held")]);
        m.observe("sendguard_redis_seconds", &[], Duration::from_millis(3));
        let text = m.render(&[("sendguard_outbox_queue_depth", "Queued invites.", 4.0)]);
        assert!(
            text.contains("sendguard_invites_total{status=\"held\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("sendguard_redis_seconds_bucket{le=\"0.0025\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("sendguard_redis_seconds_bucket{le=\"0.005\"} 1"),
            "{text}"
        );
        assert!(text.contains("sendguard_redis_seconds_count 1"), "{text}");
        assert!(text.contains("sendguard_outbox_queue_depth 4"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.count("sendguard_decisions_total", &[("rule", "a\"b\nc")]);
        assert!(m.render(&[]).contains(r#"rule="a\"b\nc""#));
    }
}
