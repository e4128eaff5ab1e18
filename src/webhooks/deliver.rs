//! The delivery worker: claims due events from the outbox and makes one attempt at each.
//!
//! Several instances may run it on one database: `FOR UPDATE SKIP LOCKED` plus a lease
//! (`claimed_until`) hands each event to one worker at a time, and the lease of a worker that
//! died simply expires. The lease's own timestamp is the claim's token: a worker records its
//! outcome only while the row still carries the lease it took.
//!
//! A worker keeps up to a batch of attempts in hand and refills a slot as soon as its attempt
//! ends, and an app gets a quarter of the slots at most: a receiver that never answers, with a
//! backlog, holds a few slots for an attempt's timeout and never the others' events.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::attempt::{ATTEMPT_TIMEOUT, Delivery, Outcome, attempt, client};
use super::{SecretBox, WebhookError};

/// Longest wait between two attempts. A failing event is retried at this pace for as long as
/// its receiver is down: it is never given up by age (docs/DESIGN.md §4), only when its app no
/// longer has a webhook.
const MAX_DELAY: Duration = Duration::from_secs(4 * 3600);

#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Allows internal addresses and plain http (`SENDGUARD_WEBHOOK_ALLOW_PRIVATE`), for
    /// receivers inside the network and for tests.
    pub allow_private: bool,
    /// How long a claim lasts; it must outlast an attempt.
    pub lease: Duration,
    /// Attempts a worker keeps going at once; an app gets a quarter of them at most.
    pub batch: i64,
    /// First retry delay, doubled each attempt up to 4 h, with ±20 % jitter.
    pub retry_base: Duration,
    /// Pause before claiming again when the last claim found less than it had room for.
    pub poll: Duration,
}

impl Default for WebhookSettings {
    /// Retries until delivered: 30 s after the first failure, then 1, 2, 4 ... minutes,
    /// doubling up to every 4 hours.
    fn default() -> Self {
        WebhookSettings {
            allow_private: false,
            lease: Duration::from_secs(60),
            batch: 32,
            retry_base: Duration::from_secs(30),
            poll: Duration::from_secs(2),
        }
    }
}

/// Claims due events for `$1` seconds, at most `$2`: the oldest free ones of each app, as many
/// as its room (`$3` less its attempts in hand, given as the apps `$4` and their counts `$5`),
/// oldest first across apps; with their app's target as it is now. Each app's events are read
/// by its own index range and locked as they are read, skipping those another worker holds, so
/// two workers claiming at once take different events; the lock re-checks that each is still
/// free. (The rows locked past `$2` are free again at the statement's end.) The previous secret
/// comes along while a rotation's overlap lasts.
const CLAIM: &str = "
    WITH room AS (
        SELECT a.id AS app_id, GREATEST($3 - COALESCE(h.n, 0), 0) AS room
        FROM apps a LEFT JOIN unnest($4::int8[], $5::int8[]) AS h(app_id, n) ON h.app_id = a.id),
    due AS (
        SELECT e.id, e.next_attempt_at FROM room r, LATERAL (
            SELECT id, next_attempt_at FROM webhook_events
            WHERE app_id = r.app_id AND delivered_at IS NULL AND gave_up_at IS NULL
              AND next_attempt_at <= now()
              AND (claimed_until IS NULL OR claimed_until < now())
            ORDER BY next_attempt_at
            LIMIT LEAST(r.room, $2)
            FOR UPDATE SKIP LOCKED) e),
    claimed AS (
        UPDATE webhook_events SET claimed_until = now() + make_interval(secs => $1)
        WHERE id IN (SELECT id FROM due ORDER BY next_attempt_at LIMIT $2)
        RETURNING id, app_id, payload, attempts, claimed_until)
    SELECT c.id, c.app_id, c.payload, c.attempts, c.claimed_until,
           a.webhook_url, a.webhook_secret,
           CASE WHEN a.previous_webhook_secret_until > now()
                THEN a.previous_webhook_secret END AS previous_webhook_secret
    FROM claimed c LEFT JOIN apps a ON a.id = c.app_id";

/// An event claimed for one attempt, with its app's target as it is now.
#[derive(Debug, sqlx::FromRow)]
struct Claimed {
    id: Uuid,
    app_id: i64,
    payload: String,
    attempts: i32,
    /// The lease taken, and the token to record the outcome with.
    claimed_until: DateTime<Utc>,
    webhook_url: Option<String>,
    /// Sealed, as stored.
    webhook_secret: Option<String>,
    /// The secret before a rotation, sealed, while it still signs.
    previous_webhook_secret: Option<String>,
}

impl Claimed {
    fn delivery(&self) -> Delivery<'_> {
        Delivery {
            id: self.id,
            payload: &self.payload,
            webhook_url: self.webhook_url.as_deref(),
            webhook_secret: self.webhook_secret.as_deref(),
            previous_webhook_secret: self.previous_webhook_secret.as_deref(),
        }
    }
}

/// Posts due events to their apps; see the module's doc for how instances share the work.
pub struct Deliverer {
    pool: PgPool,
    client: reqwest::Client,
    settings: WebhookSettings,
    secrets: SecretBox,
}

impl Deliverer {
    /// `secrets` opens the apps' webhook secrets.
    pub fn new(
        pool: PgPool,
        settings: WebhookSettings,
        secrets: SecretBox,
    ) -> Result<Self, WebhookError> {
        validate(&settings)?;
        let client = client(settings.allow_private)?;
        Ok(Deliverer {
            pool,
            client,
            settings,
            secrets,
        })
    }

    /// Delivers what is due once, waiting for every attempt; returns how many were made.
    pub async fn deliver_due(&self) -> Result<usize, sqlx::Error> {
        let mut running = JoinSet::new();
        for event in self.claim(self.slots(), &HashMap::new()).await? {
            self.start(&mut running, event);
        }
        let (mut made, mut first_error) = (0, None);
        while let Some(joined) = running.join_next().await {
            match self.finish(joined).await {
                Ok(attempted) => made += usize::from(attempted),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(made), Err)
    }

    /// Keeps up to a batch of attempts going until `stop` is cancelled, then lets those in hand
    /// end (an attempt is bounded).
    pub async fn run(self, stop: CancellationToken) {
        let mut running = JoinSet::new();
        // The app of each attempt in hand, and how many each app has.
        let mut apps: HashMap<tokio::task::Id, i64> = HashMap::new();
        let mut in_hand: HashMap<i64, usize> = HashMap::new();
        loop {
            let free = self.slots() - running.len();
            let mut idle = true;
            if free > 0 && !stop.is_cancelled() {
                match self.claim(free, &in_hand).await {
                    Ok(claimed) => {
                        // A full claim: more may be due at once.
                        idle = claimed.len() < free;
                        for event in claimed {
                            *in_hand.entry(event.app_id).or_default() += 1;
                            let app = event.app_id;
                            apps.insert(self.start(&mut running, event), app);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "claiming webhook events failed"),
                }
            }
            if stop.is_cancelled() && running.is_empty() {
                return;
            }
            tokio::select! {
                Some(joined) = running.join_next_with_id(), if !running.is_empty() => {
                    let id = match &joined {
                        Ok((id, _)) => *id,
                        Err(e) => e.id(),
                    };
                    if let Some(app) = apps.remove(&id)
                        && let Some(n) = in_hand.get_mut(&app)
                    {
                        *n -= 1;
                        if *n == 0 {
                            in_hand.remove(&app);
                        }
                    }
                    if let Err(e) = self.finish(joined.map(|(_, done)| done)).await {
                        tracing::warn!(error = %e, "recording a webhook attempt failed");
                    }
                }
                _ = tokio::time::sleep(self.settings.poll), if idle => {}
                _ = stop.cancelled(), if !stop.is_cancelled() => {}
            }
        }
    }

    /// Attempts at once, at most (the batch, checked to be 1 to 1,000).
    fn slots(&self) -> usize {
        self.settings.batch as usize
    }

    /// Attempts at once for one app, at most.
    fn share(&self) -> usize {
        (self.slots() / 4).max(1)
    }

    /// Claims up to `n` due events, each app's up to its share less its attempts `in_hand`.
    async fn claim(
        &self,
        n: usize,
        in_hand: &HashMap<i64, usize>,
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        let (apps, counts): (Vec<i64>, Vec<i64>) =
            in_hand.iter().map(|(app, n)| (*app, *n as i64)).unzip();
        sqlx::query_as(CLAIM)
            .bind(self.settings.lease.as_secs_f64())
            .bind(n as i64)
            .bind(self.share() as i64)
            .bind(apps)
            .bind(counts)
            .fetch_all(&self.pool)
            .await
    }

    /// Starts one attempt; answers its task's id.
    fn start(&self, running: &mut JoinSet<(Claimed, Outcome)>, event: Claimed) -> tokio::task::Id {
        let client = self.client.clone();
        let secrets = self.secrets.clone();
        let allow_private = self.settings.allow_private;
        running
            .spawn(async move {
                let outcome = attempt(&client, event.delivery(), &secrets, allow_private).await;
                (event, outcome)
            })
            .id()
    }

    /// Records an ended attempt; true when one was made (not given up without one).
    async fn finish(
        &self,
        joined: Result<(Claimed, Outcome), tokio::task::JoinError>,
    ) -> Result<bool, sqlx::Error> {
        // A panicked attempt leaves its lease to expire: the event is tried again.
        let Ok((event, outcome)) = joined else {
            return Ok(false);
        };
        let attempted = !matches!(outcome, Outcome::GiveUp(_));
        self.record(&event, outcome).await?;
        Ok(attempted)
    }

    async fn record(&self, event: &Claimed, outcome: Outcome) -> Result<(), sqlx::Error> {
        let query = match outcome {
            Outcome::Delivered(status) => sqlx::query(
                "UPDATE webhook_events SET delivered_at = now(), attempts = attempts + 1,
                     last_status = $3, last_error = NULL, claimed_until = NULL
                 WHERE id = $1 AND claimed_until = $2",
            )
            .bind(event.id)
            .bind(event.claimed_until)
            .bind(i32::from(status)),
            Outcome::Failed { status, error } => {
                let attempts = event.attempts + 1;
                let jitter = rand::rng().random_range(0.8..=1.2);
                let delay = backoff(self.settings.retry_base, attempts, jitter);
                tracing::warn!(event = %event.id, app = event.app_id, attempts, status,
                    error = %error, "webhook delivery failed");
                sqlx::query(
                    "UPDATE webhook_events SET attempts = $3, last_status = $4, last_error = $5,
                         next_attempt_at = now() + make_interval(secs => $6),
                         claimed_until = NULL
                     WHERE id = $1 AND claimed_until = $2",
                )
                .bind(event.id)
                .bind(event.claimed_until)
                .bind(attempts)
                .bind(status.map(i32::from))
                .bind(error)
                .bind(delay.as_secs_f64())
            }
            Outcome::GiveUp(why) => {
                tracing::warn!(event = %event.id, app = event.app_id, error = why,
                    "webhook event given up");
                sqlx::query(
                    "UPDATE webhook_events SET gave_up_at = now(), last_error = $3,
                         claimed_until = NULL
                     WHERE id = $1 AND claimed_until = $2",
                )
                .bind(event.id)
                .bind(event.claimed_until)
                .bind(why)
            }
        };
        query.execute(&self.pool).await.map(drop)
    }
}

fn validate(s: &WebhookSettings) -> Result<(), WebhookError> {
    let min_lease = ATTEMPT_TIMEOUT + Duration::from_secs(5);
    let problem = if s.lease < min_lease {
        format!("the lease must be at least {min_lease:?}, to outlast an attempt")
    } else if !(1..=1000).contains(&s.batch) {
        "the batch must be between 1 and 1000".to_owned()
    } else if s.retry_base.is_zero() || s.retry_base > MAX_DELAY {
        format!("the retry base must be above zero and at most {MAX_DELAY:?}")
    } else if s.poll.is_zero() {
        "the poll interval must be above zero".to_owned()
    } else {
        return Ok(());
    };
    Err(WebhookError::Settings(problem))
}

/// Exponential backoff capped at `MAX_DELAY`, times `jitter` (around 1) so that events failing
/// together spread out.
fn backoff(base: Duration, attempts: i32, jitter: f64) -> Duration {
    crate::backoff::exponential(base, attempts, MAX_DELAY).mul_f64(jitter)
}

#[cfg(test)]
#[path = "deliver_tests.rs"]
mod tests;
