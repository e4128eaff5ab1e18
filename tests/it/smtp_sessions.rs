//! Mail through SMTP: the pool's connections (no more than configured, reused, replaced when the
//! server closed them), invites waiting out an outage, retries of only what the server dropped,
//! pipelined commands, and refusals that keep their session. The SMTP server is the test sink
//! ([`crate::support::smtp::SmtpSink`]), which speaks SMTP on 127.0.0.1.

use std::sync::Arc;
use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{
    api_key, config, invite_becomes, key_id, migrated, queue, queue_numbered, wait_for,
};
use crate::support::smtp::SmtpSink;
use tokio::sync::Semaphore;

/// The mail server gets at most `SENDGUARD_SMTP_CONNECTIONS` sends at once, however many invites a
/// round holds: the rest wait for a connection instead of opening their own, and all are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_uses_no_more_smtp_connections_than_configured() {
    const INVITES: usize = 20;
    let (db, pool) = migrated("smtpcap", &[]).await;
    let key = api_key(&pool).await;
    queue_numbered(&pool, "c", INVITES).await;
    let gate = Arc::new(Semaphore::new(0));
    let sink = SmtpSink::start_holding(&[], gate.clone()).await;
    let mut cfg = config(&db, Some(sink.url()));
    cfg.smtp_connections = 4;
    let app = sendguard::start(&cfg).await.expect("start");
    let four = wait_for(Duration::from_secs(10), || async {
        sink.messages().len() >= 4
    })
    .await;
    assert!(four, "four sends did not start");
    // While the server holds its answers, no fifth connection opens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.peak_sessions(), 4);
    gate.add_permits(INVITES);
    let sent = wait_for(Duration::from_secs(15), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM invites WHERE status = 'sent'")
            .fetch_one(&pool)
            .await
            .expect("sent")
            == INVITES as i64
    })
    .await;
    assert!(sent, "not every invite was sent");
    assert_eq!(sink.messages().len(), INVITES);
    app.shutdown().await;
    drop(key);
}

/// Sends keep their connections for the next ones: a round over two connections opens two, not
/// one a send. A relay restarted meanwhile closed those it kept: the next send takes a new one
/// and delivers on its first attempt, as an outage it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_reuse_their_smtp_connections_and_replace_those_the_server_closed() {
    const INVITES: usize = 20;
    let (db, pool) = migrated("smtpreuse", &[]).await;
    let key = api_key(&pool).await;
    queue_numbered(&pool, "k", INVITES).await;
    let sink = SmtpSink::start().await;
    let mut cfg = config(&db, Some(sink.url()));
    cfg.smtp_connections = 2;
    cfg.mail_retry_base_ms = 60_000;
    let app = sendguard::start(&cfg).await.expect("start");
    let sent = wait_for(Duration::from_secs(15), || async {
        sink.messages().len() == INVITES
    })
    .await;
    assert!(sent, "not every invite was sent");
    assert!(
        sink.sessions_opened() <= 2,
        "{} connections for {INVITES} sends on 2",
        sink.sessions_opened()
    );

    let port = sink.addr.port();
    sink.stop().await;
    let sink = SmtpSink::start_on(port).await;
    queue(&pool, key_id(&pool).await, &["after@example.com"]).await;
    assert!(invite_becomes(&pool, "after@example.com", "sent", 10).await);
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM invites WHERE recipient = $1")
        .bind("after@example.com")
        .fetch_one(&pool)
        .await
        .expect("attempts");
    assert_eq!(
        attempts, 1,
        "the send failed on a connection the server had closed"
    );
    assert_eq!(sink.messages().len(), 1);
    app.shutdown().await;
    drop(key);
}

/// An invite that failed while the mail server was down is sent as soon as another send shows
/// the server back, not when its backoff (here at least 30 s) runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invites_waiting_out_an_smtp_outage_are_sent_when_it_ends() {
    let (db, pool) = migrated("smtpback", &[]).await;
    let port = crate::support::free_port();
    let mut cfg = config(&db, Some(format!("smtp://127.0.0.1:{port}")));
    cfg.mail_retry_base_ms = 60_000;
    let app = sendguard::start(&cfg).await.expect("start");
    let key = api_key(&pool).await;
    Api::new(format!("http://{}", app.addr), &key)
        .accepted("w", "waiting@example.com")
        .await;
    let tried = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i32>("SELECT attempts FROM invites")
            .fetch_one(&pool)
            .await
            .expect("attempts")
            == 1
    })
    .await;
    assert!(tried, "the first attempt did not fail");
    let sink = SmtpSink::start_on(port).await;
    Api::new(format!("http://{}", app.addr), &key)
        .accepted("w", "fresh@example.com")
        .await;
    assert!(invite_becomes(&pool, "fresh@example.com", "sent", 10).await);
    assert!(
        invite_becomes(&pool, "waiting@example.com", "sent", 10).await,
        "the invite waiting since the outage was not retried when it ended"
    );
    assert_eq!(sink.messages().len(), 2);
    app.shutdown().await;
}

/// A relay that answers "try again later" (throttling) is no outage: when the next send
/// succeeds after one the server dropped without a reply, only the dropped invite is retried at
/// once; the throttled one keeps its backoff, or it would be retried at every such success and
/// use up its attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_invites_the_server_dropped_are_retried_when_a_send_succeeds() {
    let (db, pool) = migrated("throttled", &[]).await;
    let sink =
        SmtpSink::start_deferring(&["throttled@example.com"], &["dropped@example.com"]).await;
    let mut cfg = config(&db, Some(sink.url()));
    cfg.mail_retry_base_ms = 60_000;
    let app = sendguard::start(&cfg).await.expect("start");
    let key = api_key(&pool).await;
    let attempts = async |recipient: &str| -> i32 {
        sqlx::query_scalar("SELECT attempts FROM invites WHERE recipient = $1")
            .bind(recipient)
            .fetch_one(&pool)
            .await
            .expect("attempts")
    };
    for recipient in ["throttled@example.com", "dropped@example.com"] {
        Api::new(format!("http://{}", app.addr), &key)
            .accepted("t", recipient)
            .await;
        let failed = wait_for(Duration::from_secs(10), || async {
            attempts(recipient).await == 1
        })
        .await;
        assert!(failed, "the first attempt to {recipient} did not fail");
    }
    Api::new(format!("http://{}", app.addr), &key)
        .accepted("t", "other@example.com")
        .await;
    assert!(invite_becomes(&pool, "other@example.com", "sent", 10).await);
    // Both next attempts were 30-60 s away: the dropped invite's comes now.
    let retried = wait_for(Duration::from_secs(10), || async {
        attempts("dropped@example.com").await >= 2
    })
    .await;
    assert!(retried, "the invite the server dropped was not retried");
    // A wake of the throttled invite would have been in the same statement: its attempt is
    // recorded once its send is answered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(attempts("throttled@example.com").await, 1);
    app.shutdown().await;
}

/// Where the server offers PIPELINING, a send writes `MAIL`, `RCPT` and `DATA` at once (two
/// round trips a message instead of four). Where it does not, each command waits. Either way a
/// refused recipient fails its own send only, and its session, reset, carries the next sends:
/// a refusal is an answer from a working server, and a new session with a relay costs a TLS
/// handshake and a login, and counts against its limit on connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_pipeline_their_commands_where_the_server_offers_it() {
    let (db, pool) = migrated("pipelining", &[]).await;
    let key = api_key(&pool).await;
    let key_id = key_id(&pool).await;
    let sink = SmtpSink::start_refusing(0, &["refused@example.com"]).await;
    let app = one_connection(&db, &sink).await;
    let recipients = [
        "refused@example.com",
        "first@example.com",
        "last@example.com",
    ];
    refused_then_sent(&pool, key_id, recipients).await;
    let mut received: Vec<Vec<String>> = sink.messages().into_iter().map(|m| m.to).collect();
    received.sort();
    assert_eq!(
        received,
        [["first@example.com"], ["last@example.com"]].map(|to| to.map(String::from).to_vec()),
        "not what was sent"
    );
    assert_eq!(sink.pipelined_mails(), 3, "a send waited for each reply");
    assert_eq!(sink.sessions_opened(), 1, "a refusal closed its session");
    app.shutdown().await;

    let plain = SmtpSink::start_without_pipelining(&["plain-refused@example.com"]).await;
    let app = one_connection(&db, &plain).await;
    let recipients = [
        "plain-refused@example.com",
        "plain@example.com",
        "plain-last@example.com",
    ];
    refused_then_sent(&pool, key_id, recipients).await;
    assert_eq!(plain.messages().len(), 2);
    assert_eq!(
        plain.pipelined_mails(),
        0,
        "pipelined to a server that did not offer it"
    );
    assert_eq!(plain.sessions_opened(), 1, "a refusal closed its session");
    app.shutdown().await;
    drop(key);
}

/// An instance sending through `sink` on one connection, each invite tried once.
async fn one_connection(db: &crate::support::app::TestDb, sink: &SmtpSink) -> sendguard::Running {
    let mut cfg = config(db, Some(sink.url()));
    cfg.mail_max_attempts = 1;
    cfg.smtp_connections = 1;
    sendguard::start(&cfg).await.expect("start")
}

/// Queues the invite to `refused` alone and waits for it to fail, then queues the two others
/// and waits for them to be sent: on one connection, both sends come after the refusal.
async fn refused_then_sent(pool: &sqlx::PgPool, key_id: i64, [refused, a, b]: [&str; 3]) {
    queue(pool, key_id, &[refused]).await;
    assert!(
        invite_becomes(pool, refused, "failed", 10).await,
        "{refused} is not failed"
    );
    assert_refused_for_no_such_user(pool, refused).await;
    queue(pool, key_id, &[a, b]).await;
    for to in [a, b] {
        assert!(
            invite_becomes(pool, to, "sent", 10).await,
            "{to} is not sent"
        );
    }
}

/// The refusal recorded for the invite to `recipient` is the recipient's, not a reply to a
/// command after it.
async fn assert_refused_for_no_such_user(pool: &sqlx::PgPool, recipient: &str) {
    let error: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM invites WHERE recipient = $1")
            .bind(recipient)
            .fetch_one(pool)
            .await
            .expect("refused invite");
    assert!(
        error.as_deref().is_some_and(|e| e.contains("no such user")),
        "{error:?}"
    );
}
