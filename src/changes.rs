//! Keeps every in-process copy of database rows in step with Postgres: the rules, the sender
//! states and the API keys. Triggers NOTIFY on a change (migrations 0001 and 0004); one LISTEN
//! connection per instance receives them. The rules are also reloaded every second, and the
//! caches are emptied whenever the listening connection was lost, since notifications sent
//! meanwhile are gone.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgNotification};
use tokio_util::sync::CancellationToken;

use crate::api_keys::ApiKeyCache;
use crate::apps::AppCache;
use crate::campaigns::known::KnownTexts;
use crate::moderation::SenderStates;
use crate::rules::RuleCache;
use crate::sender_key::SenderKey;

const RULES: &str = "sendguard_rules";
const SENDERS: &str = "sendguard_senders";
const API_KEYS: &str = "sendguard_api_keys";
const APPS: &str = "sendguard_apps";
use crate::campaigns::CHANGED as CAMPAIGNS;

enum Event {
    Notified(PgNotification),
    Lost,
    Failed(sqlx::Error),
    /// Time for the periodic rule reload.
    Tick,
}

#[derive(Clone)]
pub struct Watched {
    pub rules: RuleCache,
    pub senders: SenderStates,
    pub api_keys: ApiKeyCache,
    pub apps: AppCache,
    /// Standard texts and benign marks.
    pub known: KnownTexts,
}

impl Watched {
    fn forget_cached_rows(&self) {
        self.senders.clear();
        self.api_keys.clear();
    }

    /// Runs until `stop` is cancelled.
    pub async fn watch(self, pool: PgPool, stop: CancellationToken) {
        tokio::select! {
            _ = self.follow(&pool) => {}
            _ = stop.cancelled() => {}
        }
    }

    async fn follow(&self, pool: &PgPool) {
        let mut listener = None;
        let mut next_reload = tokio::time::Instant::now();
        loop {
            if listener.is_none() {
                listener = listen(pool).await;
                // Whatever changed while nobody listened.
                self.forget_cached_rows();
                self.rules.reload(pool).await;
                self.apps.reload(pool).await;
                self.known.reload(pool).await;
            }
            let wait = next_reload.saturating_duration_since(tokio::time::Instant::now());
            let event = match listener.as_mut() {
                Some(l) => match tokio::time::timeout(wait, l.try_recv()).await {
                    Ok(Ok(Some(n))) => Event::Notified(n),
                    // sqlx reconnects on the next call; what was sent meanwhile is lost.
                    Ok(Ok(None)) => Event::Lost,
                    Ok(Err(e)) => Event::Failed(e),
                    Err(_) => Event::Tick,
                },
                None => {
                    tokio::time::sleep(wait).await;
                    Event::Tick
                }
            };
            match event {
                Event::Notified(n) => match n.channel() {
                    RULES => self.rules.reload(pool).await,
                    SENDERS => match SenderKey::parse_notification(n.payload()) {
                        Some(sender) => self.senders.forget(&sender),
                        None => self.senders.clear(),
                    },
                    API_KEYS => self.api_keys.clear(),
                    APPS => {
                        self.apps.reload(pool).await;
                        self.known.reload(pool).await;
                    }
                    CAMPAIGNS => self.known.reload(pool).await,
                    _ => {}
                },
                Event::Lost => {
                    tracing::warn!("change notifications interrupted; caches emptied");
                    self.forget_cached_rows();
                }
                Event::Failed(e) => {
                    tracing::warn!(error = %e, "change notifications failed; reconnecting");
                    listener = None;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Event::Tick => {
                    self.rules.reload(pool).await;
                    self.apps.reload(pool).await;
                    self.known.reload(pool).await;
                    next_reload = tokio::time::Instant::now() + Duration::from_secs(1);
                }
            }
        }
    }
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "LISTEN connection failed; polling rules only");
            return None;
        }
    };
    match listener
        .listen_all([RULES, SENDERS, API_KEYS, APPS, CAMPAIGNS])
        .await
    {
        Ok(()) => Some(listener),
        Err(e) => {
            tracing::warn!(error = %e, "LISTEN failed; polling rules only");
            None
        }
    }
}
