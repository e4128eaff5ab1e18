//! Group commit: invites that arrive while a write is in progress are written together, in one
//! transaction with one commit ([`crate::batch`]), and each request gets its answer after that
//! commit. Queued invites go in one multi-row statement; held and flagging ones (the flag, the
//! sender's new state and the audit entries with the invite that caused them) follow in the
//! same transaction. When the commit fails, every request of the batch gets the error, so none
//! is answered 200 unless it is committed. Queued invites are written claimed by this
//! instance's outbox when it has room for them, and handed to it after the commit.

use sqlx::PgPool;

use super::policy::{Breach, Status};
use super::store::{self, Assumed, Claim, NewInvite, Written, WrittenRow};
use crate::batch::{BatchError, Batcher};
use crate::mail::{Handoff, Outgoing, Slot};
use crate::moderation::SenderState;
use crate::sender::SenderKey;

/// The most invites one transaction writes.
pub const MAX_BATCH: usize = 256;

/// How an invite is written.
pub enum Write {
    /// No breach, nothing to hold: in the batch's multi-row statement.
    Queued(Assumed),
    /// Held, with no new flag.
    Held { assumed: SenderState, cap: i64 },
    /// With the flag of a breach.
    Flagged {
        assumed: SenderState,
        breach: Breach,
        cap: i64,
        confirm_repeat: bool,
    },
}

struct Job {
    new: NewInvite,
    write: Write,
}

/// The handle requests write through.
#[derive(Clone)]
pub struct Writer(Batcher<Job, Written>);

impl Writer {
    /// Starts `writers` writing tasks on `pool` (`SENDGUARD_DB_WRITERS`), handing queued
    /// invites to `outbox`.
    pub fn start(pool: PgPool, writers: usize, outbox: Handoff) -> Writer {
        Writer(Batcher::start(MAX_BATCH, writers, move |batch| {
            let (pool, outbox) = (pool.clone(), outbox.clone());
            async move { commit(&pool, &outbox, &batch).await }
        }))
    }

    /// Writes one invite with the others waiting, answering after their common commit.
    pub async fn write(&self, new: NewInvite, write: Write) -> Result<Written, BatchError> {
        self.0.call(Job { new, write }).await
    }
}

/// Writes a batch: queued invites in one statement, then the others one by one, then one
/// commit. A batch of queued invites only, or a lone held one, is a single statement and needs
/// no transaction of its own.
async fn commit(
    pool: &PgPool,
    outbox: &Handoff,
    batch: &[Job],
) -> Result<Vec<Written>, sqlx::Error> {
    let queued: Vec<(&NewInvite, Assumed)> = batch
        .iter()
        .filter_map(|job| match job.write {
            Write::Queued(assumed) => Some((&job.new, assumed)),
            _ => None,
        })
        .collect();
    // Room in the outbox is taken before the write, so that every invite written claimed by it
    // can be handed over.
    let slots: Vec<Option<Slot>> = queued
        .iter()
        .map(|(new, _)| (new.status == Status::Queued).then(|| outbox.reserve())?)
        .collect();
    let claim = Claim {
        worker_id: outbox.worker_id(),
        lease: outbox.lease(),
        rows: slots.iter().map(Option::is_some).collect(),
    };
    // Queued invites alone are one statement, atomic without a transaction of its own; so is a
    // lone held one.
    if queued.len() == batch.len() {
        let mut conn = pool.acquire().await?;
        let rows = store::insert_queued(&mut conn, &queued, &claim).await?;
        hand_over(&queued, slots, &rows);
        return Ok(batch.iter().map(|job| answer(&job.new, &rows)).collect());
    }
    if let [
        Job {
            new,
            write: Write::Held { assumed, cap },
        },
    ] = batch
    {
        let mut conn = pool.acquire().await?;
        return Ok(vec![
            store::insert_held(&mut conn, new, *assumed, *cap).await?,
        ]);
    }
    let mut tx = pool.begin().await?;
    // Held and flagging invites lock their senders one by one, after the queued ones: the
    // senders of the whole batch are locked first, in key order, so that two instances'
    // batches never wait on each other in a circle.
    let mut senders: Vec<&SenderKey> = batch.iter().map(|job| &job.new.sender).collect();
    senders.sort();
    senders.dedup();
    store::lock_senders(&mut tx, &senders).await?;
    let rows = queued_rows(&mut tx, &queued, &claim).await?;
    let mut written = Vec::with_capacity(batch.len());
    for job in batch {
        written.push(match &job.write {
            Write::Queued(_) => answer(&job.new, &rows),
            Write::Held { assumed, cap } => {
                store::insert_held(&mut tx, &job.new, *assumed, *cap).await?
            }
            Write::Flagged {
                assumed,
                breach,
                cap,
                confirm_repeat,
            } => {
                store::insert_with_flag(&mut tx, &job.new, *assumed, breach, *cap, *confirm_repeat)
                    .await?
            }
        });
    }
    tx.commit().await?;
    hand_over(&queued, slots, &rows);
    Ok(written)
}

async fn queued_rows(
    conn: &mut sqlx::PgConnection,
    queued: &[(&NewInvite, Assumed)],
    claim: &Claim<'_>,
) -> Result<Vec<WrittenRow>, sqlx::Error> {
    if queued.is_empty() {
        return Ok(Vec::new());
    }
    store::insert_queued(conn, queued, claim).await
}

/// Hands the committed invites written claimed to the outbox; the other slots are given back.
fn hand_over(queued: &[(&NewInvite, Assumed)], slots: Vec<Option<Slot>>, rows: &[WrittenRow]) {
    for ((new, _), slot) in queued.iter().zip(slots) {
        let Some(slot) = slot else { continue };
        let written = rows.iter().find(|row| row.id == new.id);
        if let Some(unsubscribed) = written.and_then(|row| row.claimed_unsubscribed) {
            slot.hand(Outgoing {
                id: new.id,
                app_id: new.sender.app_id,
                recipient: new.invite.recipient.clone(),
                resource: new.invite.resource.clone(),
                message: new.invite.message.clone(),
                sender_name: new.invite.sender_name.clone(),
                accept_url: new.accept_url.clone(),
                attempts: 0,
                unsubscribed,
            });
        }
    }
}

fn answer(new: &NewInvite, rows: &[WrittenRow]) -> Written {
    if rows.iter().any(|row| row.id == new.id) {
        Written::Recorded
    } else {
        Written::Skipped
    }
}
