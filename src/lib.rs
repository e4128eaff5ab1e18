//! sendguard: rate limits, shadow bans and moderation in front of invitation emails.
//!
//! Wiring lives here: the shared state, the router, startup and shutdown.

pub mod admin;
pub mod api_keys;
pub mod cache;
mod changes;
pub mod config;
pub mod db;
pub mod http;
pub mod incident;
pub mod invites;
pub mod limiter;
pub mod mail;
pub mod metrics;
pub mod moderation;
mod names;
pub mod retention;
pub mod rules;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use config::Config;
use invites::InviteService;
use limiter::{KeyPrefix, Limiter, MemoryStore, RedisSettings, RedisStore};
use mail::{Outbox, OutboxSettings, Transport};
use rules::RuleCache;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub limiter: Limiter,
    pub invites: InviteService,
    pub admin: admin::AdminSettings,
    pub metrics: metrics::Metrics,
    pub api_keys: api_keys::ApiKeyCache,
    /// Permits for requests in flight.
    pub in_flight: std::sync::Arc<tokio::sync::Semaphore>,
    /// How long a request body may take to arrive.
    pub read_timeout: Duration,
}

/// Requests served at once; more are answered 503 at once.
const MAX_IN_FLIGHT: usize = 1024;
/// Largest body any route reads (the invite API bounds its own to 16 KiB).
const MAX_BODY: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error("rules: {0}")]
    Rules(#[from] rules::RuleError),
    #[error("redis: {0}")]
    Limiter(#[from] limiter::LimiterError),
    #[error(transparent)]
    Mail(#[from] mail::MailError),
    #[error("listening on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("configuration: {0}")]
    Config(String),
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/api/v1/invites",
            post(invites::http::create).fallback(http::method_not_allowed),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/api/openapi.json", get(openapi))
        .merge(admin::router())
        .fallback(http::not_found)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::observe,
        ))
        .with_state(state)
}

/// The OpenAPI 3 description of the API as served.
async fn openapi() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("http/openapi.json"),
    )
}

/// Prometheus text: the process's counters and histograms, and gauges read from Postgres (left
/// out while it does not answer).
async fn metrics_text(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let gauges: Option<(i64, f64, i64)> = sqlx::query_as(
        "SELECT (SELECT count(*) FROM invites WHERE status = 'queued'),
                COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(created_at) FROM invites
                    WHERE status = 'queued'))::float8, 0),
                (SELECT count(*) FROM senders WHERE state = 'shadow_banned')",
    )
    .fetch_one(&state.pool)
    .await
    .ok();
    let gauges: Vec<(&str, &str, f64)> = match gauges {
        Some((depth, oldest, awaiting)) => vec![
            (
                "sendguard_outbox_queue_depth",
                "Invites waiting to be sent.",
                depth as f64,
            ),
            (
                "sendguard_outbox_oldest_seconds",
                "Age of the oldest invite waiting to be sent.",
                oldest,
            ),
            (
                "sendguard_senders_awaiting_review",
                "Shadow-banned senders waiting for a decision.",
                awaiting as f64,
            ),
        ],
        None => Vec::new(),
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(&gauges),
    )
}

/// 200 only when Postgres and the counters answer, each within a second (probes time out).
async fn ready(State(state): State<AppState>) -> (StatusCode, &'static str) {
    let within = Duration::from_secs(1);
    let pg = tokio::time::timeout(within, sqlx::query("SELECT 1").execute(&state.pool))
        .await
        .is_ok_and(|r| r.is_ok());
    let counters = match &state.limiter {
        Limiter::Redis(store) => {
            let mut conn = store.connection();
            let cmd = redis::cmd("PING");
            tokio::time::timeout(within, cmd.query_async::<String>(&mut conn))
                .await
                .is_ok_and(|r| r.is_ok())
        }
        Limiter::Memory(_) => true,
    };
    match (pg, counters) {
        (true, true) => (StatusCode::OK, "ready"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "postgres unavailable"),
        (_, false) => (StatusCode::SERVICE_UNAVAILABLE, "redis unavailable"),
    }
}

/// The counters' store named by `REDIS_URL`.
async fn limiter(cfg: &Config) -> Result<Limiter, StartError> {
    if cfg.redis_url == "memory://" {
        return Ok(Limiter::Memory(MemoryStore::new()));
    }
    let settings = RedisSettings {
        url: cfg.redis_url.clone(),
        timeout: cfg.redis_timeout(),
    };
    Ok(Limiter::Redis(RedisStore::connect(&settings).await?))
}

/// A running service: the API, the outbox worker and the rule watcher.
pub struct Running {
    pub addr: SocketAddr,
    /// The one-time link to create the first admin, while none exists.
    pub setup_url: Option<String>,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    outbox: JoinHandle<()>,
    watcher: JoinHandle<()>,
    deferred: JoinHandle<()>,
    /// The global counts and their flusher, flushed once more on shutdown.
    global: Option<(invites::global::GlobalCounts, JoinHandle<()>)>,
    limiter: Limiter,
    sweeper: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets requests in flight and the outbox round in hand finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Ok(Err(e)) = self.server.await {
            tracing::error!(error = %e, "server stopped with an error");
        }
        let _ = self.outbox.await;
        self.watcher.abort();
        self.deferred.abort();
        if let Some(sweeper) = self.sweeper {
            sweeper.abort();
        }
        if let Some((global, flusher)) = self.global {
            flusher.abort();
            if let Err(e) = global.flush(&self.limiter).await {
                tracing::warn!(error = %e, "the last global counts were not flushed");
            }
        }
    }
}

/// Serves HTTP/1 connections until `stop` turns true, then lets requests in flight finish (for
/// at most 30 seconds). Unlike `axum::serve`, it bounds how long a client may take to send its
/// headers, so a slow client cannot hold a connection forever.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: Router,
    read_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
        };
        let service = app
            .clone()
            .layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => {
            tracing::warn!("connections still open 30 s after shutdown began; closing");
        }
    }
    Ok(())
}

/// Connects everything, applies migrations and starts serving on `cfg.listen`.
pub async fn start(cfg: &Config) -> Result<Running, StartError> {
    let pool = db::connect_and_migrate(&cfg.database.database_url).await?;
    let rules = RuleCache::load(&pool).await?;
    let limiter = limiter(cfg).await?;
    let keys = KeyPrefix::new(&cfg.key_prefix).map_err(StartError::Config)?;
    let transport = Transport::new(cfg.smtp_url.as_deref(), &cfg.mail_dir)?;
    let metrics = metrics::Metrics::default();
    let senders = moderation::SenderStates::default();
    let api_keys = api_keys::ApiKeyCache::default();
    let global = (cfg.global_flush_ms > 0)
        .then(|| invites::global::GlobalCounts::new(Duration::from_millis(cfg.global_flush_ms)));
    let outbox = Outbox::new(
        pool.clone(),
        transport,
        metrics.clone(),
        OutboxSettings {
            from: mail::parse_from(&cfg.mail_from)?,
            public_url: cfg.public_url.clone(),
            max_attempts: cfg.mail_max_attempts.max(1),
            retry_base: Duration::from_millis(cfg.mail_retry_base_ms),
            lease: Duration::from_secs(cfg.mail_lease_secs.max(1)),
            batch: 32,
            idle: Duration::from_millis(200),
        },
    );
    let state = AppState {
        in_flight: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        read_timeout: Duration::from_millis(cfg.read_timeout_ms.max(1)),
        metrics: metrics.clone(),
        api_keys: api_keys.clone(),
        invites: InviteService {
            metrics: metrics.clone(),
            pool: pool.clone(),
            limiter: limiter.clone(),
            rules: rules.clone(),
            senders: senders.clone(),
            global: global.clone(),
            keys,
            held_cap: cfg.held_cap,
            on_redis_error: cfg.on_redis_error,
            redis: incident::Incident::new("redis"),
            postgres: incident::Incident::new("postgres"),
        },
        pool: pool.clone(),
        limiter,
        admin: admin::AdminSettings {
            secure_cookies: cfg.public_url.starts_with("https://"),
            setup: admin::setup::SetupLink::default(),
        },
    };
    let mut setup_url = None;
    let admins = admin::accounts::any_exists(&pool)
        .await
        .map_err(db::DbError::from)?;
    if !admins {
        let url = format!(
            "{}/admin/setup?token={}",
            cfg.public_url.trim_end_matches('/'),
            state.admin.setup.issue()
        );
        tracing::warn!(
            "no admin exists yet: create the first one within an hour at {url} (or run `sendguard admin add NAME`)"
        );
        setup_url = Some(url);
    }
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| StartError::Listen(cfg.listen, e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError::Listen(cfg.listen, e))?;
    let deferred = state.invites.watch_deferred();
    let flusher = global.clone().map(|g| g.run(state.limiter.clone()));
    let sweeper = (cfg.retention_days > 0).then(|| {
        retention::Retention {
            pool: pool.clone(),
            metrics: metrics.clone(),
            days: cfg.retention_days,
            batch: 1000,
            pause: Duration::from_millis(50),
        }
        .run(Duration::from_secs(3600))
    });
    let (stop, stopped) = watch::channel(false);
    let read_timeout = state.read_timeout;
    let state_limiter = state.limiter.clone();
    let server = tokio::spawn(serve_http(
        listener,
        router(state),
        read_timeout,
        stopped.clone(),
    ));
    let outbox = tokio::spawn(outbox.run(stopped));
    let watcher = changes::Watched {
        rules,
        senders,
        api_keys,
    }
    .watch(pool);

    tracing::info!(%addr, "sendguard listening");
    Ok(Running {
        addr,
        setup_url,
        stop,
        server,
        outbox,
        watcher,
        deferred,
        global: global.zip(flusher),
        sweeper,
        limiter: state_limiter,
    })
}
