//! Several instances on one database and one Redis: the `sendguard serve` binary as processes.

use sendguard::admin::accounts::Role;
use std::time::{Duration, Instant};

use crate::support::api::Api;
use crate::support::app::{
    Stage, TestDb, api_key, config, execute, migrated, prepared, queue_numbered, queued, wait_for,
};
use crate::support::rules;
use crate::support::serve::ServeProcess;
use crate::support::smtp::SmtpSink;
use crate::support::{dashboard, html};
use reqwest::StatusCode;
use serde_json::json;

async fn spawn(db: &TestDb, prefix: &str, smtp_url: &str) -> ServeProcess {
    ServeProcess::start(
        &db.url,
        prefix,
        &[
            ("SENDGUARD_SMTP_URL", smtp_url.to_owned()),
            // A dead instance's claims come free quickly.
            ("SENDGUARD_MAIL_LEASE_SECS", "2".to_owned()),
        ],
    )
    .await
}

/// An SMTP address that accepts connections and never says a word: an instance sending there
/// keeps the invites it claimed until it dies.
fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("smtp://{}", listener.local_addr().expect("address"));
    listener.set_nonblocking(true).expect("nonblocking");
    let task = tokio::spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (url, task)
}

/// Three `serve` processes on one database and one Redis: a rule changed in one dashboard is in
/// force on all three within two seconds; the combined count of a rule equals its limit; an
/// instance killed with invites in hand loses none of them, and none is delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_limits_follow_one_dashboard_and_survive_a_kill() {
    let (db, pool) = prepared("threeinst", async |pool| {
        rules::set(pool, "sender-hourly", |r| r.limit = 5).await;
        // The probes of the rule change are held, so no instance has mail to send before the
        // traffic that the third one is killed in.
        execute(
            pool,
            &[
                "INSERT INTO senders (app_id, id, state) VALUES (1, 'probe0', 'banned'),
                 (1, 'probe1', 'banned'), (1, 'probe2', 'banned')",
            ],
        )
        .await;
    })
    .await;
    sendguard::admin::accounts::add(&pool, "alice", "correct horse battery", Role::Admin, "test")
        .await
        .expect("admin");
    let sink = SmtpSink::start().await;
    let (stalled_smtp, hole) = black_hole();
    let prefix = crate::support::unique_prefix("inst");
    let mut instances = vec![
        spawn(&db, prefix.as_str(), &sink.url()).await,
        spawn(&db, prefix.as_str(), &sink.url()).await,
        spawn(&db, prefix.as_str(), &stalled_smtp).await,
    ];
    let bases: Vec<String> = instances.iter().map(|i| i.base.clone()).collect();
    let api = Api::new(bases[0].clone(), api_key(&pool).await);
    let apis: Vec<Api> = bases.iter().map(|base| api.at(base.clone())).collect();

    // A rule changed through the first instance's dashboard...
    let admin = dashboard::client();
    let login = dashboard::log_in(&admin, &bases[0], "alice", "correct horse battery").await;
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let id: i64 = sqlx::query_scalar("SELECT id FROM rules WHERE name = 'ip-hourly'")
        .fetch_one(&pool)
        .await
        .expect("rule id");
    let form_url = format!("{}/admin/rules/{id}", bases[0]);
    let form = admin.get(&form_url).send().await.expect("form");
    let form = form.text().await.expect("form body");
    let saved = admin
        .post(&form_url)
        .form(&[
            ("csrf", html::parse(&form).field("csrf").as_str()),
            ("version", html::parse(&form).field("version").as_str()),
            ("scope", "ip"),
            ("limit", "1"),
            ("window", "3600"),
            ("algorithm", "hash_counters"),
            ("rule_action", "reject"),
            ("enabled", "on"),
            ("intent", "save"),
        ])
        .send()
        .await
        .expect("save rule");
    assert_eq!(saved.status(), StatusCode::SEE_OTHER);
    let changed_at = Instant::now();
    // ...is in force on every instance within two seconds: a second invite from one address
    // is refused (the first may pass, under either limit).
    for (n, api) in apis.iter().enumerate() {
        let mut tries = 0;
        let in_force = wait_for(Duration::from_millis(2000).saturating_sub(changed_at.elapsed()), || {
            tries += 1;
            let body = json!({"sender_id": format!("probe{n}"), "recipient": format!("probe{n}-{tries}@example.net"), "sender_ip": format!("198.51.100.{n}")});
            let sent = api.send(body);
            async move { sent.await.0 == StatusCode::TOO_MANY_REQUESTS }
        })
        .await;
        assert!(
            in_force,
            "instance {n}: not in force {:?} after the save",
            changed_at.elapsed()
        );
    }

    // Thirty invites round-robin: fifteen from one sender (limit 5), fifteen from calm senders,
    // spread over a few outbox rounds so that every instance claims some.
    let mut accepted = Vec::new();
    for n in 0..30 {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let sender = if n % 2 == 0 {
            "busy".to_owned()
        } else {
            format!("calm{n}")
        };
        let body = json!({"sender_id": sender, "recipient": format!("p{n}@example.com")});
        let (status, id) = apis[n % 3].send(body).await;
        assert_eq!(status, StatusCode::OK);
        accepted.push(id.expect("an id"));
    }
    // The third instance claims invites it can never send...
    let third = format!("{}-%", instances[2].child.id());
    let claimed_by_third = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT invite_id::text FROM outbox WHERE claimed_by LIKE $1",
        )
        .bind(&third)
        .fetch_all(&pool)
        .await
        .expect("claims")
    };
    let claimed = wait_for(Duration::from_secs(10), || async {
        !claimed_by_third().await.is_empty()
    })
    .await;
    assert!(
        claimed,
        "the third instance claimed nothing: the kill would test nothing"
    );
    // ...and is killed with them in hand, while traffic goes on at the other two.
    let orphans = claimed_by_third().await;
    instances[2].child.kill().expect("SIGKILL");
    instances[2].child.wait().expect("reaped");
    for n in 30..40 {
        let body =
            json!({"sender_id": format!("late{n}"), "recipient": format!("p{n}@example.com")});
        let (status, id) = apis[n % 2].send(body).await;
        assert_eq!(status, StatusCode::OK);
        accepted.push(id.expect("an id"));
    }

    // Five from the busy sender, fifteen calm, ten late; each once.
    let expected = 5 + 15 + 10;
    wait_for(Duration::from_secs(30), || async {
        queued(&pool).await == 0 && sink.messages().len() >= expected
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let messages = sink.messages();
    let mut recipients: Vec<String> = messages.iter().flat_map(|m| m.to.clone()).collect();
    recipients.sort();
    let before = recipients.len();
    recipients.dedup();
    assert_eq!(before, recipients.len(), "an invite was delivered twice");
    assert_eq!(messages.len(), expected);
    let statuses: Vec<(String, String)> =
        sqlx::query_as("SELECT id::text, status FROM invites WHERE id::text = ANY($1)")
            .bind(&accepted)
            .fetch_all(&pool)
            .await
            .expect("accepted invites");
    assert_eq!(
        statuses.len(),
        accepted.len(),
        "an accepted invite is missing"
    );
    let held = statuses.iter().filter(|(_, s)| s == "held").count();
    let sent = statuses.iter().filter(|(_, s)| s == "sent").count();
    assert_eq!(
        (sent, held),
        (30, 10),
        "the busy sender's ten over the limit are held"
    );
    let orphans_sent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE id::text = ANY($1) AND status = 'sent'",
    )
    .bind(&orphans)
    .fetch_one(&pool)
    .await
    .expect("orphans");
    assert_eq!(
        orphans_sent as usize,
        orphans.len(),
        "invites claimed by the killed instance were sent by the others"
    );
    hole.abort();
    drop(instances);
}

/// An instance killed in the middle of a round far larger than its SMTP connections: each send
/// was marked as it completed, so the instance that takes its claims over once their lease
/// runs out repeats at most the sends that were in flight, no more than the connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_repeats_no_more_than_the_sends_in_flight() {
    const CONNECTIONS: usize = 2;
    // One claimed round (up to 32 invites), fifteen times the connections.
    const INVITES: usize = 30;
    let (db, pool) = migrated("crashrepeat", &[]).await;
    api_key(&pool).await;
    queue_numbered(&pool, "r", INVITES).await;
    // Slow enough per message that the round is under way for well over a second.
    let sink = SmtpSink::start_slow(Duration::from_millis(100)).await;
    let mut doomed = ServeProcess::start(
        &db.url,
        crate::support::unique_prefix("crash").as_str(),
        &[
            ("SENDGUARD_SMTP_URL", sink.url()),
            ("SENDGUARD_SMTP_CONNECTIONS", CONNECTIONS.to_string()),
            ("SENDGUARD_MAIL_LEASE_SECS", "2".to_owned()),
        ],
    )
    .await;
    let under_way = wait_for(Duration::from_secs(20), || async {
        sink.messages().len() >= 12
    })
    .await;
    assert!(under_way, "the round did not get under way");
    doomed.child.kill().expect("SIGKILL");
    doomed.child.wait().expect("reaped");
    let before_the_kill = sink.messages().len();
    assert!(
        before_the_kill < INVITES,
        "the instance finished its round before the kill: it tests nothing"
    );

    // Another instance takes the dead one's claims over once their lease runs out.
    let survivor = sendguard::start(&config(&db, Some(sink.url())))
        .await
        .expect("second instance");
    let finished = wait_for(Duration::from_secs(30), || async {
        queued(&pool).await == 0
    })
    .await;
    assert!(finished, "the queue was not finished after the kill");
    survivor.shutdown().await;

    let mut delivered: Vec<String> = sink.messages().into_iter().flat_map(|m| m.to).collect();
    delivered.sort();
    let total = delivered.len();
    delivered.dedup();
    assert_eq!(delivered.len(), INVITES, "every invite was delivered");
    let twice = total - INVITES;
    assert!(
        twice <= CONNECTIONS,
        "{twice} recipients got the mail twice ({before_the_kill} sent before the kill); at \
         most the {CONNECTIONS} sends in flight may be repeated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_invites_beyond_the_cap_are_counted_not_stored() {
    let stage = Stage::start_prepared(
        "heldcap",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 1).await,
        |cfg| cfg.held_cap = 3,
    )
    .await;
    let pool = &stage.pool;
    let api = Api::new(stage.base(), api_key(pool).await);
    for n in 0..7 {
        api.accepted("flood", &format!("h{n}@example.com")).await;
    }
    let (stored, overflow): (i64, i64) =
        sqlx::query_as("SELECT held_stored, held_overflow FROM senders WHERE id = 'flood'")
            .fetch_one(pool)
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
    .fetch_one(pool)
    .await
    .expect("held");
    assert_eq!(held, 3);
}

/// Sender states and API keys are cached per instance. A ban holds the very next invite on every
/// instance, even one whose cache never heard of it (the state is checked again at commit); a
/// revoked key is refused everywhere at once (a trigger's notification empties the caches), not
/// after a cached copy's minute is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_or_a_revoked_key_is_in_force_on_every_instance_at_once() {
    let stage = Stage::start("caches", &[]).await;
    let other = sendguard::start(&crate::support::app::config(
        &stage.db,
        Some(stage.sink.url()),
    ))
    .await
    .expect("second instance");
    let client = Api::new(format!("http://{}", other.addr), api_key(&stage.pool).await);
    // The second instance has read (and cached) the sender as active and the key as live.
    let (status, id) = client
        .send(json!({"sender_id": "cached", "recipient": "c0@example.com"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let status_of = |id: String| {
        let pool = stage.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT status FROM invites WHERE id::text = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .expect("invite")
        }
    };
    assert_ne!(status_of(id.expect("id")).await, "held");

    // Banned with the notification switched off: the cache stays stale.
    for sql in [
        "ALTER TABLE senders DISABLE TRIGGER senders_state_changed",
        "UPDATE senders SET state = 'banned' WHERE id = 'cached'",
        "ALTER TABLE senders ENABLE TRIGGER senders_state_changed",
    ] {
        sqlx::query(sql).execute(&stage.pool).await.expect(sql);
    }
    let (status, id) = client
        .send(json!({"sender_id": "cached", "recipient": "c1@example.com"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        status_of(id.expect("id")).await,
        "held",
        "the invite right after the ban is held"
    );

    let name: String = sqlx::query_scalar("SELECT name FROM api_keys")
        .fetch_one(&stage.pool)
        .await
        .expect("key name");
    assert!(
        sendguard::api_keys::revoke(&stage.pool, &name, "test")
            .await
            .expect("revoke")
    );
    let refused = wait_for(Duration::from_secs(1), || async {
        let body = json!({"sender_id": "someone", "recipient": "s@example.com"});
        client.send(body).await.0 == StatusCode::UNAUTHORIZED
    })
    .await;
    assert!(refused, "the second instance still accepts the revoked key");
}
