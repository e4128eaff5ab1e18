//! Invites recorded while Redis could not be asked (`SENDGUARD_ON_REDIS_ERROR=defer`) are
//! checked against the rules once it answers again, each with its own timestamp, oldest first.

use tokio_util::sync::CancellationToken;

use super::validate::ValidInvite;
use super::{InviteError, InviteService, store};
use crate::moderation::SenderState;
use crate::sender_key::SenderKey;

/// Deferred invites decided per transaction.
const BATCH: i64 = 100;

impl InviteService {
    /// Checks one batch of deferred invites; returns how many were decided (0 while Redis
    /// still does not answer). A `reject` verdict becomes `suppressed`: the caller was answered
    /// 200 long ago.
    ///
    /// The rules are asked first, holding no sender's row (a writer's batch may be waiting for
    /// one); then the senders are locked, in key order as the writer locks them, and each
    /// verdict is drawn from the rules' answers and the state its sender has now: a ban or a
    /// lift that committed while Redis was being asked is not overtaken by a verdict made
    /// before it, and is met without asking the rules again (a batch that fails to commit is
    /// asked again, and counted twice).
    async fn recheck_deferred(&self) -> Result<usize, InviteError> {
        let mut tx = self.pool.begin().await?;
        let rows = store::claim_deferred(&mut tx, BATCH).await?;
        if rows.is_empty() || !self.limiter.drained().await {
            return Ok(0);
        }
        let mut answered = Vec::with_capacity(rows.len());
        for row in &rows {
            let sender = SenderKey::new(row.app_id, row.sender_id.as_str());
            let invite = ValidInvite {
                sender_ip: row.sender_ip.as_deref().and_then(|ip| ip.parse().ok()),
                sender_id: row.sender_id.clone(),
                recipient: row.recipient.clone(),
                recipient_domain: row.recipient_domain.clone(),
                resource: row.resource.clone(),
                message: row.message.clone(),
                sender_name: row.sender_name.clone(),
                sender_created_at: None,
                // The link was made when the invite was recorded.
                accept_url: None,
            };
            let standing = self.senders.get(&sender).await?;
            let at_ms = row.created_at.timestamp_millis().max(0) as u64;
            match self.answers(&invite, &sender, &standing, Some(at_ms)).await {
                Ok(answers) => answered.push((row, sender, answers)),
                // Still down: what was asked so far is decided, the rest waits.
                Err(InviteError::Limiter(_)) => break,
                Err(e) => return Err(e),
            }
        }
        let locked = answered.iter().map(|(_, sender, _)| sender);
        let mut states = store::lock_senders(&mut tx, locked).await?;
        for (row, sender, answers) in &answered {
            let state = states.get(sender).copied().unwrap_or(SenderState::Active);
            let d = answers.verdict(state);
            let mut decision = d.decision;
            decision.deferred = true;
            let kept = store::settle_deferred(
                &mut tx,
                row,
                d.status,
                &decision,
                &answers.campaign_keys,
                self.held_cap,
            )
            .await?;
            if let Some(b) = &d.breach {
                let flagged = super::follow_up::flag_breach(
                    &mut tx,
                    sender,
                    b,
                    row.id,
                    self.confirm_repeat.as_ref(),
                    kept,
                )
                .await?;
                if let Some(flagged) = flagged {
                    // The sender's next invites in this batch are held as the flag says.
                    states.insert(sender.clone(), flagged);
                }
            }
        }
        tx.commit().await?;
        if !answered.is_empty() {
            tracing::info!(decided = answered.len(), "deferred invites checked");
        }
        Ok(answered.len())
    }

    /// Re-checks deferred invites every second until `stop` is cancelled.
    pub async fn watch_deferred(self, stop: CancellationToken) {
        crate::coalesce::every_second(stop, BATCH as usize, "re-checking deferred invites", || {
            self.recheck_deferred()
        })
        .await;
    }
}
