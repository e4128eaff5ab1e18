//! The outbox: each invite's row updated once on its way, giving up after the configured
//! attempts, taking over a dead instance's claim, marking what was sent whatever fails after
//! the send, the file transport of a machine without a mail server (hourly folders), and the
//! outbox's index of campaign subjects. Mail through SMTP: `smtp_sessions.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{
    Stage, api_key, config, connections_down_to, invite_becomes, key_id, migrated, queue, wait_for,
};
use crate::support::smtp::SmtpSink;
use reqwest::StatusCode;
use serde_json::json;
use tokio::sync::Semaphore;

async fn send_invite(addr: std::net::SocketAddr, key: &str, sender: &str, recipient: &str) {
    let resp = Api::new(format!("http://{addr}"), key)
        .invite(json!({"sender_id": sender, "recipient": recipient, "sender_name": "Bo", "resource": "doc_42"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
}
/// Updates of invite rows Postgres counted in the database of `pool`, and how many of them were
/// heap-only (no index touched, the old version pruned from its page without a vacuum).
async fn invite_updates(pool: &sqlx::PgPool) -> (i64, i64) {
    sqlx::query_as(
        "SELECT COALESCE(sum(n_tup_upd), 0)::int8, COALESCE(sum(n_tup_hot_upd), 0)::int8
         FROM pg_stat_user_tables
         WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'invites'::regclass)",
    )
    .fetch_one(pool)
    .await
    .expect("pg_stat_user_tables")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_invite_is_handed_to_the_outbox_and_its_row_updated_once() {
    const INVITES: i64 = 20;
    let stage = Stage::start("handoff", &[]).await;
    let key = api_key(&stage.pool).await;
    for n in 0..INVITES {
        send_invite(
            stage.app.addr,
            &key,
            &format!("h{n}"),
            &format!("h{n}@example.com"),
        )
        .await;
    }
    let sent = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM invites WHERE status = 'sent'")
            .fetch_one(&stage.pool)
            .await
            .expect("sent")
            == INVITES
    })
    .await;
    assert!(sent, "the invites were not all sent");
    assert_eq!(stage.sink.messages().len(), INVITES as usize);
    // The instance's connections report their counts as they close.
    let Stage { app, pool, db, .. } = stage;
    app.shutdown().await;
    // `close` can return while a connection given back just before is still being checked,
    // which then waits idle in the pool: dropping the pool closes it too.
    pool.close().await;
    drop(pool);
    let closed = connections_down_to(&db.name, 0).await;
    assert!(closed, "the instance closed its connections");
    // Each row was inserted claimed and updated once, when it was sent: a claim by a polling
    // outbox would be a second update. That update changed no indexed column: the invites'
    // indexes carry no entry for the delivered version, and no dead one is left for a vacuum.
    let pool = db.pool().await;
    assert_eq!(invite_updates(&pool).await, (INVITES, INVITES));
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_is_failed_after_the_last_attempt_with_its_error() {
    let (db, pool) = migrated("giveup", &[]).await;
    let port = crate::support::free_port();
    let mut cfg = config(&db, Some(format!("smtp://127.0.0.1:{port}")));
    cfg.mail_max_attempts = 2;
    cfg.mail_retry_base_ms = 50;
    let app = sendguard::start(&cfg).await.expect("start");
    let key = api_key(&pool).await;
    send_invite(app.addr, &key, "g", "nobody@example.com").await;
    let failed = wait_for(Duration::from_secs(10), || async {
        let status: String = sqlx::query_scalar("SELECT status FROM invites")
            .fetch_one(&pool)
            .await
            .expect("status");
        status == "failed"
    })
    .await;
    assert!(failed, "the invite should be failed after two attempts");
    let (attempts, error, waiting): (i32, Option<String>, i64) =
        sqlx::query_as("SELECT attempts, last_error, (SELECT count(*) FROM outbox) FROM invites")
            .fetch_one(&pool)
            .await
            .expect("invite");
    assert_eq!(attempts, 2);
    assert!(error.is_some_and(|e| !e.is_empty()));
    assert_eq!(waiting, 0, "a failed invite is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_claimed_by_a_dead_instance_is_sent_when_its_lease_expires() {
    let (db, pool) = migrated("lease", &[]).await;
    let key = api_key(&pool).await;
    let key_id = key_id(&pool).await;
    // As a worker that claimed the invite and died would have left it: a lease of two seconds.
    sqlx::query("INSERT INTO senders (app_id, id) VALUES (1, 'orphan')")
        .execute(&pool)
        .await
        .expect("sender");
    sqlx::query(
        "WITH orphan AS (
             INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient,
                 recipient_domain, status, decision)
             VALUES ($1, $2, 1, 'orphan', 'orphan@example.com', 'example.com', 'queued', '{}')
             RETURNING id, created_at)
         INSERT INTO outbox (invite_id, created_at, next_attempt_at, claimed_by)
         SELECT id, created_at, now() + interval '2 seconds', 'dead-worker' FROM orphan",
    )
    .bind(uuid::Uuid::new_v4())
    .bind(key_id)
    .execute(&pool)
    .await
    .expect("claimed invite");
    let sink = SmtpSink::start().await;
    let _app = sendguard::start(&config(&db, Some(sink.url())))
        .await
        .expect("start");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(sink.messages().is_empty(), "a live lease is respected");
    let sent = wait_for(Duration::from_secs(10), || async {
        sink.messages().len() == 1
    })
    .await;
    assert!(sent, "the expired claim was not taken over");
    // The row is marked after the message left, in its own statement.
    let released = wait_for(Duration::from_secs(10), || async {
        let (status, claims): (String, i64) =
            sqlx::query_as("SELECT status, (SELECT count(*) FROM outbox) FROM invites")
                .fetch_one(&pool)
                .await
                .expect("invite");
        status == "sent" && claims == 0
    })
    .await;
    assert!(released, "the sent invite keeps a claim");
    drop(key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_smtp_messages_are_written_as_eml_files() {
    let (db, pool) = migrated("filemail", &[]).await;
    let dir = std::env::temp_dir().join(format!("sendguard-eml-{}", uuid::Uuid::new_v4()));
    let mut cfg = config(&db, None);
    cfg.mail_dir = dir.clone();
    let app = sendguard::start(&cfg).await.expect("start");
    let key = api_key(&pool).await;
    send_invite(app.addr, &key, "f", "file@example.com").await;
    // One folder for the hour, one file in it. The transport writes the file in place: it is
    // read once its last line is there.
    let only = |dir: &std::path::Path| {
        let entries: Vec<_> = std::fs::read_dir(dir).ok()?.collect();
        let [Ok(entry)] = &entries[..] else {
            return None;
        };
        Some(entry.path())
    };
    let eml = |dir: &std::path::Path| {
        let path = only(&only(dir)?)?;
        let raw = std::fs::read_to_string(&path).ok()?;
        raw.contains("They shared: \"doc_42\"")
            .then_some((path, raw))
    };
    let written = wait_for(Duration::from_secs(10), || async { eml(&dir).is_some() }).await;
    assert!(written, "no complete .eml file under {}", dir.display());
    let (path, raw) = eml(&dir).expect("the file just read");
    assert_eq!(path.extension().and_then(|e| e.to_str()), Some("eml"));
    let hour = path
        .parent()
        .and_then(|folder| folder.file_name())
        .and_then(|name| name.to_str())
        .expect("the file's folder");
    assert!(
        chrono::NaiveDateTime::parse_from_str(&format!("{hour}:00"), "%Y-%m-%d-%H:%M").is_ok(),
        "the file is not in an hourly folder: {}",
        path.display()
    );
    assert!(raw.contains("To: file@example.com"), "{raw}");
    // The default app names no product; the resource stays in the body.
    assert!(raw.contains("Subject: Bo sent you an invitation"), "{raw}");
    assert!(raw.contains("They shared: \"doc_42\""), "{raw}");
    app.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_marks_what_it_sent_even_when_recording_a_failure_fails() {
    let (db, pool) = migrated("marksent", &[]).await;
    let key = api_key(&pool).await;
    let key_id = key_id(&pool).await;
    // Two invites due at once, so that one claim round takes both.
    queue(
        &pool,
        key_id,
        &["accepted@example.com", "refused@example.com"],
    )
    .await;
    // Recording the refusal fails, as it would on a connection lost mid-round.
    for statement in [
        "CREATE FUNCTION refuse_retry() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN RAISE EXCEPTION 'the retry is not recorded'; END $$",
        "CREATE TRIGGER refuse_retry BEFORE UPDATE ON invites FOR EACH ROW
             WHEN (NEW.last_error IS NOT NULL) EXECUTE FUNCTION refuse_retry()",
    ] {
        sqlx::query(statement)
            .execute(&pool)
            .await
            .expect("trigger");
    }
    let sink = SmtpSink::start_refusing(0, &["refused@example.com"]).await;
    let mut cfg = config(&db, Some(sink.url()));
    cfg.mail_lease_secs = 1;
    let app = sendguard::start(&cfg).await.expect("start");
    let marked = invite_becomes(&pool, "accepted@example.com", "sent", 10).await;
    // Past the lease, an invite sent and left unmarked would be claimed and sent again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let to_accepted = sink
        .messages()
        .iter()
        .filter(|m| m.to.iter().any(|to| to.contains("accepted@example.com")))
        .count();
    assert_eq!(to_accepted, 1, "the sent invite went out again");
    assert!(marked, "the sent invite was not marked sent");
    app.shutdown().await;
    drop(key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_marked_when_the_outbox_lost_its_connection_during_it() {
    let (db, pool) = migrated("lostconn", &[]).await;
    let key = api_key(&pool).await;
    let key_id = key_id(&pool).await;
    // A refusal is recorded on a connection of the outbox's pool, which then waits there idle.
    queue(&pool, key_id, &["refused@example.com"]).await;
    let gate = Arc::new(Semaphore::new(0));
    let sink = SmtpSink::start_holding(&["refused@example.com"], gate.clone()).await;
    // The default lease, a minute, outlasts the test: no renewal replaces the lost connection
    // before the mark does. One attempt fails the refusal at once.
    let mut cfg = config(&db, Some(sink.url()));
    cfg.mail_max_attempts = 1;
    let app = sendguard::start(&cfg).await.expect("start");
    let failed = invite_becomes(&pool, "refused@example.com", "failed", 10).await;
    assert!(failed, "the refusal was not recorded");
    queue(&pool, key_id, &["lost@example.com"]).await;
    let received = wait_for(Duration::from_secs(10), || async {
        sink.messages().len() == 1
    })
    .await;
    assert!(received, "the invite was not sent");
    // While the mail server holds its answer, the outbox's connections are lost, as in a
    // restart of Postgres.
    let ended = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'sendguard-outbox'",
        )
        .bind(&db.name)
        .fetch_one(&pool)
        .await
        .expect("terminate")
            == 0
    })
    .await;
    assert!(ended, "the outbox's connections did not end");
    gate.add_permits(10);
    let marked = invite_becomes(&pool, "lost@example.com", "sent", 5).await;
    // An invite sent and left unmarked would be claimed and sent again once its lease ran out.
    sqlx::query("UPDATE outbox SET next_attempt_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .expect("expire the claim");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(sink.messages().len(), 1, "the sent invite went out again");
    assert!(marked, "the sent invite was not marked sent");
    app.shutdown().await;
    drop(key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_send_keeps_its_claim_from_another_instance() {
    let (db, pool) = migrated("slowsend", &[]).await;
    let key = api_key(&pool).await;
    queue(&pool, key_id(&pool).await, &["slow@example.com"]).await;
    let gate = Arc::new(Semaphore::new(0));
    let sink = SmtpSink::start_holding(&[], gate.clone()).await;
    let mut cfg = config(&db, Some(sink.url()));
    cfg.mail_lease_secs = 2;
    let first = sendguard::start(&cfg).await.expect("start");
    let second = sendguard::start(&cfg).await.expect("start");
    let received = wait_for(Duration::from_secs(10), || async {
        !sink.messages().is_empty()
    })
    .await;
    assert!(received, "the invite was not sent");
    // The mail server holds its answer for two and a half leases while both outboxes claim.
    tokio::time::sleep(Duration::from_secs(5)).await;
    gate.add_permits(10);
    let marked = invite_becomes(&pool, "slow@example.com", "sent", 10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sink.messages().len(), 1, "another instance sent it again");
    assert!(marked, "the sent invite was not marked sent");
    first.shutdown().await;
    second.shutdown().await;
    drop(key);
}

/// The outbox's index of campaign subjects does not grow with the subjects it has seen: nearly
/// every text is a subject of its own, and a GIN index never drops a key. Four rounds, each of
/// 50,000 invites with subjects never seen before, through the outbox and vacuumed away, leave
/// it at most 4 MB (2.2 MB after the first, 2.9 MB after the fourth); an index of the subjects
/// themselves grew by 8 MB a round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_index_of_campaign_subjects_stays_bounded() {
    let (_db, pool) = migrated("subject-index", &[]).await;
    let mut sizes = Vec::new();
    for round in 0..4 {
        sqlx::query(
            "INSERT INTO outbox (invite_id, created_at, next_attempt_at, campaign_buckets)
             SELECT gen_random_uuid(), now(), now(),
                 ARRAY[sendguard_campaign_bucket('fingerprint:r' || $1 || 'n' || n),
                     sendguard_campaign_bucket('link_domain:r' || $1 || 'n' || n)]
             FROM generate_series(1, 50000) n",
        )
        .bind(round)
        .execute(&pool)
        .await
        .expect("a round of subjects");
        sqlx::query("DELETE FROM outbox")
            .execute(&pool)
            .await
            .expect("sent");
        sqlx::query("VACUUM outbox")
            .execute(&pool)
            .await
            .expect("vacuum");
        let bytes: i64 = sqlx::query_scalar("SELECT pg_relation_size('outbox_by_campaign')")
            .fetch_one(&pool)
            .await
            .expect("size");
        sizes.push(bytes);
    }
    assert!(
        sizes.iter().all(|&bytes| bytes <= 4 << 20),
        "bytes of the index after each round: {sizes:?}"
    );
}

/// The service and the migration that filled the outbox's buckets give a subject the same one:
/// a sweep would miss the invites of a subject whose bucket was written otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_and_the_database_agree_on_a_subjects_bucket() {
    let (_db, pool) = migrated("subject-bucket", &[]).await;
    let subjects = [
        "fingerprint:9f2c61d0a4e7",
        "link_domain:example.com",
        "link_domain:xn--e1afmkfd.xn--p1ai",
        "link_domain:пример.рф",
        "",
    ];
    for subject in subjects {
        let in_sql: i32 = sqlx::query_scalar("SELECT sendguard_campaign_bucket($1)")
            .bind(subject)
            .fetch_one(&pool)
            .await
            .expect("the bucket in SQL");
        assert_eq!(
            in_sql,
            sendguard::campaigns::bucket(subject),
            "the bucket of {subject:?}"
        );
    }
}

/// Kept connections commit as asked, and the outbox's skip the WAL flush unless configured (a
/// lost commit there only sends an invite again). Which part asks for which is wired in
/// `startup.rs` and `invites/writer.rs` (the writer's `Commits::Flushed`); Postgres shows no
/// other session's settings, so this test reads them on connections of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_commit_as_asked_and_the_outbox_skips_the_flush_by_default() {
    use sendguard::db::{Commits, connect_kept};
    let db = crate::support::app::TestDb::create("outbox_commits").await;
    for (commits, flush) in [(Commits::Flushed, "on"), (Commits::Unflushed, "off")] {
        let connections = connect_kept(&db.url, "sendguard-test", 1, commits)
            .await
            .expect("connect");
        let shown: String = connections
            .run(async |conn| {
                sqlx::query_scalar("SHOW synchronous_commit")
                    .fetch_one(conn)
                    .await
            })
            .await
            .expect("show");
        assert_eq!(shown, flush, "{commits:?}");
    }
    let cfg = config(&db, None);
    assert!(
        !cfg.outbox_flushed_commits,
        "the outbox's commits skip the flush unless configured"
    );
}
