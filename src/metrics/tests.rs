use axum::body::Body;
use axum::extract::Request;

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
            "sendguard_sender_read_seconds",
            "histogram",
            "Latency of reading a sender's standing that this instance had not cached.",
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
        (
            "sendguard_batch_invites",
            "histogram",
            "Invites written by one commit of the group commit.",
        ),
        (
            "sendguard_batch_retries",
            "counter",
            "Batches written again after Postgres aborted them as deadlocked.",
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
            "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5",
            "1.0", "2.5", "+Inf"
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
