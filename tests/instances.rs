//! Several instances on one database and one Redis: the `sendguard serve` binary, twice.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use support::app::{TestDb, api_key, migrated, queued, wait_for};
use support::serve::ServeProcess;
use support::smtp::SmtpSink;

async fn spawn(db: &TestDb, prefix: &str, smtp_url: &str) -> ServeProcess {
    ServeProcess::start(
        &db.url,
        prefix,
        &[("SENDGUARD_SMTP_URL", smtp_url.to_owned())],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_limit_and_deliver_each_invite_once() {
    let (db, pool) = migrated(
        "twoinst",
        &["UPDATE rules SET limit_count = 5 WHERE name = 'sender-hourly'"],
    )
    .await;
    let sink = SmtpSink::start().await;
    let prefix = support::unique_prefix("inst");
    let instances = [
        spawn(&db, prefix.as_str(), &sink.url()).await,
        spawn(&db, prefix.as_str(), &sink.url()).await,
    ];
    let key = api_key(&pool).await;
    let http = reqwest::Client::new();
    // Twelve invites from one sender, alternating instances, to twelve recipients; and eight
    // from eight different senders, none over any limit.
    for n in 0..20 {
        let sender = if n < 12 {
            "busy".to_owned()
        } else {
            format!("calm{n}")
        };
        let resp = http
            .post(format!("{}/api/v1/invites", instances[n % 2].base))
            .bearer_auth(&key)
            .json(&json!({"sender_id": sender, "recipient": format!("p{n}@example.com")}))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::OK);
    }
    wait_for(Duration::from_secs(20), || async {
        queued(&pool).await == 0 && sink.messages().len() >= 13
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let messages = sink.messages();
    let mut recipients: Vec<String> = messages.iter().flat_map(|m| m.to.clone()).collect();
    recipients.sort();
    let before = recipients.len();
    recipients.dedup();
    assert_eq!(before, recipients.len(), "an invite was delivered twice");
    assert_eq!(
        messages.len(),
        5 + 8,
        "the busy sender's five within the combined limit, and the eight calm ones"
    );
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'busy' AND status = 'held'",
    )
    .fetch_one(&pool)
    .await
    .expect("held");
    assert_eq!(held, 7);
    drop(instances);
    sink.stop();
    pool.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_changed_in_the_database_is_in_force_within_two_seconds() {
    let (db, pool) = migrated("reload", &[]).await;
    let sink = SmtpSink::start().await;
    let app = sendguard::start(&support::app::config(&db, Some(sink.url())))
        .await
        .expect("start");
    let key = api_key(&pool).await;
    let http = reqwest::Client::new();
    let invite = |n: u32| {
        http.post(format!("http://{}/api/v1/invites", app.addr))
            .bearer_auth(&key)
            .json(&json!({"sender_id": format!("r{n}"), "recipient": format!("q{n}@example.com"), "sender_ip": "192.0.2.7"}))
            .send()
    };
    assert_eq!(invite(0).await.expect("first").status(), StatusCode::OK);
    sqlx::query("UPDATE rules SET limit_count = 1 WHERE name = 'ip-hourly'")
        .execute(&pool)
        .await
        .expect("update rule");
    let changed_at = std::time::Instant::now();
    let mut n = 1;
    let in_force = wait_for(Duration::from_secs(2), || {
        n += 1;
        let sent = invite(n);
        async move {
            sent.await
                .is_ok_and(|r| r.status() == StatusCode::TOO_MANY_REQUESTS)
        }
    })
    .await;
    assert!(
        in_force,
        "the new limit was not in force after {:?}",
        changed_at.elapsed()
    );
    app.shutdown().await;
    sink.stop();
    pool.close().await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_invites_beyond_the_cap_are_counted_not_stored() {
    let (db, pool) = migrated(
        "heldcap",
        &["UPDATE rules SET limit_count = 1 WHERE name = 'sender-hourly'"],
    )
    .await;
    let sink = SmtpSink::start().await;
    let mut cfg = support::app::config(&db, Some(sink.url()));
    cfg.held_cap = 3;
    let app = sendguard::start(&cfg).await.expect("start");
    let key = api_key(&pool).await;
    let http = reqwest::Client::new();
    for n in 0..7 {
        let resp = http
            .post(format!("http://{}/api/v1/invites", app.addr))
            .bearer_auth(&key)
            .json(&json!({"sender_id": "flood", "recipient": format!("h{n}@example.com")}))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let (stored, overflow): (i64, i64) =
        sqlx::query_as("SELECT held_stored, held_overflow FROM senders WHERE id = 'flood'")
            .fetch_one(&pool)
            .await
            .expect("sender");
    assert_eq!(
        (stored, overflow),
        (3, 3),
        "one sent, three held and stored, three counted"
    );
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'flood' AND status = 'held'",
    )
    .fetch_one(&pool)
    .await
    .expect("held");
    assert_eq!(held, 3);
    app.shutdown().await;
    sink.stop();
    pool.close().await;
    db.drop_db().await;
}
