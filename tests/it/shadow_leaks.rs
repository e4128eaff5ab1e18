//! A shadow-banned sender must learn nothing from the answers: not past the held cap, not from
//! a repeated request.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};

/// Past the held cap, a banned sender's repeated key gets its first id and another body with
/// the same key a 422, exactly as a good sender's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_beyond_the_held_cap_is_the_same_as_for_anyone() {
    let stage = Stage::start_with(
        "heldcap",
        &["INSERT INTO senders (app_id, id, state) VALUES (1, 'banned', 'shadow_banned')"],
        |cfg| cfg.held_cap = 2,
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for sender in ["good", "banned"] {
        for n in 0..4 {
            let body = json!({"sender_id": sender, "recipient": format!("r{n}@example.com")});
            let key = format!("{sender}-{n}");
            let (status, first) = api.send_keyed(&key, &body).await;
            assert_eq!(status, StatusCode::OK);
            let (status, again) = api.send_keyed(&key, &body).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(
                again, first,
                "{sender}, invite {n}: the same key answers the first id"
            );
            let other = json!({"sender_id": sender, "recipient": "someone-else@example.com"});
            let (status, _) = api.send_keyed(&key, &other).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{sender}, invite {n}: the same key with another body"
            );
        }
    }
    let (stored, overflow): (i64, i64) =
        sqlx::query_as("SELECT held_stored, held_overflow FROM senders WHERE id = 'banned'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!(
        (stored, overflow),
        (2, 2),
        "the cap still bounds what is kept"
    );
    let kept_text: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'banned' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held");
    assert_eq!(kept_text, 2);
}
