//! The outbox's statements on `invites`: the claim of due invites, their marks, a lease
//! renewed and a stopping worker's claims given back.

/// Claims a batch of due invites for one worker (`$1`) for `$2` seconds, at most `$3`. The
/// batch is picked once (a materialized CTE), then updated by id within the span of its
/// `created_at`, so that only the weeks holding it are searched, whatever plan is cached. A
/// claimed invite (here, or written claimed by the writer) is due again when its lease runs
/// out, so the search of the outbox's index stops at the due ones instead of walking every
/// invite in a lease.
pub const CLAIM: &str = "WITH due AS MATERIALIZED (
             SELECT id, created_at FROM invites
             WHERE status = 'queued' AND next_attempt_at <= now()
               AND (claimed_until IS NULL OR claimed_until < now())
             ORDER BY next_attempt_at
             LIMIT $3
             FOR UPDATE SKIP LOCKED)
         UPDATE invites SET claimed_by = $1, claimed_until = now() + make_interval(secs => $2),
                 next_attempt_at = now() + make_interval(secs => $2)
             WHERE id = ANY(ARRAY(SELECT id FROM due))
               AND created_at BETWEEN (SELECT min(created_at) FROM due)
                   AND (SELECT max(created_at) FROM due)
             RETURNING id, app_id, recipient, resource, message, sender_name, accept_url,
                 attempts, created_at,
                 EXISTS (SELECT 1 FROM suppressions s
                         WHERE s.app_id = invites.app_id AND s.recipient = invites.recipient)
                     AS unsubscribed";

/// Marks invites (`$1`, written from `$3` to `$4`) that worker `$2` delivered.
pub const MARK_SENT: &str = "UPDATE invites SET status = 'sent', sent_at = now(),
         attempts = attempts + 1, last_error = NULL, next_attempt_at = NULL,
         claimed_by = NULL, claimed_until = NULL
     WHERE id = ANY($1) AND claimed_by = $2 AND created_at BETWEEN $3 AND $4";

/// Suppresses invites (`$1`, written from `$3` to `$4`) of worker `$2` whose recipients
/// unsubscribed.
pub const SUPPRESS: &str = "UPDATE invites SET status = 'suppressed',
         decision = decision || '{\"suppressed\": \"unsubscribed\"}'::jsonb,
         next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL
     WHERE id = ANY($1) AND claimed_by = $2 AND created_at BETWEEN $3 AND $4";

/// Extends worker `$2`'s lease on invites (`$1`, written from `$3` to `$4`) still being sent by
/// `$5` seconds, so that no other worker takes them over while their sends are under way.
pub(super) const RENEW: &str =
    "UPDATE invites SET claimed_until = now() + make_interval(secs => $5),
         next_attempt_at = now() + make_interval(secs => $5)
     WHERE id = ANY($1) AND claimed_by = $2 AND created_at BETWEEN $3 AND $4";

/// Releases what a stopping worker (`$1`) claimed and did not send, for the other instances.
pub(super) const RELEASE: &str = "UPDATE invites SET claimed_by = NULL, claimed_until = NULL,
         next_attempt_at = now()
     WHERE status = 'queued' AND claimed_by = $1";
