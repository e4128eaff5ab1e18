//! Group commit: invites that arrive while a write is in progress are written together, in one
//! transaction with one commit ([`crate::coalesce`]), and each request gets its answer after that
//! commit. A small batch waits a moment for the requests whose rule checks have begun. Queued and
//! held invites go in one multi-row statement, so a held one answers as fast as a queued one, a
//! flagging one too: the statement leaves its flag to a follow-up ([`super::follow_up`]),
//! written with it, that the flag's own transaction does after the commit. When the commit
//! fails, every request of the batch gets the error, so none is answered 200 unless it is
//! committed. Queued invites are written claimed by this instance's outbox when it has room for
//! them, and handed to it after the commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::PgConnection;
use tokio::runtime;
use tokio::sync::{Notify, oneshot};

use super::policy::Breach;
use super::policy::Status;
use super::store::insert::{Claim, Row, WrittenRow, insert_batch, outcome};
use super::store::{Assumed, NewInvite, Written};
use crate::coalesce::{BatchError, Batcher, Gather};
use crate::db::{self, Commits, DbError};
use crate::mail::{Handoff, Outgoing, Slot};
use crate::metrics::Metrics;
use crate::moderation::SenderState;

/// The most invites one transaction writes.
const MAX_BATCH: usize = 256;

/// The longest a small batch waits for the requests on their way to the writer. At an everyday
/// rate the writer is idle between invites, and a batch of one pays the statement's fixed cost
/// alone (docs/PERFORMANCE.md); under load, batches are large without waiting. Tokio's timer
/// makes it 1-2 ms.
const GATHER_WINDOW: Duration = Duration::from_millis(1);
/// The size from which a batch waits no more: the fixed cost is then shared enough.
const GATHER_ENOUGH: usize = 4;

/// How an invite is written.
pub enum Write {
    /// No breach, nothing to hold: in the batch's multi-row statement.
    Queued(Assumed),
    /// Held; with the breach that flags its sender, done by a follow-up once it is written.
    Held {
        assumed: SenderState,
        cap: i64,
        breach: Option<Breach>,
    },
}

struct Job {
    new: NewInvite,
    write: Write,
}

/// The handle requests write through.
#[derive(Clone)]
pub struct Writer {
    batcher: Batcher<Job, Written>,
    coming: Arc<Coming>,
}

/// The requests between the start of their rule checks and the hand-over of their invite.
/// `Relaxed` is enough: the count orders no other data (invites reach the writer through its
/// queue, and the `Notify` orders a fall to zero before the batch's new look at the count).
#[derive(Default)]
struct Coming {
    count: AtomicUsize,
    /// Signalled when the count falls to zero, so that a waiting batch stops waiting.
    none_left: Arc<Notify>,
}

/// A request on its way to the writer, until dropped.
pub struct Approach(Arc<Coming>);

impl Drop for Approach {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.0.none_left.notify_one();
        }
    }
}

impl Writer {
    /// Starts `writers` writing tasks (`SENDGUARD_DB_WRITERS`) on a thread and a runtime of
    /// their own, with connections of their own to `url`, handing queued invites to `outbox`.
    ///
    /// Every request waits on the writer, the invite path's one serial step. Among the
    /// requests' tasks it took its turn on the same two workers as they did; on a thread of
    /// its own, scheduled by the kernel beside them, the service took about a tenth more
    /// invites per second at saturation (docs/PERFORMANCE.md).
    pub async fn start(
        url: &str,
        writers: usize,
        outbox: Handoff,
        metrics: Metrics,
    ) -> Result<Writer, DbError> {
        let (started, writer) = oneshot::channel();
        let (url, writers) = (url.to_owned(), writers.max(1));
        std::thread::Builder::new()
            .name("sendguard-writer".into())
            .spawn(move || {
                let runtime = match runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = started.send(Err(DbError::Sqlx(sqlx::Error::Io(e))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let connections = match db::connect_kept(
                        &url,
                        "sendguard-batches",
                        writers as u32,
                        Commits::Flushed,
                    )
                    .await
                    {
                        Ok(connections) => connections,
                        Err(e) => {
                            let _ = started.send(Err(e));
                            return;
                        }
                    };
                    let coming = Arc::new(Coming::default());
                    let (counted, none_left) = (coming.clone(), coming.none_left.clone());
                    let gather = Gather {
                        window: GATHER_WINDOW,
                        complete: Box::new(move |n| {
                            n >= GATHER_ENOUGH || counted.count.load(Ordering::Relaxed) == 0
                        }),
                        changed: Some(none_left),
                    };
                    let (batcher, serve) = Batcher::new(MAX_BATCH, writers, gather, move |batch| {
                        let (connections, outbox, metrics) =
                            (connections.clone(), outbox.clone(), metrics.clone());
                        async move {
                            connections
                                .run(async |conn| commit(conn, &outbox, &metrics, &batch).await)
                                .await
                        }
                    });
                    let writer = Writer { batcher, coming };
                    if started.send(Ok(writer)).is_ok() {
                        serve.await;
                    }
                });
            })
            .map_err(|e| DbError::Sqlx(sqlx::Error::Io(e)))?;
        writer
            .await
            .map_err(|_| DbError::Sqlx(sqlx::Error::WorkerCrashed))?
    }

    /// Counts a request as on its way to the writer until the guard is dropped: a small batch
    /// waits for it.
    pub fn approach(&self) -> Approach {
        self.coming.count.fetch_add(1, Ordering::Relaxed);
        Approach(self.coming.clone())
    }

    /// Writes one invite with the others waiting, answering after their common commit. The
    /// request's `approach` ends once its invite is queued ([`Batcher::call_handing`]).
    pub async fn write(
        &self,
        new: NewInvite,
        write: Write,
        approach: Option<Approach>,
    ) -> Result<Written, BatchError> {
        self.batcher
            .call_handing(Job { new, write }, approach)
            .await
    }
}

/// Writes a batch in one statement, its own transaction.
async fn commit(
    conn: &mut PgConnection,
    outbox: &Handoff,
    metrics: &Metrics,
    batch: &[Job],
) -> Result<Vec<Written>, sqlx::Error> {
    let rows: Vec<Row<'_>> = batch
        .iter()
        .map(|job| match &job.write {
            Write::Queued(assumed) => Row {
                new: &job.new,
                assumed: *assumed,
                held_cap: None,
                breach: None,
            },
            Write::Held {
                assumed,
                cap,
                breach,
            } => Row {
                new: &job.new,
                assumed: Assumed::state(*assumed),
                held_cap: Some(*cap),
                breach: breach.as_ref(),
            },
        })
        .collect();
    // Room in the outbox is taken before the write, so that every invite written claimed by it
    // can be handed over.
    let slots: Vec<Option<Slot>> = rows
        .iter()
        .map(|row| {
            // A settling invite waits in the table: the sweep of a campaign may still hold it.
            let now = row.new.status == Status::Queued && row.new.settle.is_zero();
            now.then(|| outbox.reserve())?
        })
        .collect();
    let claim = Claim {
        worker_id: outbox.worker_id(),
        lease: outbox.lease(),
        rows: slots.iter().map(Option::is_some).collect(),
    };
    // Two batches that wait on each other's senders (instances or writers racing with a
    // follow-up between them) are broken up by Postgres: the aborted one, all rolled back, is
    // simply written again.
    let mut attempt = 1;
    let written = loop {
        match insert_batch(conn, &rows, &claim).await {
            Err(e) if attempt < ATTEMPTS && deadlocked(&e) => {
                tracing::warn!(attempt, error = %e, "a batch was deadlocked; writing it again");
                metrics.batch_retried();
                // The other transaction goes on once this one is aborted: written again at
                // once, this batch could take a sender the other is about to take, and meet
                // it again.
                tokio::time::sleep(RETRY_PAUSE * attempt).await;
                attempt += 1;
            }
            result => break result?,
        }
    };
    metrics.batch_written(batch.len());
    let answers = batch
        .iter()
        .map(|job| outcome(job.new.id, &written))
        .collect();
    hand_over(&rows, slots, &written);
    Ok(answers)
}

/// Writes of one batch tried before its requests get the error.
const ATTEMPTS: u32 = 3;

/// The pause before a deadlocked batch is written again, times the attempts so far.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// The transaction was aborted to break a deadlock (or a serialization failure): nothing of
/// it was kept, and the same writes can be tried again.
fn deadlocked(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40P01" || code == "40001")
}

/// Hands the committed invites written claimed to the outbox; the other slots are given back.
fn hand_over(rows: &[Row<'_>], slots: Vec<Option<Slot>>, written: &[WrittenRow]) {
    for (Row { new, .. }, slot) in rows.iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let Some(row) = written.iter().find(|row| row.id == new.id) else {
            continue;
        };
        if let Some(unsubscribed) = row.claimed_unsubscribed {
            slot.hand(Outgoing {
                id: new.id,
                app_id: new.sender.app_id,
                recipient: new.invite.recipient.clone(),
                resource: new.invite.resource.clone(),
                message: new.invite.message.clone(),
                sender_name: new.invite.sender_name.clone(),
                accept_url: new.accept_url.clone(),
                attempts: 0,
                created_at: row.created_at,
                unsubscribed,
            });
        }
    }
}
