//! Group commit: invites that arrive while a write is in progress are written together, in one
//! transaction with one commit ([`crate::batch`]), and each request gets its answer after that
//! commit. Queued invites go in one multi-row statement; held and flagging ones (the flag, the
//! sender's new state and the audit entries with the invite that caused them) follow in the
//! same transaction. When the commit fails, every request of the batch gets the error, so none
//! is answered 200 unless it is committed.

use sqlx::PgPool;

use super::policy::Breach;
use super::store::{self, Assumed, NewInvite, Written};
use crate::batch::{BatchError, Batcher};
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
    /// Starts `writers` writing tasks on `pool` (`SENDGUARD_DB_WRITERS`).
    pub fn start(pool: PgPool, writers: usize) -> Writer {
        Writer(Batcher::start(MAX_BATCH, writers, move |batch| {
            let pool = pool.clone();
            async move { commit(&pool, &batch).await }
        }))
    }

    /// Writes one invite with the others waiting, answering after their common commit.
    pub async fn write(&self, new: NewInvite, write: Write) -> Result<Written, BatchError> {
        self.0.call(Job { new, write }).await
    }
}

/// Writes a batch: queued invites in one statement, then the others one by one, then one
/// commit. A lone queued or held invite needs no transaction of its own.
async fn commit(pool: &PgPool, batch: &[Job]) -> Result<Vec<Written>, sqlx::Error> {
    let queued: Vec<(&NewInvite, Assumed)> = batch
        .iter()
        .filter_map(|job| match job.write {
            Write::Queued(assumed) => Some((&job.new, assumed)),
            _ => None,
        })
        .collect();
    if let [job] = batch {
        let mut conn = pool.acquire().await?;
        match &job.write {
            Write::Queued(_) => {
                return Ok(vec![answer(
                    &job.new,
                    &queued_ids(&mut conn, &queued).await?,
                )]);
            }
            Write::Held { assumed, cap } => {
                return Ok(vec![
                    store::insert_held(&mut conn, &job.new, *assumed, *cap).await?,
                ]);
            }
            Write::Flagged { .. } => {}
        }
    }
    let mut tx = pool.begin().await?;
    if queued.len() < batch.len() {
        // Held and flagging invites lock their senders one by one, after the queued ones: the
        // senders of the whole batch are locked first, in key order, so that two instances'
        // batches never wait on each other in a circle.
        let mut senders: Vec<&SenderKey> = batch.iter().map(|job| &job.new.sender).collect();
        senders.sort();
        senders.dedup();
        store::lock_senders(&mut tx, &senders).await?;
    }
    let written_ids = queued_ids(&mut tx, &queued).await?;
    let mut written = Vec::with_capacity(batch.len());
    for job in batch {
        written.push(match &job.write {
            Write::Queued(_) => answer(&job.new, &written_ids),
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
    Ok(written)
}

async fn queued_ids(
    conn: &mut sqlx::PgConnection,
    queued: &[(&NewInvite, Assumed)],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    if queued.is_empty() {
        return Ok(Vec::new());
    }
    store::insert_queued(conn, queued).await
}

fn answer(new: &NewInvite, written_ids: &[uuid::Uuid]) -> Written {
    if written_ids.contains(&new.id) {
        Written::Recorded
    } else {
        Written::Skipped
    }
}
