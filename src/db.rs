//! The Postgres pool: created database, applied migrations.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool, Postgres};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// The name of the database `url` names, when it does not exist.
pub async fn missing(url: &str) -> Result<Option<String>, DbError> {
    let options = PgConnectOptions::from_str(url)?;
    let name = options.get_database().unwrap_or("postgres").to_owned();
    let mut admin = options.database("postgres").connect().await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await?;
    admin.close().await?;
    Ok((!exists).then_some(name))
}

/// Creates the database named in `url` when it does not exist yet.
async fn create_if_missing(url: &str) -> Result<(), DbError> {
    let Some(name) = missing(url).await? else {
        return Ok(());
    };
    let mut admin = PgConnectOptions::from_str(url)?
        .database("postgres")
        .connect()
        .await?;
    let quoted = name.replace('"', "\"\"");
    let created = sqlx::query(&format!("CREATE DATABASE \"{quoted}\""))
        .execute(&mut admin)
        .await;
    // Another instance may have created it between the check and here.
    if let Err(e) = created {
        let raced = e
            .as_database_error()
            .and_then(|d| d.code())
            .is_some_and(|c| c == "42P04");
        if !raced {
            return Err(e.into());
        }
    }
    admin.close().await?;
    Ok(())
}

/// Options for `url`, named `part` in `pg_stat_activity` unless the URL names the application.
fn options(url: &str, part: &str) -> Result<PgConnectOptions, DbError> {
    let options = PgConnectOptions::from_str(url)?;
    Ok(match options.get_application_name() {
        Some(_) => options,
        None => options.application_name(part),
    })
}

/// What a request told [`refused_text`] hears.
pub const REFUSED_TEXT: &str = "the request holds a NUL character, which nothing here can hold";

/// Postgres refused a text it cannot store (a NUL character): the input's fault, never an
/// outage of the database.
pub fn refused_text(e: &sqlx::Error) -> bool {
    (e.as_database_error().and_then(|d| d.code())).is_some_and(|code| code == "22021")
}

/// A pool sized for this machine, on a database that exists and is migrated.
pub async fn connect_and_migrate(url: &str) -> Result<PgPool, DbError> {
    create_if_missing(url).await?;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options(url, "sendguard")?)
        .await?;
    MIGRATOR.run(&pool).await?;
    Ok(pool)
}

/// Whether the commits of a connection wait until their WAL is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commits {
    /// Answered once on disk: what an invite answered 200 needs.
    Flushed,
    /// Answered before the flush (`synchronous_commit = off`), which Postgres's WAL writer does
    /// within three `wal_writer_delay`s (600 ms by default), many commits at once. A crash of
    /// Postgres itself, not of sendguard, loses the last of them. For the outbox's
    /// bookkeeping, where a lost commit only means an invite sent again: at 1,000 deliveries a
    /// second its marks were half of the commits, and the invites' writer spent a tenth of its
    /// time waiting for their flushes to finish before its own could start.
    Unflushed,
}

/// Connections named `part` in `pg_stat_activity`, kept by the tasks that use them between
/// uses ([`KeptConnections`]), whose statements are each planned once per connection (a
/// generic plan) instead of on every run: for the invite path's batches and sender reads and
/// for the outbox, whose statements run many times a second with values that never change the
/// best plan (arrays of ids; a span of `created_at` that run-time pruning narrows to its weeks,
/// which tests/it/explain.rs holds them to). Planning the multi-row insert cost about as much
/// as running it for a small batch, and planning the outbox's statements on every round was 7%
/// of Postgres' time at saturation.
pub async fn connect_kept(
    url: &str,
    part: &str,
    size: u32,
    commits: Commits,
) -> Result<KeptConnections, DbError> {
    let flush = match commits {
        Commits::Flushed => "on",
        Commits::Unflushed => "off",
    };
    let options = options(url, part)?.options([
        ("plan_cache_mode", "force_generic_plan"),
        ("synchronous_commit", flush),
    ]);
    let pool = PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await?;
    Ok(KeptConnections {
        pool,
        kept: Arc::default(),
    })
}

/// Connections kept by their users between uses: sqlx pings a connection when it is taken from
/// its pool and again when it is given back, two round trips around a statement that is one,
/// which a connection in steady use does not need. Only a connection whose last use succeeded
/// is kept; one that failed goes back to the pool, whose ping closes it if it is broken, and
/// the batch or round it served fails (an invite's request answered 503, a round of the
/// outbox tried again). A connection taken from the pool is pinged, so the use after a
/// failure does not get one that died idle there (Postgres restarted). A kept connection idle
/// for longer than [`KEPT_FRESH`] is pinged too, and replaced when it does not answer: a
/// restart in a quiet moment would otherwise fail the next batch, which nothing had sent yet.
#[derive(Clone)]
pub struct KeptConnections {
    pool: PgPool,
    kept: Arc<Mutex<Vec<Kept>>>,
}

/// A kept connection, with when it was last used.
type Kept = (PoolConnection<Postgres>, Instant);

/// How long a kept connection is used without a ping. A connection in steady use (a batch
/// every few milliseconds, even at 100 invites/s) never waits this long, so it costs nothing
/// there; after a quiet second, the ping is one round trip before the next batch.
const KEPT_FRESH: Duration = Duration::from_secs(1);

impl KeptConnections {
    /// The pool, for a statement that is rare enough to take a connection of its own.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs `work` on a kept connection (or one from the pool when none is kept), and keeps
    /// the connection again only when `work` succeeds: one that failed may be broken, and goes
    /// back to the pool, whose ping closes it if it is.
    pub async fn run<T>(
        &self,
        work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match kept {
            Some((conn, used)) if used.elapsed() < KEPT_FRESH => conn,
            Some((mut conn, _)) => match conn.ping().await {
                Ok(()) => conn,
                Err(e) => {
                    tracing::debug!(error = %e, "a kept connection died while idle; replacing it");
                    conn.close_on_drop();
                    drop(conn);
                    self.pool.acquire().await?
                }
            },
            None => self.pool.acquire().await?,
        };
        let done = work(&mut conn).await?;
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((conn, Instant::now()));
        Ok(done)
    }
}
