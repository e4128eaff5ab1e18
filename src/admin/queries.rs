//! The dashboard's queries on tables that grow without bound, in one place so that
//! `tests/explain.rs` can check every one uses an index on a database of a million invites.

/// Overview: invites of the last 24 hours by status.
pub const STATUSES_24H: &str = "SELECT status, count(*) FROM invites
     WHERE created_at > now() - interval '24 hours'
     GROUP BY status ORDER BY status";

/// Overview: senders awaiting review.
pub const AWAITING: &str = "SELECT count(*) FROM senders WHERE state = 'shadow_banned'";

/// Overview: the chart, invites per hour over the last 24 hours.
pub const HOURLY: &str = "SELECT date_trunc('hour', created_at),
            count(*) FILTER (WHERE status = 'sent'),
            count(*) FILTER (WHERE status IN ('held', 'suppressed'))
     FROM invites WHERE created_at > date_trunc('hour', now()) - interval '23 hours'
     GROUP BY 1";

/// The audit log, newest first, optionally of one admin (`$1`) or sender (`$2`).
pub const AUDIT_PAGE: &str = "SELECT at, actor, action, sender_id, detail, note FROM audit_log
     WHERE ($1 = '' OR actor = $1) AND ($2 = '' OR sender_id = $2)
     ORDER BY at DESC, id DESC LIMIT $3 OFFSET $4";

/// The review queue: shadow-banned senders, newest flag first, with what the page shows.
pub const QUEUE: &str = "SELECT s.id, s.version, f.rule_name, f.observed, f.limit_count,
            (SELECT min(created_at) FROM invites i WHERE i.sender_id = s.id),
            (SELECT max(created_at) FROM invites i WHERE i.sender_id = s.id),
            s.held_stored + s.held_overflow,
            (SELECT string_agg(d, ', ') FROM (
                SELECT DISTINCT recipient_domain AS d FROM invites i
                WHERE i.sender_id = s.id AND i.status = 'held' ORDER BY 1 LIMIT 3) x)
     FROM senders s
     LEFT JOIN LATERAL (
         SELECT rule_name, observed, limit_count, created_at FROM flags
         WHERE sender_id = s.id ORDER BY created_at DESC LIMIT 1) f ON true
     WHERE s.state = 'shadow_banned'
     ORDER BY f.created_at DESC NULLS LAST, s.id
     LIMIT $1 OFFSET $2";

/// A sender's invites, newest first.
pub const SENDER_INVITES: &str = "SELECT created_at, recipient, status, decision FROM invites
     WHERE sender_id = $1 ORDER BY created_at DESC, id LIMIT $2 OFFSET $3";

/// A sender's history.
pub const SENDER_AUDIT: &str = "SELECT at, actor, action, note FROM audit_log
     WHERE sender_id = $1 ORDER BY at DESC, id DESC LIMIT 100";
