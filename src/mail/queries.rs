//! The outbox's statements: the claim of due invites, their marks, a lease renewed and a
//! stopping worker's claims given back. The claim lives in `outbox`, one row per queued
//! invite, deleted as the invite leaves the queue; `invites` is written once more only for the
//! invite's outcome, a change of no indexed column (a heap-only update).

/// Claims a batch of due invites for one worker (`$1`) for `$2` seconds, at most `$3`, and
/// reads them from `invites`. A claimed invite is due again when its lease runs out, so the
/// search of the outbox's index stops at the due ones instead of walking every invite in a
/// lease. The batch is picked once (a materialized CTE); its rows are then found by their
/// keys, and its invites by id within the span of their `created_at`, so that only the weeks
/// holding them are searched, whatever plan is cached.
pub const CLAIM: &str = "WITH due AS MATERIALIZED (
             SELECT invite_id, created_at FROM outbox WHERE next_attempt_at <= now()
             ORDER BY next_attempt_at
             LIMIT $3
             FOR UPDATE SKIP LOCKED),
         claimed AS (
             UPDATE outbox SET claimed_by = $1,
                     next_attempt_at = now() + make_interval(secs => $2)
             WHERE invite_id = ANY(ARRAY(SELECT invite_id FROM due)))
     SELECT i.id, i.app_id, i.recipient, i.resource, i.message, i.sender_name, i.accept_url,
             i.attempts, i.created_at,
             EXISTS (SELECT 1 FROM suppressions s
                     WHERE s.app_id = i.app_id AND s.recipient = i.recipient) AS unsubscribed
     FROM invites i
     WHERE i.id = ANY(ARRAY(SELECT invite_id FROM due))
         AND i.created_at BETWEEN (SELECT min(created_at) FROM due)
             AND (SELECT max(created_at) FROM due)";

/// Takes invites (`$1`, written from `$3` to `$4`) claimed by worker `$2` out of the outbox,
/// for the statements below to record their outcome.
macro_rules! leaving {
    ($outcome:literal) => {
        concat!(
            "WITH gone AS (
                 DELETE FROM outbox WHERE invite_id = ANY($1) AND claimed_by = $2
                 RETURNING invite_id)
             UPDATE invites SET ",
            $outcome,
            " WHERE id = ANY($1) AND created_at BETWEEN $3 AND $4
                 AND id IN (SELECT invite_id FROM gone)"
        )
    };
}

/// Marks invites (`$1`, written from `$3` to `$4`) that worker `$2` delivered.
pub const MARK_SENT: &str =
    leaving!("status = 'sent', sent_at = now(), attempts = attempts + 1, last_error = NULL");

/// Suppresses invites (`$1`, written from `$3` to `$4`) of worker `$2` whose recipients
/// unsubscribed.
pub const SUPPRESS: &str = leaving!(
    "status = 'suppressed', decision = decision || '{\"suppressed\": \"unsubscribed\"}'::jsonb"
);

/// Extends worker `$2`'s lease on invites (`$1`) still being sent by `$3` seconds, so that no
/// other worker takes them over while their sends are under way.
pub(super) const RENEW: &str =
    "UPDATE outbox SET next_attempt_at = now() + make_interval(secs => $3)
     WHERE invite_id = ANY($1) AND claimed_by = $2";

/// Releases what a stopping worker (`$1`) claimed and did not send, for the other instances.
pub(super) const RELEASE: &str =
    "UPDATE outbox SET claimed_by = NULL, next_attempt_at = now() WHERE claimed_by = $1";

/// The outbox's depth and the age of its oldest invite in seconds, read from its own table.
pub const OUTBOX_STATE: &str = "SELECT count(*),
         COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) FROM outbox";
