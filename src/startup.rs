//! Startup and shutdown: connects the stores, builds the services, runs the background tasks
//! under one stop signal, and serves until told to stop.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::accounts::Passwords;
use crate::admin::{self, Dashboard};
use crate::api_keys::ApiKeyCache;
use crate::apps::AppCache;
use crate::campaigns::Campaigns;
use crate::campaigns::groups::Groups;
use crate::campaigns::known::KnownTexts;
use crate::changes;
use crate::config::Config;
use crate::db::{self, Commits, DbError};
use crate::http::{TrustedProxies, server};
use crate::incident::Incident;
use crate::invites::InviteService;
use crate::invites::follow_up::FollowUps;
use crate::invites::global::GlobalCounts;
use crate::invites::writer::Writer;
use crate::limiter::{self, KeyPrefix, Limiter, MemoryStore, RedisSettings, RedisStore};
use crate::mail::{self, Outbox, OutboxSettings, Transport};
use crate::metrics::Metrics;
use crate::moderation::SenderStates;
use crate::moderation::expiry::Expiry;
use crate::moderation::terms::Ladder;
use crate::outcomes::Outcomes;
use crate::recipients::{LinkKey, LinkKeyError};
use crate::retention::{self, Retention};
use crate::rules::{RuleCache, RuleError};
use crate::webhooks::{Deliverer, WebhookError, WebhookSettings};

/// Password checks (argon2, CPU-bound) at once; more logins are answered 429 at once.
const PASSWORD_CHECKS: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("rules: {0}")]
    Rules(#[from] RuleError),
    #[error("redis: {0}")]
    Limiter(#[from] limiter::LimiterError),
    #[error(transparent)]
    Mail(#[from] mail::MailError),
    #[error("listening on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("configuration: {0}")]
    Config(String),
    #[error("link key: {0}")]
    LinkKey(#[from] LinkKeyError),
    #[error("webhooks: {0}")]
    Webhooks(#[from] WebhookError),
}

/// The public URL is the base of the unsubscribe and report links of every email: it must be
/// a link an email may carry (https, or http to this machine for a local setup). One on this
/// machine while mail goes to an SMTP server is most likely the default left in place, and
/// said at start: recipients could neither unsubscribe nor report.
fn public_links(cfg: &Config) -> Result<(), StartError> {
    let public = crate::urls::email_link(&cfg.public_url).map_err(|e| {
        StartError::Config(format!(
            "SENDGUARD_PUBLIC_URL {e}; it is the base of the unsubscribe and report links of \
             every email"
        ))
    })?;
    if cfg.smtp_url.is_some() && crate::urls::is_loopback(&public) {
        tracing::warn!(public_url = %cfg.public_url,
            "mail goes to an SMTP server but SENDGUARD_PUBLIC_URL is on this machine: \
             recipients cannot reach the unsubscribe and report links of its emails");
    }
    Ok(())
}

/// Everything an instance is made of, connected and ready to serve.
pub struct Services {
    pub pool: PgPool,
    pub limiter: Limiter,
    pub metrics: Metrics,
    pub api_keys: ApiKeyCache,
    pub invites: InviteService,
    pub dashboard: Dashboard,
    pub trusted: TrustedProxies,
    pub outcomes: Outcomes,
    pub apps: AppCache,
    pub links: LinkKey,
    rules: RuleCache,
    senders: SenderStates,
    outbox: Outbox,
    webhooks: Deliverer,
}

impl Services {
    /// Connects to Postgres (migrating it), the counters' store and the mail transport.
    pub async fn connect(cfg: &Config) -> Result<Services, StartError> {
        let pool = db::connect_and_migrate(&cfg.database.database_url).await?;
        // This week and the next ones exist before the first invite is written.
        retention::make_weeks(&pool, chrono::Utc::now())
            .await
            .map_err(DbError::from)?;
        // The sender reader and one spare; the writers have connections of their own.
        let batches = db::connect_kept(
            &cfg.database.database_url,
            "sendguard-batches",
            2,
            Commits::Flushed,
        )
        .await?;
        let rules = RuleCache::load(&pool).await?;
        let apps = AppCache::load(&pool).await.map_err(DbError::from)?;
        let links = LinkKey::load(&pool, &cfg.keys).await?;
        // Before the first delivery: secrets still in clear, or under the previous key, are
        // sealed under the current one.
        let secrets = links.secret_box();
        crate::apps::webhook_secret::seal_stored(&pool, &secrets)
            .await
            .map_err(DbError::from)?;
        let ladder: Ladder = cfg.ban_ladder.parse().map_err(StartError::Config)?;
        let confirm_repeat = cfg.repeat_auto_confirm.then(|| ladder.clone());
        let limiter = counters(&cfg.redis_url, cfg.redis_timeout()).await?;
        let keys = KeyPrefix::new(&cfg.key_prefix).map_err(StartError::Config)?;
        public_links(cfg)?;
        let transport =
            Transport::new(cfg.smtp_url.as_deref(), cfg.smtp_connections, &cfg.mail_dir)?;
        let metrics = Metrics::default();
        let senders = SenderStates::new(batches.clone(), metrics.clone());
        let outcomes = Outcomes {
            pool: pool.clone(),
            limiter: limiter.clone(),
            keys: keys.clone(),
            rules: rules.clone(),
            senders: senders.clone(),
            confirm_repeat: confirm_repeat.clone(),
        };
        let outbox = Outbox::new(
            db::connect_kept(
                &cfg.database.database_url,
                "sendguard-outbox",
                4,
                if cfg.outbox_flushed_commits {
                    Commits::Flushed
                } else {
                    Commits::Unflushed
                },
            )
            .await?,
            transport,
            metrics.clone(),
            outcomes.clone(),
            apps.clone(),
            links.clone(),
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
        let webhooks = Deliverer::new(
            pool.clone(),
            WebhookSettings {
                allow_private: cfg.webhook_allow_private,
                retry_base: Duration::from_millis(cfg.webhook_retry_base_ms.max(1)),
                poll: Duration::from_millis(500),
                ..WebhookSettings::default()
            },
            secrets,
        )?;
        let campaigns = Campaigns {
            groups: Groups::new(&limiter, &keys),
            known: KnownTexts::load(&pool).await.map_err(DbError::from)?,
        };
        let invites = InviteService {
            campaigns: campaigns.clone(),
            settle: Duration::from_secs(cfg.settle_secs),
            metrics: metrics.clone(),
            pool: pool.clone(),
            writer: Writer::start(
                &cfg.database.database_url,
                cfg.db_writers,
                outbox.handoff(),
                metrics.clone(),
            )
            .await?,
            follow_ups: FollowUps::new(pool.clone(), confirm_repeat.clone()),
            limiter: limiter.clone(),
            rules: rules.clone(),
            senders: senders.clone(),
            global: (cfg.global_flush_ms > 0)
                .then(|| GlobalCounts::new(Duration::from_millis(cfg.global_flush_ms))),
            keys: keys.clone(),
            members: links.member_key(),
            held_cap: cfg.held_cap,
            on_redis_error: cfg.on_redis_error,
            new_sender_days: cfg.new_sender_days,
            confirm_repeat,
            redis: Incident::new("redis"),
            postgres: Incident::new("postgres"),
        };
        let dashboard = Dashboard {
            pool: pool.clone(),
            limiter: limiter.clone(),
            keys,
            rules: rules.clone(),
            apps: apps.clone(),
            secure_cookies: cfg.public_url.starts_with("https://"),
            setup: admin::setup::SetupLink::default(),
            passwords: Passwords::new(PASSWORD_CHECKS),
            login_key: admin::LoginKey::new(&links.derive("admin-login")),
            new_sender_days: cfg.new_sender_days,
            settle: Duration::from_secs(cfg.settle_secs),
            ladder,
        };
        Ok(Services {
            pool,
            limiter,
            metrics,
            api_keys: ApiKeyCache::default(),
            invites,
            dashboard,
            trusted: TrustedProxies::new(cfg.trusted_proxies.clone()),
            outcomes,
            apps,
            links,
            rules,
            senders,
            outbox,
            webhooks,
        })
    }
}

/// The counters' store named by `REDIS_URL` (`url`), each call bounded by `timeout`.
pub async fn counters(url: &str, timeout: Duration) -> Result<Limiter, limiter::LimiterError> {
    if url == "memory://" {
        return Ok(Limiter::Memory(MemoryStore::new()));
    }
    let settings = RedisSettings {
        url: url.to_owned(),
        timeout,
    };
    Ok(Limiter::Redis(RedisStore::connect(&settings).await?))
}

/// A running instance: the server and every background task, stopped by one signal.
pub struct Running {
    pub addr: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// The one-time link to create the first admin, while none exists.
    pub setup_url: Option<String>,
    stop: CancellationToken,
    tasks: JoinSet<()>,
    outbox: mail::Rounds,
}

impl Running {
    /// Runs one round of the outbox at once and waits for it; answers how many invites it took.
    pub async fn outbox_round(&self) -> usize {
        self.outbox.run_one().await
    }

    /// Stops accepting, lets requests in flight and the outbox round in hand finish, and
    /// flushes the last global counts. Dropping a `Running` instead aborts every task.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        while let Some(done) = self.tasks.join_next().await {
            if let Err(e) = done {
                tracing::error!(error = %e, "a task of the instance failed");
            }
        }
    }
}

/// Starts serving `app` on `cfg.listen` and `metrics` on `cfg.metrics_listen`, with the
/// background tasks of `services`.
pub async fn launch(
    cfg: &Config,
    services: Services,
    app: Router,
    metrics_app: Router,
) -> Result<Running, StartError> {
    let setup_url = setup_link(cfg, &services).await?;
    let bind = |at: SocketAddr| async move {
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .map_err(|e| StartError::Listen(at, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| StartError::Listen(at, e))?;
        Ok::<_, StartError>((listener, addr))
    };
    let (listener, addr) = bind(cfg.listen).await?;
    let (metrics_listener, metrics_addr) = bind(cfg.metrics_listen).await?;
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let expiry = Expiry {
        pool: services.pool.clone(),
        limiter: services.limiter.clone(),
        keys: services.dashboard.keys.clone(),
        rules: services.rules.clone(),
        metrics: services.metrics.clone(),
    };
    let Services {
        pool,
        limiter,
        metrics,
        api_keys,
        invites,
        trusted,
        rules,
        senders,
        outbox,
        apps,
        webhooks,
        outcomes,
        ..
    } = services;

    let global = invites.global.clone();
    if let Some(global) = &global {
        tasks.spawn(global.clone().run(limiter.clone(), stop.clone()));
    }
    let settings = server::Settings {
        read_timeout: cfg.read_timeout(),
        per_client: cfg.max_connections_per_client,
        trusted,
    };
    let server_limiter = limiter.clone();
    let server_stop = stop.clone();
    let public = settings.clone();
    tasks.spawn(async move {
        server::serve(listener, app, public, server_stop).await;
        // Requests in flight have finished: what they counted goes out once more.
        if let Some(global) = global
            && let Err(e) = global.flush(&server_limiter).await
        {
            tracing::warn!(error = %e, "the last global counts were not flushed");
        }
    });
    tasks.spawn(server::serve(
        metrics_listener,
        metrics_app,
        settings,
        stop.clone(),
    ));
    let rounds = outbox.rounds();
    tasks.spawn(outbox.run(stop.clone()));
    tasks.spawn(webhooks.run(stop.clone()));
    tasks.spawn(invites.follow_ups.clone().run(stop.clone()));
    let known = invites.campaigns.known.clone();
    tasks.spawn(invites.watch_deferred(stop.clone()));
    tasks.spawn(outcomes.watch_uncounted(stop.clone()));
    tasks.spawn(
        changes::Watched {
            known: known.clone(),
            rules,
            senders,
            api_keys,
            apps,
        }
        .watch(pool.clone(), stop.clone()),
    );
    tasks.spawn(expiry.run(Duration::from_secs(1), stop.clone()));
    // Always: besides removing old history it makes the weeks ahead.
    let retention = Retention {
        pool,
        metrics,
        days: cfg.retention_days,
        batch: 1000,
        pause: Duration::from_millis(50),
    };
    tasks.spawn(retention.run(Duration::from_secs(3600), stop.clone()));
    tracing::info!(%addr, %metrics_addr, "sendguard listening");
    Ok(Running {
        addr,
        metrics_addr,
        setup_url,
        stop,
        tasks,
        outbox: rounds,
    })
}

/// Raises this process's soft limit of open files as far as the hard limit allows: every
/// connection is a file, and the default of 1,024 is far below what one busy instance holds.
/// Returns the limit in force; logs when it stays low.
pub fn raise_open_file_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => {
            if limit < 8192 {
                tracing::warn!(
                    limit,
                    "the open-file limit stays low; raise the hard limit (ulimit -Hn)"
                );
            }
            limit
        }
        Err(e) => {
            tracing::warn!(error = %e, "the open-file limit could not be raised");
            0
        }
    }
}

/// While no admin exists, a one-time link to create the first one, logged.
async fn setup_link(cfg: &Config, services: &Services) -> Result<Option<String>, StartError> {
    let admins = admin::accounts::any_exists(&services.pool)
        .await
        .map_err(DbError::from)?;
    if admins {
        return Ok(None);
    }
    let url = format!(
        "{}/admin/setup?token={}",
        cfg.public_url.trim_end_matches('/'),
        services.dashboard.setup.issue()
    );
    tracing::warn!(
        "no admin exists yet: create the first one within an hour at {url} (or run `sendguard admin add NAME`)"
    );
    Ok(Some(url))
}
