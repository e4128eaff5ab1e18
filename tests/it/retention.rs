//! History past the retention goes: whole weeks of invites are dropped, rows outside the weeks,
//! audit entries and idempotency keys in batches; nothing still waiting (queued, deferred, held
//! for review) goes, whatever its age.

use std::time::Duration;

use crate::support::app::migrated;
use sendguard::retention::{Retention, Swept};

const STATUSES: [&str; 7] = [
    "deferred",
    "discarded",
    "failed",
    "held",
    "queued",
    "sent",
    "suppressed",
];

/// The invites still waiting for something, with their times.
async fn waiting(pool: &sqlx::PgPool) -> Vec<(uuid::Uuid, chrono::DateTime<chrono::Utc>)> {
    sqlx::query_as(
        "SELECT id, created_at FROM invites
         WHERE status IN ('queued', 'deferred', 'held') ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("waiting")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_weeks_are_dropped_and_waiting_invites_stay() {
    let (_db, pool) = migrated(
        "retention",
        &[
            "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('k', '\\x00', 1)",
            "INSERT INTO senders (app_id, id) VALUES (1, 's')",
            // Weeks from ten weeks ago, as an installation that has run that long has them.
            "SELECT sendguard_invite_weeks(now() - interval '70 days', 2)",
            // For each status: 5 invites 40 days old (in a week of their own), 5 from today,
            // and 3 from 400 days ago (before any week: in the default partition).
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 status, decision, created_at)
             SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 's', 'r@example.com',
                 'example.com', status, '{}', now() - age * interval '1 day'
             FROM unnest(ARRAY['queued', 'sent', 'failed', 'held', 'suppressed', 'discarded',
                               'deferred']) status,
                  unnest(ARRAY[40, 0]) age, generate_series(1, 5)",
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 status, decision, created_at)
             SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 's', 'r@example.com',
                 'example.com', status, '{}', now() - interval '400 days'
             FROM unnest(ARRAY['queued', 'sent', 'failed', 'held', 'suppressed', 'discarded',
                               'deferred']) status, generate_series(1, 3)",
            "INSERT INTO audit_log (actor, action, at)
             SELECT 'system', 'shadow_ban', now() - age * interval '1 day'
             FROM unnest(ARRAY[40, 0]) age, generate_series(1, 12)",
            "INSERT INTO idempotency_keys (api_key_id, key, invite_id, request_hash, created_at)
             SELECT (SELECT id FROM api_keys), 'k' || n || '-' || age, gen_random_uuid(), '\\x00',
                 now() - age * interval '1 day'
             FROM unnest(ARRAY[40, 0]) age, generate_series(1, 6) n",
        ],
    )
    .await;
    let week_of_40_days_ago: String = sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM invites
         WHERE created_at < now() - interval '39 days' AND created_at > now() - interval '41 days'
         LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .expect("week");
    assert!(
        week_of_40_days_ago.starts_with("invites_w"),
        "{week_of_40_days_ago}"
    );
    let waiting_before = waiting(&pool).await;

    let retention = Retention {
        pool: pool.clone(),
        metrics: Default::default(),
        days: 30,
        // Smaller than what is to go from the default partition: several batches.
        batch: 4,
        pause: Duration::from_millis(1),
    };
    let swept = retention.sweep().await.expect("sweep");
    // Weeks that ended more than 30 days ago: those from 70 to about 31 days ago.
    assert!(swept.weeks >= 5, "{swept:?}");
    assert_eq!(swept.invites, 4 * 5 + 4 * 3, "{swept:?}");
    assert_eq!(swept.audit_entries, 12);
    assert_eq!(swept.keys, 6);
    let gone: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&week_of_40_days_ago)
        .fetch_one(&pool)
        .await
        .expect("regclass");
    assert_eq!(gone, None, "the week of 40 days ago is dropped");

    let left: Vec<(String, bool, i64)> = sqlx::query_as(
        "SELECT status, created_at < now() - interval '30 days', count(*) FROM invites
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("left");
    let mut expected = Vec::new();
    for status in STATUSES {
        expected.push((status.to_owned(), false, 5));
        if ["deferred", "held", "queued"].contains(&status) {
            expected.push((status.to_owned(), true, 5 + 3));
        }
    }
    assert_eq!(left, expected);
    let waiting_after = waiting(&pool).await;
    assert_eq!(
        waiting_after, waiting_before,
        "every waiting invite kept, as it was"
    );
    let audit: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(&pool)
        .await
        .expect("audit");
    assert_eq!(audit, 12);
    assert_eq!(
        retention.sweep().await.expect("again"),
        Swept::default(),
        "a second sweep finds nothing"
    );
    // The weeks ahead exist.
    let ahead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'invites'::regclass
             AND CASE WHEN c.relname ~ '^invites_w[0-9]{8}$'
                 THEN to_date(substr(c.relname, 10), 'YYYYMMDD') > now() ELSE false END",
    )
    .fetch_one(&pool)
    .await
    .expect("weeks ahead");
    assert!(ahead >= 2, "{ahead} weeks ahead");
}

/// Webhook events delivered or given up, decided flags and outcomes go past the retention like
/// invites; what backs a ban or a review still open stays: flags of senders shadow-banned or
/// banned, open flags, events still to deliver, outcomes of banned senders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_events_decided_flags_and_outcomes_go_and_what_backs_a_ban_stays() {
    let old = "now() - interval '40 days'";
    let flag = |sender: &str, closed: &str| {
        format!(
            "INSERT INTO flags (app_id, sender_id, rule_name, observed, limit_count, window_secs,
                 created_at, last_seen_at, closed_at)
             VALUES (1, '{sender}', 'r', 2, 1, 60, {old}, {old}, {closed})"
        )
    };
    let event = |delivered: &str, gave_up: &str| {
        format!(
            "INSERT INTO webhook_events (id, app_id, type, payload, created_at, delivered_at,
                 gave_up_at)
             VALUES (gen_random_uuid(), 1, 'invite.held', '{{}}', {old}, {delivered}, {gave_up})"
        )
    };
    let outcome = |sender: &str| {
        format!(
            "INSERT INTO outcomes (invite_id, type, app_id, sender_id, at)
             VALUES (gen_random_uuid(), 'bounce', 1, '{sender}', {old})"
        )
    };
    let sql = [
        "INSERT INTO senders (app_id, id, state) VALUES (1, 'lifted', 'active'),
             (1, 'muted', 'shadow_banned'), (1, 'gone', 'banned')"
            .to_owned(),
        flag("lifted", old),
        flag("lifted", "NULL"),
        flag("muted", old),
        flag("gone", old),
        event(old, "NULL"),
        event("NULL", old),
        event("NULL", "NULL"),
        "INSERT INTO webhook_events (id, app_id, type, payload, delivered_at)
         VALUES (gen_random_uuid(), 1, 'invite.held', '{}', now())"
            .to_owned(),
        outcome("lifted"),
        outcome("gone"),
        "INSERT INTO outcomes (invite_id, type, app_id, sender_id)
         VALUES (gen_random_uuid(), 'bounce', 1, 'lifted')"
            .to_owned(),
    ];
    let sql: Vec<&str> = sql.iter().map(String::as_str).collect();
    let (_db, pool) = migrated("retentionflags", &sql).await;
    let retention = Retention {
        pool: pool.clone(),
        metrics: Default::default(),
        days: 30,
        batch: 1,
        pause: Duration::from_millis(1),
    };
    let swept = retention.sweep().await.expect("sweep");
    assert_eq!(
        (swept.webhook_events, swept.flags, swept.outcomes),
        (2, 1, 1),
        "{swept:?}"
    );
    let left: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM webhook_events),
             (SELECT count(*) FROM flags WHERE sender_id = 'lifted' AND closed_at IS NULL),
             (SELECT count(*) FROM flags WHERE sender_id IN ('muted', 'gone')),
             (SELECT count(*) FROM outcomes)",
    )
    .fetch_one(&pool)
    .await
    .expect("left");
    assert_eq!(
        left,
        (2, 1, 2, 2),
        "events pending or recent, the open flag, the banned senders' flags, outcomes recent or of a ban"
    );
    assert_eq!(retention.sweep().await.expect("again"), Swept::default());
}
