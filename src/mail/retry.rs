//! What a failed send leads to: another attempt after a backoff, or giving up; and, once the
//! mail server answers again after it could not be reached, the invites that failed for it
//! retried at once.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use uuid::Uuid;

use super::{MailError, Outbox, Outgoing};
use crate::metrics::DependencyError;
use crate::outcomes::OutcomeType;

/// A failed delivery of invite `$1` (written at `$7`) by worker `$2`: its `$3`rd attempt,
/// failed with `$4`; given up on (out of the outbox) when `$5`, else due again in `$6` seconds.
pub const RETRY: &str = "WITH waiting AS (
             UPDATE outbox SET claimed_by = NULL,
                 next_attempt_at = now() + make_interval(secs => $6)
             WHERE invite_id = $1 AND claimed_by = $2 AND NOT $5
             RETURNING invite_id),
         given_up AS (
             DELETE FROM outbox WHERE invite_id = $1 AND claimed_by = $2 AND $5
             RETURNING invite_id)
     UPDATE invites SET attempts = $3, last_error = $4,
         status = CASE WHEN $5 THEN 'failed' ELSE status END
     WHERE id = $1 AND created_at = $7
       AND id IN (SELECT invite_id FROM waiting UNION ALL SELECT invite_id FROM given_up)";

/// Makes due now invites (`$1`) that wait for another attempt after the mail server could not
/// be reached, once it answers again: their backoff was sized for the outage, which is over.
const WAKE: &str = "UPDATE outbox SET next_attempt_at = now()
     WHERE invite_id = ANY($1) AND claimed_by IS NULL AND next_attempt_at > now()";

/// The most invites an instance remembers to wake after an outage; past it, the others wait
/// for their backoff.
const MOST_TO_WAKE: usize = 10_000;

/// Invites whose last attempt failed because the mail server could not be reached, since the
/// last send that succeeded.
#[derive(Default)]
pub(super) struct Unreachable(Mutex<HashSet<Uuid>>);

impl Unreachable {
    /// Remembers `invite` when its attempt failed for want of the server and it will be tried
    /// again; forgets it otherwise (a throttled or refused invite keeps its backoff).
    fn note(&self, invite: &Outgoing, unreachable: bool) {
        let mut waiting = self.lock();
        if unreachable && waiting.len() < MOST_TO_WAKE {
            waiting.insert(invite.id);
        } else {
            waiting.remove(&invite.id);
        }
    }

    /// What to wake now that a send succeeded; remembers nothing after.
    pub(super) fn take(&self) -> HashSet<Uuid> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<Uuid>> {
        // A panic while the map was held left a map, never a half-written one.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Outbox {
    /// Schedules a failed delivery again with backoff, or gives up on it.
    pub(super) async fn failed(&self, invite: &Outgoing, e: MailError) -> Result<(), sqlx::Error> {
        let attempts = invite.attempts + 1;
        let give_up = e.is_permanent() || attempts >= self.settings.max_attempts;
        let delay = backoff(self.settings.retry_base, attempts);
        self.metrics.smtp_failure();
        self.metrics.dependency_error(DependencyError::Smtp);
        if give_up {
            self.metrics.invites("failed", 1);
        }
        if !e.is_permanent() {
            self.smtp.failed(&e);
        }
        self.unreachable
            .note(invite, e.is_unreachable() && !give_up);
        if give_up {
            tracing::warn!(invite = %invite.id, attempts, error = %e, "invite failed for good");
        } else {
            tracing::debug!(invite = %invite.id, attempts, error = %e, "delivery failed");
        }
        sqlx::query(RETRY)
            .bind(invite.id)
            .bind(&self.worker_id)
            .bind(attempts)
            .bind(e.to_string())
            .bind(give_up)
            .bind(delay.as_secs_f64())
            .bind(invite.created_at)
            .execute(self.db.pool())
            .await?;
        if e.is_refusal()
            && let Err(e) = self
                .outcomes
                .record(invite.id, OutcomeType::Bounce, None)
                .await
        {
            tracing::warn!(invite = %invite.id, error = %e, "a refusal was not counted as a bounce");
        }
        Ok(())
    }

    /// After the mail server could not be reached, sends at once the invites that failed for
    /// it: with backoff doubling up to an hour, one that failed during a long outage would
    /// otherwise wait up to that long after it. Only those: a relay that throttles answers
    /// some sends `451` while it takes others, and a throttled invite retried at each success
    /// would spend its attempts in seconds. Each instance wakes the invites it failed; one
    /// that restarts forgets them, and they keep their backoff. A failure here is only logged.
    pub(super) async fn wake(&self, waiting: HashSet<Uuid>) {
        let ids: Vec<Uuid> = waiting.into_iter().collect();
        match sqlx::query(WAKE).bind(ids).execute(self.db.pool()).await {
            Ok(done) => tracing::info!(
                invites = done.rows_affected(),
                "the mail server answers again; retrying what failed while it could not be reached"
            ),
            Err(e) => tracing::warn!(error = %e, "invites waiting out an outage were not woken"),
        }
    }
}

/// Exponential backoff capped at an hour, then a random share between a half and the whole, so
/// instances retrying together spread out.
fn backoff(base: Duration, attempts: i32) -> Duration {
    crate::backoff::exponential(base, attempts, Duration::from_secs(3600))
        .mul_f64(rand::rng().random_range(0.5..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_secs(2);
        for attempts in 1..30 {
            let d = backoff(base, attempts);
            let full = base
                .saturating_mul(1 << (attempts.clamp(1, 20) - 1))
                .min(Duration::from_secs(3600));
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempts}: {d:?} vs {full:?}"
            );
        }
    }
}
