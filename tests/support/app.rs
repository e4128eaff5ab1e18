//! A fresh database per test, and the app started in this process against it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sendguard::config::{Config, Database, RedisPolicy};
use sqlx::{Connection, PgConnection, PgPool};

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of its own, created empty (the app migrates it).
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
        TestDb {
            url: format!("postgres://postgres@127.0.0.1:5432/{name}"),
            name,
        }
    }

    pub async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url).await.expect("test database")
    }

    /// Drops the database (scripts/test also sweeps any a failed test left behind).
    pub async fn drop_db(self) {
        let mut admin = PgConnection::connect(ADMIN_URL)
            .await
            .expect("admin connection");
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await
        .expect("drop test database");
    }
}

/// The settings of a test instance: loopback, a random port, private Redis keys.
pub fn config(db: &TestDb, smtp_url: Option<String>) -> Config {
    Config {
        database: Database {
            database_url: db.url.clone(),
        },
        redis_url: super::redis_url(),
        on_redis_error: RedisPolicy::Defer,
        key_prefix: super::unique_prefix("app").as_str().to_owned(),
        redis_timeout_ms: 1000,
        global_flush_ms: 200,
        retention_days: 90,
        listen: "127.0.0.1:0".parse().expect("address"),
        read_timeout_ms: 10_000,
        smtp_url,
        mail_dir: std::env::temp_dir().join(format!("sendguard-test-mail-{}", std::process::id())),
        mail_from: "sendguard <no-reply@sendguard.test>".into(),
        public_url: "http://127.0.0.1:8080".into(),
        held_cap: 1000,
        mail_max_attempts: 8,
        mail_retry_base_ms: 100,
        mail_lease_secs: 60,
        log_json: false,
    }
}

/// Creates an API key in the test database.
pub async fn api_key(pool: &PgPool) -> String {
    sendguard::api_keys::create(pool, &format!("test-{}", uuid::Uuid::new_v4()))
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

/// Invites still waiting for the outbox.
pub async fn queued(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'queued'")
        .fetch_one(pool)
        .await
        .expect("count queued")
}

/// A migrated test database with `sql` applied; an app started on it afterwards loads the
/// rules as `sql` left them.
pub async fn migrated(test: &str, sql: &[&str]) -> (TestDb, PgPool) {
    let db = TestDb::create(test).await;
    let pool = sendguard::db::connect_and_migrate(&db.url)
        .await
        .expect("migrate");
    for statement in sql {
        sqlx::query(statement).execute(&pool).await.expect("setup");
    }
    (db, pool)
}

/// A running instance on its own database, sending to its own SMTP sink.
pub struct Stage {
    pub db: TestDb,
    pub pool: PgPool,
    pub sink: super::smtp::SmtpSink,
    pub app: sendguard::Running,
}

impl Stage {
    /// `sql` is applied before the app starts (it loads the rules as `sql` left them).
    pub async fn start(test: &str, sql: &[&str]) -> Stage {
        Self::start_with(test, sql, |_| {}).await
    }

    /// As `start`, with the settings adjusted by `adjust` first.
    pub async fn start_with(test: &str, sql: &[&str], adjust: impl FnOnce(&mut Config)) -> Stage {
        let (db, pool) = migrated(test, sql).await;
        let sink = super::smtp::SmtpSink::start().await;
        let mut cfg = config(&db, Some(sink.url()));
        adjust(&mut cfg);
        let app = sendguard::start(&cfg).await.expect("start");
        Stage {
            db,
            pool,
            sink,
            app,
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.app.addr)
    }

    /// Waits until the outbox has nothing left to send, and a little longer so a late extra
    /// message would still be seen; returns how many messages the sink holds.
    pub async fn settle(&self) -> usize {
        wait_for(Duration::from_secs(15), || async {
            queued(&self.pool).await == 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        self.sink.messages().len()
    }

    pub async fn finish(self) {
        self.app.shutdown().await;
        self.sink.stop();
        self.pool.close().await;
        self.db.drop_db().await;
    }
}
