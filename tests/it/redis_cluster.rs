//! The service on a Redis Cluster of its own: decisions follow a slot that moves to another
//! master in the middle of the traffic, the limit stays exact and no invite is lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, wait_for};
use crate::support::redis_cluster::RedisCluster;
use crate::support::rules;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_a_slot_that_moves_during_traffic() {
    let cluster = RedisCluster::start().await;
    let url = cluster.url();
    let stage = Stage::start_prepared(
        "cluster",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 20).await,
        |cfg| cfg.redis_url = url,
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);

    // Every key of the sender (of the app `default`, id 1) carries the hash tag `{sender:1:mover}`.
    let slot: u16 = cluster
        .node_query(
            cluster.ports[0],
            redis::cmd("CLUSTER").arg("KEYSLOT").arg("{sender:1:mover}"),
        )
        .await
        .expect("KEYSLOT");
    let from = cluster.owner_of(slot).await;
    let to = *cluster
        .ports
        .iter()
        .find(|p| **p != from)
        .expect("another master");

    let answered = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let (api, answered) = (api.clone(), answered.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for n in 0..90 {
                let sender = if n % 5 == 4 { "bystander" } else { "mover" };
                let resp = api
                    .invite(json!({"sender_id": sender, "recipient": format!("r{n}@example.com")}))
                    .await;
                statuses.push(resp.status().as_u16());
                answered.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
            statuses
        })
    };
    // Move the slot once the sender is well into its hour, while invites keep coming.
    let started = wait_for(Duration::from_secs(20), || async {
        answered.load(Ordering::SeqCst) >= 20
    })
    .await;
    assert!(started, "traffic did not start");
    cluster.move_slot(slot, to).await;
    let moved_at = answered.load(Ordering::SeqCst);
    let statuses = traffic.await.expect("traffic");
    assert!(
        moved_at < 90,
        "the move finished after the traffic ({moved_at} answers): nothing was tested"
    );

    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(cluster.owner_of(slot).await, to);
    let keys_there: i64 = cluster
        .node_query(to, redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot))
        .await
        .expect("COUNTKEYSINSLOT");
    assert!(keys_there > 0, "the sender's counters moved with the slot");

    // 72 invites from the mover at a limit of 20: exactly 20 sent, 52 held, whatever node
    // counted them; every invite recorded and decided (none left deferred); the bystander's 18
    // all sent.
    assert_eq!(stage.settle().await, 38);
    let counts: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT sender_id, status, count(*) FROM invites GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("counts");
    let counts: Vec<(&str, &str, i64)> = counts
        .iter()
        .map(|(s, st, n)| (s.as_str(), st.as_str(), *n))
        .collect();
    assert_eq!(
        counts,
        [
            ("bystander", "sent", 18),
            ("mover", "held", 52),
            ("mover", "sent", 20)
        ]
    );
    let (observed, limit): (i64, i64) =
        sqlx::query_as("SELECT observed, limit_count FROM flags WHERE sender_id = 'mover'")
            .fetch_one(&stage.pool)
            .await
            .expect("one flag");
    assert_eq!((observed, limit), (21, 20));
}
