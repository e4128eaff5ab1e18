//! What a flagging invite leaves behind: the invite goes through the ordinary batched write, and
//! the flag, the sender's new state, the audit entry and the webhook event follow from a durable
//! follow-up. A sender already flagged for a `hold` rule has that flag's count raised, and past
//! the held cap nothing more is announced.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, hold_flags, sender_state, wait_for};
use crate::support::rules;

/// The app has a webhook (on a closed loopback port: events are written, never delivered).
const HOOK: &str = "UPDATE apps SET webhook_url = 'http://127.0.0.1:9/hook' WHERE id = 1";

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Rows of the three tables a flag writes to, about `sender`.
async fn records(pool: &PgPool, sender: &str) -> (i64, i64, i64) {
    let q = format!(
        "SELECT (SELECT count(*) FROM flags WHERE sender_id = '{sender}'),
             (SELECT count(*) FROM webhook_events WHERE payload LIKE '%\"{sender}\"%'),
             (SELECT count(*) FROM audit_log WHERE sender_id = '{sender}')"
    );
    sqlx::query_as(&q).fetch_one(pool).await.expect("records")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_senders_held_links_raise_one_flag_and_announce_up_to_the_cap() {
    let stage = Stage::start_with("holdonce", &[HOOK], |cfg| cfg.held_cap = 3).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for n in 0..20 {
        let (status, _) = api
            .send(
                json!({"sender_id": "linky", "recipient": format!("r{n}@example.com"),
                         "message": "see https://scam.example"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    let held: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM invites WHERE sender_id = 'linky' GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("statuses");
    assert_eq!(
        held,
        [("discarded".to_owned(), 17), ("held".to_owned(), 3)],
        "three held, the rest past the cap"
    );
    // The follow-ups are done within moments; then nothing more comes.
    let flagged = wait_for(Duration::from_secs(10), || async {
        records(&stage.pool, "linky").await.0 >= 1
    })
    .await;
    assert!(flagged, "the sender is flagged");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (flags, events, audit) = records(&stage.pool, "linky").await;
    eprintln!("20 held attempts wrote {flags} flags, {events} webhook events, {audit} audit rows");
    assert_eq!(flags, 1, "one open flag for the rule, not one per invite");
    assert!(
        events <= 3,
        "{events} invite.held events for 3 invites held"
    );
    assert_eq!(audit, 1, "one audit row, when the flag was raised");
    let counted = wait_for(Duration::from_secs(10), || async {
        count(
            &stage.pool,
            "SELECT count FROM flags WHERE sender_id = 'linky'",
        )
        .await
            == 20
    })
    .await;
    assert!(counted, "the flag counts every attempt");
}

/// The invite that trips a shadow ban is written by the batch statement, like its neighbours:
/// it is answered while a lock on `flags` holds every flag write. The flag, the state, the
/// audit entry and the event follow once the lock goes, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tripping_invite_is_answered_before_its_flag_is_written() {
    let stage = Stage::start_prepared(
        "tripbatched",
        async |pool| {
            sqlx::query(HOOK).execute(pool).await.expect("hook");
            rules::set(pool, "sender-hourly", |r| r.limit = 3).await;
        },
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for n in 0..3 {
        api.accepted("burst", &format!("b{n}@example.com")).await;
    }
    let lock = hold_flags(&stage.pool).await;
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        api.send(json!({"sender_id": "burst", "recipient": "b3@example.com"})),
    )
    .await;
    assert!(
        matches!(answered, Ok((StatusCode::OK, Some(_)))),
        "the tripping invite waited for its flag: {answered:?}"
    );
    lock.commit().await.expect("release flags");
    let banned = wait_for(Duration::from_secs(10), || async {
        sender_state(&stage.pool, "burst").await == "shadow_banned"
    })
    .await;
    assert!(banned, "the follow-up shadow-bans the sender");
    let (_, id) = api
        .send(json!({"sender_id": "burst", "recipient": "b4@example.com"}))
        .await;
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1::uuid")
        .bind(id.expect("id"))
        .fetch_one(&stage.pool)
        .await
        .expect("status");
    assert_eq!(status, "held", "a later invite is held");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        records(&stage.pool, "burst").await,
        (1, 1, 1),
        "one flag, one event, one audit row"
    );
    let held = count(
        &stage.pool,
        "SELECT count(*) FROM invites WHERE sender_id = 'burst' AND status = 'held'",
    )
    .await;
    assert_eq!(held, 2);
}

/// A follow-up committed with its invite by an instance that stopped before doing it is done
/// by the next instance to start, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_left_behind_is_done_once_by_the_next_instance() {
    let stage = Stage::start(
        "followupleft",
        &[
            HOOK,
            "INSERT INTO senders (app_id, id, held_stored) VALUES (1, 'left', 1)",
            "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('k', '\\x00', 1)",
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 status, decision)
             VALUES ('00000000-0000-7000-8000-000000000061', (SELECT id FROM api_keys), 1,
                 'left', 'r@example.com', 'example.com', 'held', '{}')",
            "INSERT INTO pending_flags (app_id, sender_id, invite_id, version, over_cap, breach)
             VALUES (1, 'left', '00000000-0000-7000-8000-000000000061', 1, false,
                 '{\"rule_id\": null, \"rule_name\": \"sender-hourly\", \"signal\": \"invites\",
                   \"action\": \"shadow_ban\", \"observed\": 61, \"limit\": 60,
                   \"window_secs\": 3600}')",
        ],
    )
    .await;
    let done = wait_for(Duration::from_secs(10), || async {
        sender_state(&stage.pool, "left").await == "shadow_banned"
            && count(&stage.pool, "SELECT count(*) FROM pending_flags").await == 0
    })
    .await;
    assert!(done, "the follow-up left behind is done");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        records(&stage.pool, "left").await,
        (1, 1, 1),
        "one flag, one event, one audit row"
    );
    let event = count(
        &stage.pool,
        "SELECT count(*) FROM webhook_events WHERE type = 'sender.shadow_banned'",
    )
    .await;
    assert_eq!(event, 1);
}
