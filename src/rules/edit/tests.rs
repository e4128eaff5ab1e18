//! The validation of a rule's fields.

use super::*;

fn input() -> RuleInput {
    RuleInput {
        name: "sender-burst".into(),
        scope: "sender".into(),
        signal: "invites".into(),
        limit: "5".into(),
        window: "60".into(),
        algorithm: "hash_counters".into(),
        action: "shadow_ban".into(),
        new_senders_only: false,
        enabled: true,
    }
}

#[test]
fn distinct_senders_count_what_many_senders_share() {
    let of = |scope: &str, signal: &str| {
        validate(&RuleInput {
            scope: scope.into(),
            signal: signal.into(),
            action: "hold".into(),
            ..input()
        })
    };
    let text = of("fingerprint", "distinct_senders").expect("a campaign rule");
    assert_eq!(text.quota.algorithm, Algorithm::Distinct);
    assert!(of("link_domain", "distinct_senders").is_ok());
    assert!(of("recipient", "distinct_senders").is_ok());
    let one = of("sender", "distinct_senders").expect_err("one sender is one sender");
    assert!(one.signal.is_some());
    let text_outcomes = of("fingerprint", "bounces").expect_err("no text of an outcome");
    assert!(text_outcomes.signal.is_some());
}

#[test]
fn a_good_rule_validates() {
    let rule = validate(&input()).expect("valid");
    assert_eq!(rule.quota.limit, 5);
    assert!(
        rule.quota.count_over_limit,
        "shadow-ban rules count past the limit"
    );
}

#[test]
fn only_a_senders_own_outcomes_may_flag_it() {
    for scope in ["recipient", "recipient_domain", "ip", "global"] {
        let mut rule = input();
        rule.scope = scope.into();
        rule.signal = "complaints".into();
        let errors = validate(&rule).expect_err("a third party could run it up");
        assert!(errors.rule_action.is_some(), "{scope}");
        rule.action = "suppress".into();
        assert!(validate(&rule).is_ok(), "{scope} may suppress");
    }
    let mut own = input();
    own.signal = "bounces".into();
    assert!(validate(&own).is_ok(), "a sender's own bounces may flag it");
}

#[test]
fn each_bad_field_gets_its_own_error() {
    let mut bad = input();
    bad.name = "Bad Name".into();
    bad.limit = "-1".into();
    bad.window = "ten".into();
    bad.algorithm = "magic".into();
    let errors = validate(&bad).expect_err("invalid");
    assert!(errors.name.is_some());
    assert!(errors.limit.is_some());
    assert!(errors.window.is_some());
    assert!(errors.algorithm.is_some());
    assert!(errors.scope.is_none() && errors.rule_action.is_none());
}

#[test]
fn windows_take_units_and_limits_may_be_zero() {
    assert_eq!(parse_window("90"), Some(90));
    assert_eq!(parse_window("15m"), Some(900));
    assert_eq!(parse_window("1d"), Some(86_400));
    assert_eq!(parse_window("1w"), None);
    assert_eq!(window_text(86_400), "1d");
    assert_eq!(window_text(5400), "90m");
    let mut links = input();
    links.signal = "links".into();
    links.limit = "0".into();
    links.action = "hold".into();
    links.window = "1d".into();
    let rule = validate(&links).expect("limit 0 for any occurrence");
    assert_eq!((rule.quota.limit, rule.signal), (0, Signal::Links));
    let mut bucket = input();
    bucket.algorithm = "token_bucket".into();
    bucket.limit = "0".into();
    assert!(
        validate(&bucket)
            .expect_err("no zero bucket")
            .limit
            .is_some()
    );
    let mut distinct = input();
    distinct.signal = "distinct_recipients".into();
    distinct.limit = "100".into();
    let rule = validate(&distinct).expect("distinct");
    assert_eq!(rule.quota.algorithm, Algorithm::Distinct);
    assert_eq!(rule.algorithm, Algorithm::HashCounters(EdgeMode::Harsh));
}
