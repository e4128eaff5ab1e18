//! `ip` rules count the address an app asserts for its sender: an IPv6 network by its /64, a
//! mapped IPv4 address as the IPv4 address, and each app's traffic apart from the others'
//! (docs/DESIGN.md §2). Against the real service, Postgres and Redis.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, app_key, create_app};
use crate::support::rules::{self, RuleEntry};

/// A stage where only the `ip` rule counts, at a limit of 3, answered 429.
async fn ip_only(test: &str) -> Stage {
    let only_ip = |rules: &mut Vec<RuleEntry>| {
        for rule in rules {
            rule.enabled = rule.name == "ip-hourly";
            if rule.enabled {
                rule.limit = 3;
            }
        }
    };
    Stage::start_prepared(test, async |pool| rules::apply(pool, only_ip).await, |_| {}).await
}

async fn status(api: &Api, sender: &str, to: &str, ip: &str) -> StatusCode {
    api.send(json!({"sender_id": sender, "recipient": to, "sender_ip": ip}))
        .await
        .0
}

/// Eight addresses of one /64 are one client: the fourth is over the limit of 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_network_counts_as_one_address() {
    let stage = ip_only("ip_net").await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let mut answers = Vec::new();
    for n in 1..=8 {
        let ip = format!("2001:db8:1:3::{n}");
        answers.push(status(&api, &format!("u{n}"), &format!("r{n}@example.com"), &ip).await);
    }
    assert_eq!(&answers[..3], [StatusCode::OK; 3]);
    assert_eq!(
        &answers[3..],
        [StatusCode::TOO_MANY_REQUESTS; 5],
        "one /64, one limit"
    );
    // Another /64 has its own.
    assert_eq!(
        status(&api, "u9", "r9@example.com", "2001:db8:1:4::1").await,
        StatusCode::OK
    );
}

/// `::ffff:198.51.100.7` is `198.51.100.7`: it counts with it, and is recorded as it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_address_counts_as_its_ipv4_address() {
    let stage = ip_only("ip_mapped").await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for (n, ip) in ["198.51.100.7", "::ffff:198.51.100.7", "198.51.100.7"]
        .iter()
        .enumerate()
    {
        assert_eq!(
            status(&api, "a", &format!("r{n}@example.com"), ip).await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&api, "b", "r3@example.com", "::ffff:198.51.100.7").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the fourth invite from one address, however it is written"
    );
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT sender_ip FROM invites ORDER BY 1")
            .fetch_all(&stage.pool)
            .await
            .expect("addresses");
    assert_eq!(recorded, ["198.51.100.7"]);
}

/// An address asserted by one app counts for that app only: another app's invite from it is
/// neither refused nor told the first app's count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_apps_traffic_from_an_address_does_not_limit_anothers() {
    let stage = ip_only("ip_apps").await;
    create_app(&stage.pool, "other", Default::default()).await;
    let first = Api::new(stage.base(), api_key(&stage.pool).await);
    let second = Api::new(stage.base(), app_key(&stage.pool, "other").await);
    let ip = "203.0.113.50";
    for n in 0..3 {
        assert_eq!(
            status(&first, "a", &format!("a{n}@example.com"), ip).await,
            StatusCode::OK
        );
    }
    assert_eq!(
        status(&first, "a", "a3@example.com", ip).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let resp = second
        .invite(json!({"sender_id": "b", "recipient": "b0@example.com", "sender_ip": ip}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK, "the second app's own count");
    assert!(resp.headers().get("ratelimit").is_none());
}
