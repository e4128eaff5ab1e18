//! Outgoing webhooks against PostgreSQL and a real receiver on loopback: retried until
//! delivered with a stable id and a valid signature, redirects not followed, internal addresses
//! refused without a connection, the target read at delivery time, the outbox shared by workers.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sendguard::webhooks::{self, Deliverer, EventType, WebhookSettings};
use serde_json::{Map, json};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::support::app::{TestDb, migrated, secret_box};
use crate::support::rules;
use crate::support::webhook_receiver::{Redirector, WebhookReceiver};

/// A migrated database of the test's own, removed when dropped.
struct Scratch {
    pool: PgPool,
    _db: TestDb,
}

impl Scratch {
    async fn create() -> Scratch {
        let (db, pool) = migrated("webhooks", &[]).await;
        Scratch { pool, _db: db }
    }
}

/// App `name` with its webhook secret stored sealed, as `sendguard app` stores it.
async fn app(pool: &PgPool, name: &str, url: Option<&str>, secret: Option<&str>) -> i64 {
    let sealed = match secret {
        Some(secret) => Some(secret_box(pool).await.seal(secret)),
        None => None,
    };
    sqlx::query_scalar(
        "INSERT INTO apps (name, webhook_url, webhook_secret) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(name)
    .bind(url)
    .bind(sealed)
    .fetch_one(pool)
    .await
    .expect("app")
}

/// One event written in a transaction of its own, as a caller would inside its change.
async fn event(pool: &PgPool, app_id: i64, app_name: &str, kind: EventType, sender: &str) -> Uuid {
    let mut tx = pool.begin().await.expect("begin");
    let data = json!({"sender_id": sender, "reason": "test"})
        .as_object()
        .cloned()
        .expect("an object");
    let id = webhooks::enqueue(&mut tx, app_id, app_name, kind, chrono::Utc::now(), data)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    id
}

/// Settings for a test: retries due at once, so rounds can follow each other.
fn settings(allow_private: bool) -> WebhookSettings {
    WebhookSettings {
        allow_private,
        lease: Duration::from_secs(30),
        batch: 16,
        retry_base: Duration::from_millis(1),
        poll: Duration::from_millis(50),
    }
}

#[derive(Debug, sqlx::FromRow)]
struct Row {
    attempts: i32,
    delivered: bool,
    gave_up: bool,
    scheduled: bool,
    claimed: bool,
    last_status: Option<i32>,
    last_error: Option<String>,
}

async fn row(pool: &PgPool, id: Uuid) -> Row {
    sqlx::query_as(
        "SELECT attempts, delivered_at IS NOT NULL AS delivered, gave_up_at IS NOT NULL AS gave_up,
                next_attempt_at > now() AS scheduled, claimed_until IS NOT NULL AS claimed,
                last_status, last_error
         FROM webhook_events WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("event row")
}

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events WHERE delivered_at IS NULL AND gave_up_at IS NULL",
    )
    .fetch_one(pool)
    .await
    .expect("pending")
}

/// As `settings`, with retries a minute away, so a test sees them scheduled.
fn patient(allow_private: bool) -> WebhookSettings {
    WebhookSettings {
        retry_base: Duration::from_secs(60),
        ..settings(allow_private)
    }
}

/// Rounds of `deliverer` until nothing is pending: at most 200 rounds and 20 seconds.
async fn drain(deliverer: &Deliverer, pool: &PgPool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    for _ in 0..200 {
        deliverer.deliver_due().await.expect("round");
        if pending(pool).await == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_retried_until_delivered_with_a_stable_id_and_a_valid_signature() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    let receiver = WebhookReceiver::start(&secret, 2).await;
    let app_id = app(&db.pool, "docs", Some(&receiver.url()), Some(&secret)).await;
    let kinds = [
        EventType::SenderBanned,
        EventType::InviteHeld,
        EventType::SenderLifted,
    ];
    let mut ids = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        ids.push((
            event(&db.pool, app_id, "docs", kind, &format!("u{i}")).await,
            kind,
        ));
    }
    let deliverer = Deliverer::new(db.pool.clone(), settings(true), secret_box(&db.pool).await)
        .expect("deliverer");

    // The first round: one attempt each, two of them refused with 503 and recorded.
    assert_eq!(deliverer.deliver_due().await.expect("round"), 3);
    let mut refused = 0;
    for (id, _) in &ids {
        let r = row(&db.pool, *id).await;
        assert_eq!(r.attempts, 1);
        assert!(!r.claimed, "the lease is released after the attempt");
        if r.last_status == Some(503) {
            refused += 1;
            assert!(!r.delivered && !r.gave_up);
            assert!(r.last_error.is_some_and(|e| e.contains("503")));
        }
    }
    assert_eq!(refused, 2);

    assert!(
        drain(&deliverer, &db.pool).await,
        "every event is delivered"
    );
    assert!(receiver.wait_for(3, Duration::from_secs(1)).await);
    let received = receiver.received();
    assert_eq!(received.len(), 3, "each event arrives once");
    let payloads: Vec<(Uuid, String)> = sqlx::query_as("SELECT id, payload FROM webhook_events")
        .fetch_all(&db.pool)
        .await
        .expect("payloads");
    for (id, kind) in &ids {
        let got = received
            .iter()
            .find(|r| r.id == id.to_string())
            .unwrap_or_else(|| panic!("event {id} arrived"));
        assert_eq!(got.kind, kind.as_str());
        // The timestamp header is the attempt's, not the event's.
        let skew = (crate::support::webhook_receiver::unix_now() - got.timestamp).abs();
        assert!(
            skew <= 5,
            "webhook-timestamp {} is {skew} s off",
            got.timestamp
        );
        assert_eq!(got.body["data"]["app"], "docs");
        assert!(
            got.body["data"]["sender_id"]
                .as_str()
                .is_some_and(|s| s.starts_with('u'))
        );
        assert!(
            chrono::DateTime::parse_from_rfc3339(
                got.body["timestamp"].as_str().expect("a timestamp")
            )
            .is_ok()
        );
        let stored = payloads.iter().find(|(p, _)| p == id).expect("stored");
        assert_eq!(got.raw, stored.1, "the body is sent as stored and signed");
        let r = row(&db.pool, *id).await;
        assert!(r.delivered && !r.gave_up && !r.claimed);
        assert_eq!((r.last_status, r.last_error), (Some(200), None));
    }
    // Five verified requests: the two refused ones carried ids that arrived later.
    let verified = receiver.verified_ids();
    assert_eq!(verified.len(), 5, "{verified:?}");
    let arrived: HashSet<&str> = received.iter().map(|r| r.id.as_str()).collect();
    assert!(verified[..2].iter().all(|id| arrived.contains(id.as_str())));
    let total: i64 = sqlx::query_scalar("SELECT sum(attempts) FROM webhook_events")
        .fetch_one(&db.pool)
        .await
        .expect("attempts");
    assert_eq!(total, 5);

    let recent = webhooks::recent(&db.pool, app_id, 10)
        .await
        .expect("recent");
    assert_eq!(recent.len(), 3);
    assert!(
        recent
            .iter()
            .all(|d| d.delivered_at.is_some() && d.gave_up_at.is_none())
    );
    let kinds: HashSet<&str> = recent.iter().map(|d| d.kind.as_str()).collect();
    assert_eq!(
        kinds,
        HashSet::from(["sender.banned", "invite.held", "sender.lifted"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_attempt_and_is_not_followed() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    let elsewhere = WebhookReceiver::start(&secret, 0).await;
    let redirector = Redirector::start(elsewhere.url()).await;
    let app_id = app(&db.pool, "docs", Some(&redirector.url()), Some(&secret)).await;
    let id = event(&db.pool, app_id, "docs", EventType::SenderTrusted, "u1").await;
    let deliverer = Deliverer::new(db.pool.clone(), patient(true), secret_box(&db.pool).await)
        .expect("deliverer");

    assert_eq!(deliverer.deliver_due().await.expect("round"), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(redirector.hits(), 1);
    assert_eq!(
        elsewhere.requests(),
        0,
        "the redirect's target gets nothing"
    );
    let r = row(&db.pool, id).await;
    assert_eq!((r.attempts, r.last_status), (1, Some(307)));
    assert!(!r.delivered && !r.gave_up && r.scheduled, "{r:?}");
    assert!(r.last_error.is_some_and(|e| e.contains("not followed")));
}

/// A loopback port that counts the connections it accepts.
struct Counter {
    port: u16,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Counter {
    async fn start() -> Counter {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Counter {
            port,
            connections,
            task,
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_addresses_are_refused_at_delivery_without_a_connection() {
    let db = Scratch::create().await;
    let counter = Counter::start().await;
    let secret = webhooks::new_secret();
    let port = counter.port;
    // As saved before the checks, or by a name whose DNS changed since.
    let targets = [
        (format!("https://127.0.0.1:{port}/hook"), "loopback"),
        (
            format!("https://localhost:{port}/hook"),
            "localhost resolves to",
        ),
        (
            format!("https://[::ffff:127.0.0.1]:{port}/hook"),
            "loopback",
        ),
        (format!("http://127.0.0.1:{port}/hook"), "must use https"),
    ];
    let mut ids = Vec::new();
    for (i, (url, expected)) in targets.iter().enumerate() {
        let name = format!("app{i}");
        let app_id = app(&db.pool, &name, Some(url), Some(&secret)).await;
        ids.push((
            event(&db.pool, app_id, &name, EventType::SenderBanned, "u").await,
            *expected,
        ));
    }
    let deliverer = Deliverer::new(db.pool.clone(), patient(false), secret_box(&db.pool).await)
        .expect("deliverer");

    assert_eq!(deliverer.deliver_due().await.expect("round"), targets.len());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        counter.connections.load(Ordering::SeqCst),
        0,
        "no connection was made"
    );
    for (id, expected) in ids {
        let r = row(&db.pool, id).await;
        assert_eq!((r.attempts, r.last_status), (1, None), "{r:?}");
        assert!(!r.delivered && !r.gave_up && r.scheduled, "{r:?}");
        let error = r.last_error.expect("the refusal is recorded");
        assert!(error.contains(expected), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_and_url_are_read_at_delivery_time() {
    let db = Scratch::create().await;
    let (old, new) = (webhooks::new_secret(), webhooks::new_secret());
    let receiver = WebhookReceiver::start(&new, 0).await;
    let app_id = app(&db.pool, "docs", Some(&receiver.url()), Some(&old)).await;
    let first = event(
        &db.pool,
        app_id,
        "docs",
        EventType::SenderShadowBanned,
        "u1",
    )
    .await;
    let deliverer = Deliverer::new(db.pool.clone(), settings(true), secret_box(&db.pool).await)
        .expect("deliverer");

    assert_eq!(deliverer.deliver_due().await.expect("round"), 1);
    assert_eq!(row(&db.pool, first).await.last_status, Some(401));
    // The operator rotates the secret: the pending event is signed with the new one.
    sqlx::query("UPDATE apps SET webhook_secret = $1")
        .bind(secret_box(&db.pool).await.seal(&new))
        .execute(&db.pool)
        .await
        .expect("rotate");
    assert!(drain(&deliverer, &db.pool).await);
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(row(&db.pool, first).await.attempts, 2);

    // The URL removed: the next event is given up, with the reason, and nothing is attempted.
    let second = event(&db.pool, app_id, "docs", EventType::SenderBanned, "u2").await;
    sqlx::query("UPDATE apps SET webhook_url = NULL")
        .execute(&db.pool)
        .await
        .expect("remove url");
    assert_eq!(deliverer.deliver_due().await.expect("round"), 0);
    let r = row(&db.pool, second).await;
    assert!(r.gave_up && !r.delivered && r.attempts == 0, "{r:?}");
    assert!(r.last_error.is_some_and(|e| e.contains("no webhook URL")));
    assert_eq!(receiver.requests(), 2);
}

/// A receiver down for days loses nothing (docs/DESIGN.md §4): an event three days old that failed
/// twenty times is tried again, at most four hours later, and delivered once the receiver
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_failing_for_days_is_delivered_once_the_receiver_answers() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    // Refuses the first request, then accepts.
    let receiver = WebhookReceiver::start(&secret, 1).await;
    let app_id = app(&db.pool, "docs", Some(&receiver.url()), Some(&secret)).await;
    let id = event(&db.pool, app_id, "docs", EventType::SenderBanned, "u").await;
    sqlx::query(
        "UPDATE webhook_events SET created_at = now() - interval '3 days', attempts = 20
         WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .expect("age the event");
    let deliverer = Deliverer::new(db.pool.clone(), patient(true), secret_box(&db.pool).await)
        .expect("deliverer");
    assert_eq!(deliverer.deliver_due().await.expect("round"), 1);
    let r = row(&db.pool, id).await;
    assert!(
        !r.gave_up && r.scheduled && r.attempts == 21,
        "kept for a later attempt: {r:?}"
    );
    assert_eq!(r.last_status, Some(503));
    let within: bool = sqlx::query_scalar(
        "SELECT next_attempt_at <= now() + interval '4 hours 48 minutes'
         FROM webhook_events WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .expect("next attempt");
    assert!(within, "retried within the 4 h cap and its jitter");
    // The hours pass.
    sqlx::query("UPDATE webhook_events SET next_attempt_at = now() WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("due");
    assert!(drain(&deliverer, &db.pool).await, "delivered");
    assert!(row(&db.pool, id).await.delivered);
    assert_eq!(receiver.requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_the_outbox_and_respect_a_live_lease() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    let receiver = WebhookReceiver::start(&secret, 0).await;
    let app_id = app(&db.pool, "docs", Some(&receiver.url()), Some(&secret)).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(
            event(
                &db.pool,
                app_id,
                "docs",
                EventType::InviteHeld,
                &format!("u{i}"),
            )
            .await,
        );
    }
    // One event held by a worker that died a moment ago: its lease runs for an hour.
    sqlx::query(
        "UPDATE webhook_events SET claimed_until = now() + interval '1 hour' WHERE id = $1",
    )
    .bind(ids[0])
    .execute(&db.pool)
    .await
    .expect("orphan lease");
    let small = WebhookSettings {
        batch: 4,
        ..settings(true)
    };
    let a = Deliverer::new(db.pool.clone(), small.clone(), secret_box(&db.pool).await)
        .expect("deliverer");
    let b = Deliverer::new(db.pool.clone(), small, secret_box(&db.pool).await).expect("deliverer");
    let (mut made_a, mut made_b) = (0, 0);
    for _ in 0..20 {
        let (ra, rb) = tokio::join!(a.deliver_due(), b.deliver_due());
        made_a += ra.expect("round a");
        made_b += rb.expect("round b");
        if pending(&db.pool).await == 1 {
            break;
        }
    }
    assert_eq!(made_a + made_b, 11, "one attempt per free event");
    assert!(
        made_a > 0 && made_b > 0,
        "both workers took some: {made_a} and {made_b}"
    );
    let received: Vec<String> = receiver.received().into_iter().map(|r| r.id).collect();
    let unique: HashSet<&String> = received.iter().collect();
    assert_eq!((received.len(), unique.len()), (11, 11), "none twice");
    assert!(
        !unique.contains(&ids[0].to_string()),
        "a live lease is respected"
    );

    // The lease expires: the event is taken over and delivered.
    sqlx::query("UPDATE webhook_events SET claimed_until = now() - interval '1 second'")
        .execute(&db.pool)
        .await
        .expect("expire the lease");
    assert!(drain(&a, &db.pool).await);
    assert!(
        receiver
            .received()
            .iter()
            .any(|r| r.id == ids[0].to_string())
    );
}

/// `data` keys given by the caller are kept, and `app` is always the app's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_stores_the_body_once_with_the_app_name() {
    let db = Scratch::create().await;
    let app_id = app(&db.pool, "docs", None, None).await;
    let mut data = Map::new();
    data.insert("sender_id".into(), json!("u9"));
    data.insert("app".into(), json!("spoofed"));
    let mut conn = db.pool.acquire().await.expect("connection");
    let at = chrono::DateTime::parse_from_rfc3339("2025-06-01T08:30:00Z")
        .expect("time")
        .with_timezone(&chrono::Utc);
    let id = webhooks::enqueue(&mut conn, app_id, "docs", EventType::SenderBanned, at, data)
        .await
        .expect("enqueue");
    let (kind, payload): (String, String) =
        sqlx::query_as("SELECT type, payload FROM webhook_events WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .expect("row");
    assert_eq!(kind, "sender.banned");
    assert_eq!(
        payload,
        r#"{"type":"sender.banned","timestamp":"2025-06-01T08:30:00.000Z","data":{"app":"docs","sender_id":"u9"}}"#
    );
}

/// An https target goes through the TLS client (rustls with ring): here a loopback port that
/// closes every connection, so the handshake fails and the attempt is recorded as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_is_reached_through_tls() {
    let db = Scratch::create().await;
    let counter = Counter::start().await;
    let secret = webhooks::new_secret();
    let url = format!("https://127.0.0.1:{}/hook", counter.port);
    let app_id = app(&db.pool, "docs", Some(&url), Some(&secret)).await;
    let id = event(&db.pool, app_id, "docs", EventType::SenderBanned, "u").await;
    let deliverer = Deliverer::new(db.pool.clone(), patient(true), secret_box(&db.pool).await)
        .expect("deliverer");

    assert_eq!(deliverer.deliver_due().await.expect("round"), 1);
    assert_eq!(counter.connections.load(Ordering::SeqCst), 1);
    let r = row(&db.pool, id).await;
    assert_eq!((r.attempts, r.last_status), (1, None));
    assert!(!r.delivered && !r.gave_up && r.scheduled, "{r:?}");
    let error = r.last_error.expect("the failure is recorded");
    assert!(error.starts_with("cannot connect"), "{error}");
}

/// The whole path, through a running instance: an app's senders are shadow-banned by a rule,
/// held by another, then confirmed and lifted by an admin; the app's receiver refuses the first
/// two deliveries and still gets every event, once each, signed with the app's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_receiver_gets_every_event_signed_even_after_refusing_twice() {
    use crate::support::api::Api;
    use crate::support::app::{Stage, app_key};
    use sendguard::apps::{AppChanges, store};
    use sendguard::moderation::review::{self, Review, ReviewAction};
    use sendguard::sender_key::SenderKey;

    let stage = Stage::start_prepared(
        "webhooks_e2e",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 1).await,
        |_| {},
    )
    .await;
    // The secret comes with the first URL; the receiver then takes the URL's place.
    let (_, secret) = store::create(
        &stage.pool,
        "drawbox",
        AppChanges {
            webhook_url: Some("http://127.0.0.1:9/".into()),
            ..AppChanges::default()
        },
        &secret_box(&stage.pool).await,
        true,
        "test",
    )
    .await
    .expect("app");
    let secret = secret.expect("a secret with the first webhook URL");
    let receiver = WebhookReceiver::start(&secret, 2).await;
    let (app, kept) = store::update(
        &stage.pool,
        "drawbox",
        AppChanges {
            webhook_url: Some(receiver.url()),
            ..AppChanges::default()
        },
        &secret_box(&stage.pool).await,
        true,
        "test",
    )
    .await
    .expect("update");
    assert_eq!(kept, None, "a changed URL keeps the secret");
    let api = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    for n in 0..2 {
        api.accepted("spammy", &format!("s{n}@example.com")).await;
    }
    // A new sender's link: held by `new-sender-links`.
    let (status, _) = api
        .send(json!({"sender_id": "linky", "recipient": "l@example.com",
                     "message": "see https://scam.example"}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert!(
        receiver.wait_for(2, Duration::from_secs(20)).await,
        "received {:?}",
        receiver.received()
    );
    let spammy = SenderKey::new(app.id, "spammy");
    let apply = |action, version| {
        let (pool, spammy) = (stage.pool.clone(), spammy.clone());
        async move {
            let limiter = sendguard::limiter::Limiter::Memory(Default::default());
            let rules = sendguard::rules::RuleCache::load(&pool)
                .await
                .expect("rules");
            let seen_held =
                sqlx::query_scalar("SELECT held_stored FROM senders WHERE id = 'spammy'")
                    .fetch_optional(&pool)
                    .await
                    .expect("held");
            review::apply(
                &pool,
                &limiter,
                &sendguard::limiter::KeyPrefix::default(),
                &rules,
                &Default::default(),
                &Review {
                    sender: &spammy,
                    action,
                    seen_version: version,
                    seen_held,
                    actor: "alice",
                    admin_id: None,
                    note: None,
                    release_after: std::time::Duration::ZERO,
                    term: None,
                    mistake: false,
                },
            )
            .await
            .expect("review")
        }
    };
    let confirmed = apply(ReviewAction::ConfirmBan, 2).await;
    apply(ReviewAction::LiftAndRelease, confirmed.version).await;
    assert!(
        receiver.wait_for(4, Duration::from_secs(20)).await,
        "received {:?}",
        receiver.received()
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let got = receiver.received();
    let mut kinds: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                r.kind.clone(),
                r.body["data"]["sender_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("invite.held".to_owned(), "linky".to_owned()),
            ("sender.banned".to_owned(), "spammy".to_owned()),
            ("sender.lifted".to_owned(), "spammy".to_owned()),
            ("sender.shadow_banned".to_owned(), "spammy".to_owned()),
        ],
        "each event once"
    );
    assert!(got.iter().all(|r| r.body["data"]["app"] == "drawbox"));
    assert!(
        receiver.requests() >= 6,
        "two refusals, then four deliveries"
    );
    let delivered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM webhook_events WHERE delivered_at IS NOT NULL")
            .fetch_one(&stage.pool)
            .await
            .expect("count");
    assert_eq!(delivered, 4);
}

/// One app's receiver that takes connections and never answers, with a backlog larger than a
/// worker's slots, does not hold up another app's event: each app gets a share of the slots,
/// and a slot is refilled as soon as its attempt ends, not when the slowest of a round does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_receiver_with_a_backlog_does_not_hold_up_another_apps_event() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    // Accepts and keeps every connection, says nothing.
    let silent = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let silent_url = format!("http://{}/hook", silent.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    let kept = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            open.push(socket);
        }
    });
    let stuck = app(&db.pool, "stuck", Some(&silent_url), Some(&secret)).await;
    for n in 0..40 {
        event(
            &db.pool,
            stuck,
            "stuck",
            EventType::SenderBanned,
            &format!("s{n}"),
        )
        .await;
    }
    let receiver = WebhookReceiver::start(&secret, 0).await;
    let fine = app(&db.pool, "fine", Some(&receiver.url()), Some(&secret)).await;
    // Due after the backlog, so the backlog comes first in time.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let id = event(&db.pool, fine, "fine", EventType::SenderBanned, "f").await;
    let worker = Deliverer::new(db.pool.clone(), settings(true), secret_box(&db.pool).await)
        .expect("deliverer");
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !row(&db.pool, id).await.delivered && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let delivered = row(&db.pool, id).await.delivered;
    stop.cancel();
    running.abort();
    kept.abort();
    assert!(
        delivered,
        "the other app's event waited for the silent receiver (10 s per attempt)"
    );
    // No attempt of the silent app ended yet: its connections are its attempts in hand.
    let share = settings(true).batch as usize / 4;
    let held = accepted.load(Ordering::SeqCst);
    assert!(
        (1..=share).contains(&held),
        "{held} attempts at once for one app"
    );
}

/// Two workers claiming one app's events at once take different ones: the events another
/// worker is locking are skipped and the next ones taken, instead of the claim coming back
/// empty while events are due. Here the test holds the app's four oldest events, as a worker's
/// claim in progress would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_takes_the_next_events_when_another_worker_holds_the_oldest() {
    let db = Scratch::create().await;
    let secret = webhooks::new_secret();
    let receiver = WebhookReceiver::start(&secret, 0).await;
    let app_id = app(&db.pool, "busy", Some(&receiver.url()), Some(&secret)).await;
    let mut ids = Vec::new();
    for n in 0..8 {
        ids.push(
            event(
                &db.pool,
                app_id,
                "busy",
                EventType::SenderBanned,
                &format!("b{n}"),
            )
            .await,
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut other = db.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM webhook_events WHERE id = ANY($1) FOR UPDATE")
        .bind(&ids[..4])
        .execute(&mut *other)
        .await
        .expect("hold the oldest");
    let worker = Deliverer::new(db.pool.clone(), settings(true), secret_box(&db.pool).await)
        .expect("deliverer");
    // An app's share of 16 slots is 4.
    assert_eq!(worker.deliver_due().await.expect("claim"), 4);
    other.rollback().await.expect("release");
    for id in &ids[4..] {
        assert!(row(&db.pool, *id).await.delivered, "{id}");
    }
}
