//! The backtest is the live decision replayed: a stretch of mixed traffic sent through the real
//! service (Postgres, Redis), then every rule backtested over it, must give each recorded invite
//! the count and verdict its decision record holds.
//!
//! Left out, as the backtest cannot see them: `global` rules (counted in process and flushed)
//! and invites answered 429 (never recorded). Every rule here is `monitor`, so no sender's state
//! changes and every invite is checked against every rule that applies.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};
use crate::support::rules::{self, RuleEntry};
use sendguard::rules::backtest;
use sendguard::rules::edit::ValidRule;
use sendguard::rules::file::RulesFile;

/// (invite, rule) → (count, outcome), as the decision records hold them.
type Verdicts = BTreeMap<(String, String), (u64, String)>;

async fn send(api: &Api, body: Value) -> String {
    let (status, id) = api.send(body.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    id.expect("the invite's id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtest_gives_every_recorded_invite_its_live_verdict() {
    let replayed = |rules: &mut Vec<RuleEntry>| {
        for rule in rules.iter_mut() {
            rule.action = "monitor".into();
            rule.enabled = rule.scope != "global";
            match rule.name.as_str() {
                "sender-hourly" => rule.limit = 3,
                "ip-hourly" => rule.limit = 4,
                "recipient-daily" => rule.limit = 1,
                "sender-distinct-recipients-daily" => rule.limit = 2,
                "sender-bounces-daily" | "sender-complaints-daily" => rule.limit = 0,
                _ => {}
            }
        }
        let added: RulesFile = basic_toml::from_str(
            r#"
            [[rule]]
            name = "replay-domains"
            scope = "sender"
            signal = "distinct_domains"
            limit = 1
            window = "1h"
            [[rule]]
            name = "replay-links"
            scope = "sender"
            signal = "links"
            limit = 1
            window = "1h"
            [[rule]]
            name = "replay-recipient-domain"
            scope = "recipient_domain"
            limit = 3
            window = "1h"
            "#,
        )
        .expect("rules");
        rules.extend(added.rule);
    };
    let stage = Stage::start_prepared(
        "replay",
        async |pool| rules::apply(pool, replayed).await,
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let link = "Notes at docs.example.com/q3";
    let plain = "Join my doc";
    let aged = (chrono::Utc::now() - chrono::Duration::days(60)).to_rfc3339();

    // A new sender: links and none, repeated recipients and domains, one address.
    let mut fresh = Vec::new();
    for (to, message) in [
        ("a@x.test", link),
        ("b@y.test", plain),
        ("c@x.test", link),
        ("a@x.test", plain),
    ] {
        fresh.push(
            send(
                &api,
                json!({"sender_id": "fresh", "recipient": to, "message": message,
                       "sender_ip": "198.51.100.7"}),
            )
            .await,
        );
    }
    // An old sender from the same address: the new-sender rule does not apply to it.
    for to in ["d@x.test", "e@z.test", "a@x.test"] {
        send(
            &api,
            json!({"sender_id": "elder", "recipient": to, "message": link,
                   "sender_ip": "198.51.100.7", "sender_created_at": aged}),
        )
        .await;
    }
    // Outcomes of the new sender's first invite, then more invites that read them.
    assert_eq!(api.event(&fresh[0], "bounce").await, StatusCode::ACCEPTED);
    assert_eq!(
        api.event(&fresh[0], "complaint").await,
        StatusCode::ACCEPTED
    );
    for to in ["f@y.test", "g@w.test"] {
        send(
            &api,
            json!({"sender_id": "fresh", "recipient": to, "message": link}),
        )
        .await;
    }
    // A new sender whose invites people at five domains accepted, well after they were sent,
    // is new no longer; one whose invites were accepted the moment they went out still is.
    let mut accepted = Vec::new();
    for sender in ["vouched", "hasty"] {
        for k in 0..5 {
            let to = format!("friend{k}@d{k}.test");
            let body = json!({"sender_id": sender, "recipient": to, "message": plain});
            accepted.push(send(&api, body).await);
        }
    }
    stage.settle().await;
    sqlx::query(
        "UPDATE invites SET sent_at = now() - interval '20 minutes' WHERE sender_id = 'vouched'",
    )
    .execute(&stage.pool)
    .await
    .expect("sent earlier");
    for id in &accepted {
        assert_eq!(api.event(id, "accepted").await, StatusCode::ACCEPTED);
    }
    for sender in ["vouched", "hasty"] {
        for to in ["h@x.test", "i@v.test"] {
            let body = json!({"sender_id": sender, "recipient": to, "message": link});
            send(&api, body).await;
        }
    }

    let recorded: Vec<(uuid::Uuid, Value)> = sqlx::query_as("SELECT id, decision FROM invites")
        .fetch_all(&stage.pool)
        .await
        .expect("decisions");
    let mut live = Verdicts::new();
    for (id, decision) in &recorded {
        for entry in decision["rules"].as_array().expect("rules checked") {
            let name = entry[0].as_str().expect("rule").to_owned();
            let count = entry[1].as_u64().expect("count");
            let outcome = entry[4].as_str().expect("outcome").to_owned();
            live.insert((id.to_string(), name), (count, outcome));
        }
    }
    assert_eq!(recorded.len(), 23);

    let mut replayed = Verdicts::new();
    for rule in sendguard::rules::load_all(&stage.pool)
        .await
        .expect("rules")
        .iter()
        .filter(|r| r.enabled)
    {
        let rule = ValidRule::from(rule);
        let replay = backtest::replay(&stage.pool, &rule, 7)
            .await
            .expect("replay");
        for v in replay.verdicts {
            let outcome = if v.exceeded { "exceeded" } else { "ok" };
            replayed.insert(
                (v.invite.to_string(), rule.name.clone()),
                (v.count, outcome.to_owned()),
            );
        }
    }
    // Every signal and every scope but global had work to do (the campaign rules too), and
    // some rules were exceeded.
    let rules: std::collections::BTreeSet<&str> = live.keys().map(|(_, r)| r.as_str()).collect();
    assert_eq!(rules.len(), 13, "{rules:?}");
    assert!(live.values().any(|(_, o)| o == "exceeded"));
    let differing: Vec<_> = live
        .iter()
        .filter(|(k, v)| replayed.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone(), replayed.get(k).cloned()))
        .chain(
            replayed
                .iter()
                .filter(|(k, _)| !live.contains_key(*k))
                .map(|(k, v)| (k.clone(), (0, "not checked live".into()), Some(v.clone()))),
        )
        .collect();
    assert!(
        differing.is_empty(),
        "(invite, rule), live, replayed: {differing:#?}"
    );
}
