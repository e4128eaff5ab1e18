//! A fresh database per test, cloned from a template migrated once per run, and the app
//! started in this process against it. Everything a test starts is cleaned up when dropped.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, FromArgMatches};
use sendguard::config::{Config, SecretKeys};
use sendguard::recipients::LinkKey;
use sendguard::webhooks::SecretBox;
use sha2::{Digest, Sha256};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn url_of(name: &str) -> String {
    format!("postgres://postgres@127.0.0.1:5432/{name}")
}

/// A connection to the `postgres` database: for cluster-wide views, and queries that must not
/// count as a test database's transactions.
pub async fn admin() -> PgConnection {
    PgConnection::connect(ADMIN_URL)
        .await
        .expect("admin connection (scripts/test starts PostgreSQL)")
}

/// The migrated template of this run, named after the migrations it holds: created by the
/// first test that needs it (test processes take turns through an advisory lock), then only
/// cloned. `scripts/test` drops it with the other test databases before each run.
async fn template() -> &'static str {
    static TEMPLATE: OnceCell<String> = OnceCell::const_new();
    TEMPLATE
        .get_or_init(|| async {
            let mut digest = Sha256::new();
            for m in sendguard::db::MIGRATOR.iter() {
                digest.update(&m.checksum);
            }
            let name = format!("sgtest_template_{}", &hex::encode(digest.finalize())[..12]);
            let mut admin = admin().await;
            sqlx::query("SELECT pg_advisory_lock(7243001)")
                .execute(&mut admin)
                .await
                .expect("template lock");
            let exists: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                    .bind(&name)
                    .fetch_one(&mut admin)
                    .await
                    .expect("template lookup");
            if !exists {
                // Built under another name and renamed, so no test ever clones a half-made one.
                let building = format!("{name}_building");
                drop_database(&mut admin, &building).await;
                let pool = sendguard::db::connect_and_migrate(&url_of(&building))
                    .await
                    .expect("migrate the template");
                pool.close().await;
                rename_when_free(&mut admin, &building, &name).await;
            }
            sqlx::query("SELECT pg_advisory_unlock(7243001)")
                .execute(&mut admin)
                .await
                .expect("template unlock");
            name
        })
        .await
}

/// Renames a database once the sessions that used it are gone: a closed pool's backends take a
/// moment to exit, and a rename needs the database to itself.
async fn rename_when_free(admin: &mut PgConnection, from: &str, to: &str) {
    let rename = format!("ALTER DATABASE \"{from}\" RENAME TO \"{to}\"");
    for _ in 0..100 {
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(from)
            .execute(&mut *admin)
            .await
            .expect("end the template's sessions");
        match sqlx::query(&rename).execute(&mut *admin).await {
            Ok(_) => return,
            Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("55006") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("name the template: {e}"),
        }
    }
    panic!("the template {from} stayed in use");
}

async fn drop_database(admin: &mut PgConnection, name: &str) {
    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .execute(admin)
        .await
        .expect("drop test database");
}

/// A migrated database of its own, dropped when this is dropped.
pub struct TestDb {
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub async fn create(test: &str) -> TestDb {
        static N: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "sgtest_{test}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let template = template().await;
        sqlx::query(&format!(
            "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""
        ))
        .execute(&mut admin().await)
        .await
        .expect("clone the template");
        TestDb {
            url: url_of(&name),
            name,
        }
    }

    pub async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url).await.expect("test database")
    }
}

impl Drop for TestDb {
    /// Drops the database from a thread of its own: `Drop` cannot wait on the test's runtime.
    fn drop(&mut self) {
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(async { drop_database(&mut admin().await, &name).await }))
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("test database {} was not dropped", self.name);
        }
    }
}

/// The settings of a test instance: `serve`'s defaults (not the environment's) but for
/// loopback on a random port, private Redis keys and quick retries.
pub fn config(db: &TestDb, smtp_url: Option<String>) -> Config {
    let serve = Config::augment_args(clap::Command::new("serve")).mut_args(|a| a.env(None));
    let defaults = serve
        .try_get_matches_from(["serve"])
        .expect("serve's defaults");
    let mut cfg = Config::from_arg_matches(&defaults).expect("serve's defaults");
    cfg.database.database_url = db.url.clone();
    cfg.redis_url = super::redis_url();
    cfg.key_prefix = super::unique_prefix("app").as_str().to_owned();
    cfg.redis_timeout_ms = 1000;
    cfg.listen = "127.0.0.1:0".parse().expect("address");
    cfg.metrics_listen = "127.0.0.1:0".parse().expect("address");
    cfg.smtp_url = smtp_url;
    cfg.mail_dir = std::env::temp_dir().join(format!("sendguard-test-mail-{}", std::process::id()));
    cfg.mail_from = "sendguard <no-reply@sendguard.test>".into();
    cfg.public_url = "http://127.0.0.1:8080".into();
    cfg.db_writers = 2;
    cfg.webhook_allow_private = true;
    cfg.mail_max_attempts = 8;
    cfg.mail_retry_base_ms = 100;
    cfg.webhook_retry_base_ms = 50;
    cfg
}

/// What seals webhook secrets in the test database: its stored key, as an instance without a
/// configured key uses.
pub async fn secret_box(pool: &PgPool) -> SecretBox {
    LinkKey::load(pool, &SecretKeys::default())
        .await
        .expect("the stored key")
        .secret_box()
}

/// Creates app `name` with these settings, its webhook secret sealed as `serve` would.
pub async fn create_app(pool: &PgPool, name: &str, changes: sendguard::apps::AppChanges) {
    let secrets = secret_box(pool).await;
    sendguard::apps::store::create(pool, name, changes, &secrets, false, "test")
        .await
        .expect("app");
}

/// Creates an API key of the app `default` in the test database.
pub async fn api_key(pool: &PgPool) -> String {
    app_key(pool, sendguard::apps::DEFAULT_APP).await
}

/// Invites whose sender or API key does not exist, and senders whose app does not. There must
/// be none: every invite is written in the transaction that upserts its sender's row, with the
/// key its request was authenticated with, a sender's row carries the app of that key, and
/// neither apps, senders nor keys are ever deleted. `invites` and `senders` have no foreign keys
/// to check it (migrations 0010 and 0011), so the tests that write through every path do.
pub async fn orphans(conn: impl sqlx::PgExecutor<'_>) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM invites i
                 WHERE NOT EXISTS (SELECT 1 FROM senders s
                         WHERE s.app_id = i.app_id AND s.id = i.sender_id)
                     OR NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.id = i.api_key_id))
             + (SELECT count(*) FROM senders s
                 WHERE NOT EXISTS (SELECT 1 FROM apps a WHERE a.id = s.app_id))",
    )
    .fetch_one(conn)
    .await
    .expect("invites without their sender or key, senders without their app")
}

/// Creates an API key of app `app` in the test database.
pub async fn app_key(pool: &PgPool, app: &str) -> String {
    let app_id = sendguard::apps::store::id_of(pool, app).await.expect("app");
    sendguard::api_keys::create(
        pool,
        &format!("test-{}", uuid::Uuid::new_v4()),
        app_id,
        "test",
    )
    .await
    .expect("api key")
}

/// Polls `check` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_for<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits up to `secs` seconds for the invite to `recipient` to reach `status`; answers whether
/// it did.
pub async fn invite_becomes(pool: &PgPool, recipient: &str, status: &str, secs: u64) -> bool {
    wait_for(Duration::from_secs(secs), || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM invites WHERE recipient = $1")
            .bind(recipient)
            .fetch_one(pool)
            .await
            .expect("status")
            == status
    })
    .await
}

/// The value of series `name` (with its labels, if any) in a `/metrics` text.
pub fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Waits up to 10 s until at least `at_least` of `db`'s backends wait on a lock; returns
/// whether they did.
pub async fn waiting_on_locks(db: &str, at_least: i64) -> bool {
    waiting_in(db, "", at_least).await
}

/// As [`waiting_on_locks`], counting only backends whose statement contains `statement`.
pub async fn waiting_in(db: &str, statement: &str, at_least: i64) -> bool {
    wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'
                 AND strpos(query, $2) > 0",
        )
        .bind(db)
        .bind(statement)
        .fetch_one(&mut admin().await)
        .await
        .expect("pg_stat_activity")
            >= at_least
    })
    .await
}

/// Waits until an instance on database `db` listens for change notifications. A listener that
/// connects empties the caches (it cannot know what changed before), so a test that counts
/// cache misses starts after it.
pub async fn listening(db: &str) -> bool {
    wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1
                 AND query LIKE 'LISTEN%' AND state = 'idle'",
        )
        .bind(db)
        .fetch_one(&mut admin().await)
        .await
        .expect("pg_stat_activity")
            > 0
    })
    .await
}

/// A transaction holding `idempotency_keys` in share mode: reads go on, and every batch
/// statement (which writes to it) waits, after its invites were checked, until it ends.
pub async fn hold_batch_statements(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    hold_table(pool, "idempotency_keys").await
}

/// A transaction holding `flags` in share mode: a batch writes its queued and held invites,
/// then waits at its first flag until it ends.
pub async fn hold_flags(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    hold_table(pool, "flags").await
}

async fn hold_table(pool: &PgPool, table: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut lock = pool.begin().await.expect("begin");
    sqlx::query(&format!("LOCK TABLE {table} IN SHARE MODE"))
        .execute(&mut *lock)
        .await
        .expect("lock");
    lock
}

/// A transaction holding the rows of senders `ids`: a batch statement with one of them waits
/// on it after taking its snapshot, until it ends.
pub async fn hold_senders(
    pool: &PgPool,
    ids: &[&str],
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut lock = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM senders WHERE id = ANY($1) FOR UPDATE")
        .bind(ids)
        .execute(&mut *lock)
        .await
        .expect("lock the senders");
    lock
}

/// Waits up to 15 s until `db` has no more than `left` connections open (a backend reports its
/// statistics as it closes); returns whether it came down to that, and prints the connections
/// still open when it did not.
pub async fn connections_down_to(db: &str, left: i64) -> bool {
    let closed = wait_for(Duration::from_secs(15), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE datname = $1")
            .bind(db)
            .fetch_one(&mut admin().await)
            .await
            .expect("pg_stat_activity")
            <= left
    })
    .await;
    if !closed {
        let open: Vec<(String, String, String, String)> = sqlx::query_as(
            "SELECT application_name, coalesce(state, ''), backend_start::text, left(query, 120)
             FROM pg_stat_activity WHERE datname = $1",
        )
        .bind(db)
        .fetch_all(&mut admin().await)
        .await
        .expect("pg_stat_activity");
        eprintln!("connections still open on {db} (application, state, since, last query):");
        for connection in open {
            eprintln!("  {connection:?}");
        }
    }
    closed
}

/// The id of the test database's only API key.
pub async fn key_id(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT id FROM api_keys")
        .fetch_one(pool)
        .await
        .expect("key id")
}

/// Invites to `recipients`, queued and due, as a writer would have left them.
pub async fn queue(pool: &PgPool, key_id: i64, recipients: &[&str]) {
    sqlx::query("INSERT INTO senders (app_id, id) VALUES (1, 'queued') ON CONFLICT DO NOTHING")
        .execute(pool)
        .await
        .expect("sender");
    for recipient in recipients {
        sqlx::query(
            "WITH queued AS (
                 INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient,
                     recipient_domain, status, decision)
                 VALUES ($1, $2, 1, 'queued', $3, 'example.com', 'queued', '{}')
                 RETURNING id, created_at)
             INSERT INTO outbox (invite_id, created_at, next_attempt_at)
             SELECT id, created_at, now() FROM queued",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(key_id)
        .bind(recipient)
        .execute(pool)
        .await
        .expect("queued invite");
    }
}

/// Queues `n` invites of the only API key, to `{prefix}0@example.com` onwards.
pub async fn queue_numbered(pool: &PgPool, prefix: &str, n: usize) {
    let recipients: Vec<String> = (0..n).map(|i| format!("{prefix}{i}@example.com")).collect();
    let recipients: Vec<&str> = recipients.iter().map(String::as_str).collect();
    queue(pool, key_id(pool).await, &recipients).await;
}

/// Drives rounds of `app`'s outbox until no invite is queued (a retry is due after its backoff,
/// so this takes up to 15 s); when it returns, every send of those rounds has been answered.
pub async fn delivered(app: &sendguard::Running, pool: &PgPool) {
    let done = wait_for(Duration::from_secs(15), || async {
        app.outbox_round().await;
        queued(pool).await == 0
    })
    .await;
    assert!(done, "invites are still queued");
}

/// Invites still waiting for the outbox.
pub async fn queued(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'queued'")
        .fetch_one(pool)
        .await
        .expect("count queued")
}

/// Waits (up to 10 s) until the flags left by written invites are done: a tripping invite is
/// answered before its flag, the sender's new state and its audit entry are written.
pub async fn flags_done(pool: &PgPool) {
    let done = wait_for(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pending_flags")
            .fetch_one(pool)
            .await
            .expect("pending flags")
            == 0
    })
    .await;
    assert!(done, "the flags' follow-ups are done");
}

/// The state of sender `id` (of any app; tests use one id per sender), once the flags of the
/// invites written so far are done.
pub async fn sender_state(pool: &PgPool, id: &str) -> String {
    flags_done(pool).await;
    sqlx::query_scalar("SELECT state FROM senders WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("sender state")
}

/// A migrated test database with `sql` applied; an app started on it afterwards loads the
/// rules as `sql` left them.
pub async fn migrated(test: &str, sql: &[&str]) -> (TestDb, PgPool) {
    prepared(test, async |pool| execute(pool, sql).await).await
}

/// A migrated test database that `setup` prepared.
pub async fn prepared(test: &str, setup: impl AsyncFnOnce(&PgPool)) -> (TestDb, PgPool) {
    let db = TestDb::create(test).await;
    let pool = db.pool().await;
    setup(&pool).await;
    (db, pool)
}

/// Runs each statement of `sql`.
pub async fn execute(pool: &PgPool, sql: &[&str]) {
    for statement in sql {
        sqlx::query(statement).execute(pool).await.expect("setup");
    }
}

/// A running instance on its own database, sending to its own SMTP sink; all of it stops and
/// is removed when dropped.
pub struct Stage {
    // Dropped in this order: the app first, the database last.
    pub app: sendguard::Running,
    pub sink: super::smtp::SmtpSink,
    pub pool: PgPool,
    pub db: TestDb,
}

impl Stage {
    /// `sql` is applied before the app starts (it loads the rules as `sql` left them).
    pub async fn start(test: &str, sql: &[&str]) -> Stage {
        Self::start_with(test, sql, |_| {}).await
    }

    /// As `start`, with the settings adjusted by `adjust` first.
    pub async fn start_with(test: &str, sql: &[&str], adjust: impl FnOnce(&mut Config)) -> Stage {
        let sink = super::smtp::SmtpSink::start().await;
        Self::start_sending_to(test, sql, sink, adjust).await
    }

    /// As `start_with`, sending to `sink`.
    pub async fn start_sending_to(
        test: &str,
        sql: &[&str],
        sink: super::smtp::SmtpSink,
        adjust: impl FnOnce(&mut Config),
    ) -> Stage {
        Self::start_on(test, async |pool| execute(pool, sql).await, sink, adjust).await
    }

    /// As `start_with`, with the database prepared by `setup` (before the app starts and loads
    /// the rules).
    pub async fn start_prepared(
        test: &str,
        setup: impl AsyncFnOnce(&PgPool),
        adjust: impl FnOnce(&mut Config),
    ) -> Stage {
        let sink = super::smtp::SmtpSink::start().await;
        Self::start_on(test, setup, sink, adjust).await
    }

    async fn start_on(
        test: &str,
        setup: impl AsyncFnOnce(&PgPool),
        sink: super::smtp::SmtpSink,
        adjust: impl FnOnce(&mut Config),
    ) -> Stage {
        let (db, pool) = prepared(test, setup).await;
        let mut cfg = config(&db, Some(sink.url()));
        adjust(&mut cfg);
        let app = sendguard::start(&cfg).await.expect("start");
        Stage {
            app,
            sink,
            pool,
            db,
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.app.addr)
    }

    /// Drives the outbox until it has nothing left to send; returns how many messages the sink
    /// holds.
    pub async fn settle(&self) -> usize {
        flags_done(&self.pool).await;
        delivered(&self.app, &self.pool).await;
        self.sink.messages().len()
    }
}
