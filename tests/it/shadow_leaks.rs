//! A shadow-banned sender must learn nothing from the answers: not past the held cap, not from
//! a repeated request, not from the time a held invite takes to be written.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, connections_down_to};

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

/// Held invites are written as queued ones are, many to a statement (a statement of their own
/// would answer sooner, and tell the sender): a flood from one banned sender updates its row
/// once per batch, not once per invite, and the cap still keeps exactly what it allows, with
/// two writers committing batches at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_invites_share_the_batch_statement_and_the_cap_holds() {
    const INVITES: usize = 100;
    const CAP: i64 = 5;
    let stage = Stage::start_with(
        "heldbatch",
        &["INSERT INTO senders (app_id, id, state) VALUES (1, 'banned', 'shadow_banned')"],
        |cfg| {
            cfg.held_cap = CAP;
            cfg.db_writers = 2;
        },
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let sends: Vec<_> = (0..INVITES)
        .map(|n| {
            let api = api.clone();
            tokio::spawn(async move {
                let body = json!({"sender_id": "banned", "recipient": format!("b{n}@example.com")});
                api.send(body).await.0
            })
        })
        .collect();
    for send in sends {
        assert_eq!(send.await.expect("send"), StatusCode::OK);
    }
    let (stored, overflow): (i64, i64) =
        sqlx::query_as("SELECT held_stored, held_overflow FROM senders WHERE id = 'banned'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!((stored, overflow), (CAP, INVITES as i64 - CAP));
    let (held, discarded): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'held'), count(*) FILTER (WHERE status = 'discarded')
         FROM invites WHERE sender_id = 'banned'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("invites");
    assert_eq!((held, discarded), (CAP, INVITES as i64 - CAP));
    // The instance's connections report their counts as they close.
    let Stage { app, pool, db, .. } = stage;
    app.shutdown().await;
    // `close` can return while a connection given back just before is still being checked,
    // which then waits idle in the pool: dropping the pool closes it too.
    pool.close().await;
    drop(pool);
    assert!(
        connections_down_to(&db.name, 0).await,
        "the instance closed its connections"
    );
    let pool = db.pool().await;
    let updates: i64 = sqlx::query_scalar(
        "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'senders'::regclass",
    )
    .fetch_one(&pool)
    .await
    .expect("pg_stat_user_tables");
    println!("{INVITES} held invites, {updates} updates of their sender");
    assert!(
        updates < INVITES as i64,
        "{updates} updates of the sender for {INVITES} held invites: each had a statement"
    );
    pool.close().await;
}
