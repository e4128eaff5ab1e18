//! Delivery: the transport chosen at startup ([`transport`], SMTP through the pool of
//! [`smtp`]) and the outbox worker that sends what the writer hands over ([`handoff`]) and
//! claims the other queued invites; the email itself is [`render`], what a failed send means
//! [`failure`].

pub mod bench;
mod failure;
mod handoff;
mod queries;
mod render;
mod retry;
mod smtp;
mod transport;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use lettre::message::Mailbox;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::apps::AppCache;
use crate::coalesce::{BatchError, Batcher, Gather};
use crate::db::KeptConnections;
use crate::incident::Incident;
use crate::metrics::Metrics;
use crate::outcomes::Outcomes;
use crate::recipients::{LinkKey, Purpose};
pub use failure::MailError;
use handoff::Handed;
pub use handoff::{Handoff, Slot};
pub use queries::{CLAIM, MARK_SENT, OUTBOX_STATE, SUPPRESS};
use queries::{RELEASE, RENEW};
use render::{Content, Envelope};
pub use retry::RETRY;
use retry::Unreachable;
pub use transport::{Transport, parse_from};

/// Sent marks committed at once, at most: those that come while a commit is under way wait
/// for the next one, so the marks of a busy outbox share commits.
const MARKS_AT_ONCE: usize = 256;

/// The longest a sent mark waits for the marks of the sends that complete after it, to share
/// their commit. A send keeps its connection until its mark is committed (so that a crash
/// repeats at most the sends in flight), and no request waits on a mark; the outbox's round
/// does, so at a low rate each round ends up to this much later, and the invites handed over
/// meanwhile go out together in the next. At 1,000 invites a second a mark had a commit of its
/// own, a statement and a round trip for each delivered invite; now about 5 share one.
const MARK_GATHER: Duration = Duration::from_millis(5);

/// The outbox's depth and the age of its oldest invite in seconds.
pub async fn outbox_state(pool: &sqlx::PgPool) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(OUTBOX_STATE).fetch_one(pool).await
}

/// An invite as the outbox reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Outgoing {
    pub id: Uuid,
    pub app_id: i64,
    pub recipient: String,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
    pub accept_url: Option<String>,
    pub attempts: i32,
    /// When it was written: with the id, it names the week of `invites` that holds it, so that
    /// writes to it search that week alone instead of every week the retention keeps.
    pub created_at: DateTime<Utc>,
    /// The recipient asked the app for no more invitations: suppressed, not sent.
    pub unsubscribed: bool,
}

/// An invite's row: its id, and when it was written, which names its week.
#[derive(Debug, Clone, Copy)]
struct Row {
    id: Uuid,
    created_at: DateTime<Utc>,
}

impl Outgoing {
    fn row(&self) -> Row {
        Row {
            id: self.id,
            created_at: self.created_at,
        }
    }
}

#[derive(Clone)]
pub struct OutboxSettings {
    pub from: Mailbox,
    pub public_url: String,
    pub max_attempts: i32,
    pub retry_base: Duration,
    pub lease: Duration,
    /// Invites claimed per round (those handed over go in rounds of up to eight times this).
    pub batch: i64,
    /// Pause when there is nothing to send.
    pub idle: Duration,
}

/// Sends the invites its instance's writer hands over, and claims the other queued ones
/// (released, retried, deferred, or handed to an instance that died). Several instances may
/// run it on one database: a claim (`FOR UPDATE SKIP LOCKED` plus a lease) gives each invite
/// to one worker; a worker that dies leaves its lease to expire and another takes the invite
/// over.
pub struct Outbox {
    db: KeptConnections,
    transport: Transport,
    metrics: Metrics,
    /// Where a refusal is counted as a bounce.
    outcomes: Outcomes,
    /// Each app's branding.
    apps: AppCache,
    /// Signs each email's unsubscribe and report links.
    links: LinkKey,
    smtp: Incident,
    /// Invites (and when each was written) whose last attempt failed because the mail server
    /// could not be reached, since the last send that succeeded: the next one that does wakes
    /// them.
    unreachable: Unreachable,
    settings: OutboxSettings,
    worker_id: String,
    /// Where each delivered invite's `sent` mark is committed, with those of the sends that
    /// completed around it.
    marks: Batcher<Row, ()>,
    handoff: Handoff,
    handed: Mutex<mpsc::Receiver<Handed>>,
    /// Rounds asked for from outside ([`Rounds`]), each answered when it is done.
    asking: mpsc::Sender<oneshot::Sender<usize>>,
    asked: Mutex<mpsc::Receiver<oneshot::Sender<usize>>>,
}

/// Runs one round of an outbox at once and waits for it, so that a test reads what was sent
/// once it is sent instead of waiting out the outbox's own pace.
#[derive(Clone)]
pub struct Rounds(mpsc::Sender<oneshot::Sender<usize>>);

impl Rounds {
    /// One round: the invites handed over so far, then one claim of the due ones. Answers how
    /// many invites it took (none once the outbox has stopped).
    pub async fn run_one(&self) -> usize {
        let (answer, answered) = oneshot::channel();
        if self.0.send(answer).await.is_err() {
            return 0;
        }
        answered.await.unwrap_or(0)
    }
}

impl Outbox {
    pub fn new(
        db: KeptConnections,
        transport: Transport,
        metrics: Metrics,
        outcomes: Outcomes,
        apps: AppCache,
        links: LinkKey,
        settings: OutboxSettings,
    ) -> Self {
        let worker_id = format!("{}-{}", std::process::id(), Uuid::new_v4().simple());
        let (handoff, handed) = Handoff::new(&worker_id, settings.lease);
        let (asking, asked) = mpsc::channel(8);
        let (marking, marker) = (db.clone(), worker_id.clone());
        // One commit at a time: marks that arrive meanwhile go together in the next, and a mark
        // waits for those of the sends that complete soon after it, unless every connection
        // already waits for its mark (then no other can come until they are committed).
        let most = transport.turns();
        let gather = Gather {
            window: MARK_GATHER,
            complete: Box::new(move |marks| most.is_some_and(|most| marks >= most)),
            changed: None,
        };
        let marks = Batcher::start_gathering(MARKS_AT_ONCE, gather, move |rows: Vec<Row>| {
            let (db, worker_id) = (marking.clone(), marker.clone());
            async move {
                settle(&db, &worker_id, MARK_SENT, &rows).await?;
                Ok(vec![(); rows.len()])
            }
        });
        Outbox {
            db,
            transport,
            metrics,
            outcomes,
            apps,
            links,
            smtp: Incident::new("smtp"),
            unreachable: Unreachable::default(),
            settings,
            worker_id,
            marks,
            handoff,
            handed: Mutex::new(handed),
            asking,
            asked: Mutex::new(asked),
        }
    }

    /// Where rounds are asked for.
    pub fn rounds(&self) -> Rounds {
        Rounds(self.asking.clone())
    }

    /// Where the writer hands fresh invites over.
    pub fn handoff(&self) -> Handoff {
        self.handoff.clone()
    }

    /// Runs until `stop` is cancelled, finishing the round in hand, then releases what was
    /// handed over and not sent. Claims every `idle` pause, and again at once after a full
    /// claim, however busy the handoff is; and runs a round whenever one is asked for.
    pub async fn run(self, stop: CancellationToken) {
        let mut handed = self.handed.lock().await;
        let mut asked = self.asked.lock().await;
        let most = self.settings.batch as usize * 8;
        let mut in_hand = Vec::with_capacity(most);
        let mut claim_at = Instant::now();
        while !stop.is_cancelled() {
            if Instant::now() >= claim_at {
                let claimed = self.round().await.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "outbox round failed");
                    0
                });
                if claimed < self.settings.batch as usize {
                    claim_at = Instant::now() + self.settings.idle;
                }
                continue;
            }
            tokio::select! {
                _ = handed.recv_many(&mut in_hand, most) => {
                    if let Err(e) = self.deliver_handed(in_hand.drain(..)).await {
                        tracing::warn!(error = %e, "outbox round failed");
                    }
                }
                Some(answer) = asked.recv() => {
                    in_hand.extend(std::iter::from_fn(|| handed.try_recv().ok()).take(most));
                    let taken = in_hand.len();
                    if let Err(e) = self.deliver_handed(in_hand.drain(..)).await {
                        tracing::warn!(error = %e, "outbox round failed");
                    }
                    let claimed = self.round().await.unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "outbox round failed");
                        0
                    });
                    let _ = answer.send(taken + claimed);
                }
                _ = tokio::time::sleep_until(claim_at.into()) => {}
                _ = stop.cancelled() => {}
            }
        }
        handed.close();
        if let Err(e) = sqlx::query(RELEASE)
            .bind(&self.worker_id)
            .execute(self.db.pool())
            .await
        {
            tracing::warn!(error = %e, "the outbox's claims were not released; they expire");
        }
    }

    /// Sends invites handed over, except those that waited half their lease: another outbox
    /// may claim them soon, so they are left to it.
    async fn deliver_handed(&self, handed: impl Iterator<Item = Handed>) -> Result<(), BatchError> {
        let fresh = self.settings.lease / 2;
        let invites: Vec<Outgoing> = handed
            .filter(|h| h.at.elapsed() < fresh)
            .map(|h| h.invite)
            .collect();
        self.deliver(invites).await.map(drop)
    }

    /// Claims one batch and sends it; returns how many were claimed.
    pub async fn round(&self) -> Result<usize, BatchError> {
        let claimed: Vec<Outgoing> = self
            .db
            .run(async |conn| {
                sqlx::query_as(CLAIM)
                    .bind(&self.worker_id)
                    .bind(self.settings.lease.as_secs_f64())
                    .bind(self.settings.batch)
                    .fetch_all(conn)
                    .await
            })
            .await?;
        self.deliver(claimed).await
    }

    /// Sends invites claimed by this worker and marks each as its send completes; returns how
    /// many there were.
    async fn deliver(&self, claimed: Vec<Outgoing>) -> Result<usize, BatchError> {
        let n = claimed.len();
        let (unsubscribed, claimed): (Vec<Outgoing>, Vec<Outgoing>) =
            claimed.into_iter().partition(|i| i.unsubscribed);
        if !unsubscribed.is_empty() {
            self.suppress(&unsubscribed).await?;
        }
        let mut sends = JoinSet::new();
        for invite in claimed.iter().cloned() {
            let transport = self.transport.clone();
            let metrics = self.metrics.clone();
            let marks = self.marks.clone();
            let message = self.message(&invite).await;
            sends.spawn(async move {
                let result = match message {
                    Ok(message) => {
                        let _turn = transport.turn().await;
                        let started = std::time::Instant::now();
                        let sent = transport.send(message).await;
                        metrics.smtp_latency(started.elapsed());
                        // The send keeps its turn until its mark is committed: an instance
                        // that dies repeats at most the sends in flight, one per connection.
                        match sent {
                            Ok(()) => Ok(marks.call(invite.row()).await),
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                };
                (invite, result)
            });
        }
        let mut sent = 0u64;
        let mut marked = Ok(());
        let mut failures = Vec::new();
        // A slow mail server can keep a send longer than the claim's lease: the lease is
        // renewed every third of it while any send is under way, or another instance would
        // take the invites over and send them a second time.
        let every = self.settings.lease / 3;
        let mut renew = tokio::time::interval_at((Instant::now() + every).into(), every);
        renew.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let joined = tokio::select! {
                joined = sends.join_next() => joined,
                _ = renew.tick() => {
                    self.renew(&claimed).await;
                    continue;
                }
            };
            let Some(joined) = joined else { break };
            let Ok((invite, result)) = joined else {
                continue; // a panicked send leaves its lease to expire: the invite is retried
            };
            match result {
                Ok(mark) => {
                    sent += 1;
                    marked = marked.and(mark);
                }
                Err(e) => failures.push((invite, e)),
            }
        }
        // Each delivery was marked as its send completed, in a commit shared with the others
        // around it, so an instance dying mid-round leaves at most its sends in flight to be
        // sent again (at-least-once; the Message-ID stays the same).
        if sent > 0 {
            self.smtp.recovered();
            self.metrics.invites("sent", sent);
            let waiting = self.unreachable.take();
            if !waiting.is_empty() {
                self.wake(waiting).await;
            }
        }
        // Each failure is recorded whatever happened to the others: one not recorded is tried
        // again after its lease, without its attempt counted.
        for (invite, e) in failures {
            let recorded = self.failed(&invite, e).await.map_err(Arc::new);
            marked = marked.and(recorded);
        }
        marked.map(|()| n)
    }

    /// The email of `invite`, under its app's branding.
    async fn message(&self, invite: &Outgoing) -> Result<lettre::Message, MailError> {
        let app = self
            .apps
            .fetch(self.db.pool(), invite.app_id)
            .await
            .map_err(|e| MailError::App(e.to_string()))?
            .ok_or_else(|| MailError::App(format!("no app of id {}", invite.app_id)))?;
        let from = match &app.mail_from {
            Some(from) => parse_from(from)?,
            None => self.settings.from.clone(),
        };
        let public = &self.settings.public_url;
        let unsubscribe = self.links.link(public, Purpose::Unsubscribe, invite.id);
        let report = self.links.link(public, Purpose::Report, invite.id);
        render::render(
            &Content {
                id: invite.id,
                recipient: &invite.recipient,
                sender_name: invite.sender_name.as_deref(),
                resource: invite.resource.as_deref(),
                message: invite.message.as_deref(),
            },
            &Envelope {
                from: &from,
                product: app.product.as_deref(),
                accept: invite.accept_url.as_deref(),
                unsubscribe: &unsubscribe,
                report: &report,
            },
        )
    }

    /// Invites to recipients who unsubscribed from their app since the invite was queued (or
    /// before it was released): suppressed, with the reason in the decision record.
    async fn suppress(&self, invites: &[Outgoing]) -> Result<(), sqlx::Error> {
        let rows: Vec<Row> = invites.iter().map(Outgoing::row).collect();
        settle(&self.db, &self.worker_id, SUPPRESS, &rows).await?;
        self.metrics.invites("suppressed", invites.len() as u64);
        Ok(())
    }

    /// Extends this worker's lease on a round's invites; a failure is only logged, and the
    /// round goes on (its invites may then be sent twice, at least once as always).
    async fn renew(&self, invites: &[Outgoing]) {
        let lease = self.settings.lease.as_secs_f64();
        let ids: Vec<Uuid> = invites.iter().map(|invite| invite.id).collect();
        let renewed = self
            .db
            .run(async |conn| {
                sqlx::query(RENEW)
                    .bind(&ids)
                    .bind(&self.worker_id)
                    .bind(lease)
                    .execute(conn)
                    .await
            })
            .await;
        if let Err(e) = renewed {
            tracing::warn!(error = %e, "the outbox's lease on a round in flight was not renewed");
        }
    }
}

/// `statement` (`MARK_SENT` or `SUPPRESS`) on invites claimed by worker `worker_id`, bound to
/// their ids (`$1`), the worker (`$2`) and the span of their `created_at` (`$3`, `$4`), which
/// keeps it to their weeks.
fn on_rows<'q>(
    statement: &'q str,
    worker_id: &str,
    rows: &[Row],
) -> Query<'q, Postgres, PgArguments> {
    let ids: Vec<Uuid> = rows.iter().map(|row| row.id).collect();
    let (first, last) = written_between(rows);
    sqlx::query(statement)
        .bind(ids)
        .bind(worker_id.to_owned())
        .bind(first)
        .bind(last)
}

/// Runs `statement` (`MARK_SENT` or `SUPPRESS`) on invites claimed by worker `worker_id`.
async fn settle(
    db: &KeptConnections,
    worker_id: &str,
    statement: &'static str,
    rows: &[Row],
) -> Result<(), sqlx::Error> {
    let once = async || {
        db.run(async |conn| on_rows(statement, worker_id, rows).execute(conn).await)
            .await
            .map(drop)
    };
    // Tried once more, on a connection the pool has checked, so that losing the kept one
    // (Postgres restarted) does not leave the invites to be sent again after their lease.
    // Both statements can run twice: they touch only this worker's claims.
    match once().await {
        Ok(()) => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, "marking invites failed; trying again");
            once().await
        }
    }
}

/// The first and the last time at which these invites were written: the weeks that hold them
/// (none for no invites, which then match nothing).
fn written_between(rows: &[Row]) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let times = rows.iter().map(|row| row.created_at);
    (times.clone().min(), times.max())
}
