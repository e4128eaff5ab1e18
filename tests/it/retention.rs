//! Old invites, decision records and audit entries are removed in batches; nothing still
//! waiting (queued, deferred, held for review) goes, whatever its age.

use std::time::Duration;

use crate::support::app::migrated;
use sendguard::retention::{Retention, Swept};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_final_rows_go_in_batches_and_waiting_ones_stay() {
    let (_db, pool) = migrated(
        "retention",
        &[
            "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('k', '\\x00', 1)",
            "INSERT INTO senders (app_id, id) VALUES (1, 's')",
            // For each status: 5 invites 40 days old and 5 from today.
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 status, decision, created_at)
             SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, 's', 'r@example.com',
                 'example.com', status, '{}', now() - age * interval '1 day'
             FROM unnest(ARRAY['queued', 'sent', 'failed', 'held', 'suppressed', 'discarded',
                               'deferred']) status,
                  unnest(ARRAY[40, 0]) age, generate_series(1, 5)",
            "INSERT INTO audit_log (actor, action, at)
             SELECT 'system', 'shadow_ban', now() - age * interval '1 day'
             FROM unnest(ARRAY[40, 0]) age, generate_series(1, 12)",
        ],
    )
    .await;
    let retention = Retention {
        pool: pool.clone(),
        metrics: Default::default(),
        days: 30,
        // Smaller than what is to go: several batches.
        batch: 4,
        pause: Duration::from_millis(1),
    };
    let swept = retention.sweep().await.expect("sweep");
    assert_eq!(
        swept,
        Swept {
            invites: 4 * 5,
            audit_entries: 12
        }
    );
    let left: Vec<(String, bool, i64)> = sqlx::query_as(
        "SELECT status, created_at < now() - interval '30 days', count(*) FROM invites
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("left");
    let mut expected = Vec::new();
    for status in [
        "deferred",
        "discarded",
        "failed",
        "held",
        "queued",
        "sent",
        "suppressed",
    ] {
        expected.push((status.to_owned(), false, 5));
        if ["deferred", "held", "queued"].contains(&status) {
            expected.push((status.to_owned(), true, 5));
        }
    }
    assert_eq!(left, expected);
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
}
