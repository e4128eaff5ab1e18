//! Fresh invites go from the writer straight to this instance's outbox, without a claim of
//! their own: when the outbox has room, a queued invite is inserted already claimed by it (for
//! the usual lease) and handed over once its batch has committed. The claim of a polling
//! outbox is an update of the invite's row and of every index of the table, and the poll waits
//! up to its idle pause; a handed-over invite skips both.
//!
//! Nothing is lost on the way: an invite handed over but never sent (the instance died, or the
//! outbox fell half a lease behind) keeps its claim until the lease runs out, and is then
//! claimed by any outbox like every other expired claim.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Outgoing;

/// Invites that may wait in hand for the outbox; beyond this, new invites are left to a claim.
const CAPACITY: usize = 2048;

/// An invite handed over, and when.
pub(super) struct Handed {
    pub at: Instant,
    pub invite: Outgoing,
}

/// The writer's end: room in the outbox, and the claim to write with it.
#[derive(Clone)]
pub struct Handoff {
    sender: mpsc::Sender<Handed>,
    worker_id: Arc<str>,
    lease: Duration,
}

/// Room for one invite in the outbox, taken before the invite is written claimed.
pub struct Slot<'a>(mpsc::Permit<'a, Handed>);

impl Handoff {
    pub(super) fn new(worker_id: &str, lease: Duration) -> (Handoff, mpsc::Receiver<Handed>) {
        let (sender, receiver) = mpsc::channel(CAPACITY);
        let handoff = Handoff {
            sender,
            worker_id: worker_id.into(),
            lease,
        };
        (handoff, receiver)
    }

    /// The outbox's worker id, for the invite's `claimed_by`.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The claim's lease, for the invite's `claimed_until`.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Room for one more invite, if the outbox has it and is still running.
    pub fn reserve(&self) -> Option<Slot<'_>> {
        self.sender.try_reserve().ok().map(Slot)
    }
}

impl Slot<'_> {
    /// Hands over an invite written claimed and committed.
    pub fn hand(self, invite: Outgoing) {
        self.0.send(Handed {
            at: Instant::now(),
            invite,
        });
    }
}
