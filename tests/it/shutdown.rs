//! SIGTERM in the middle of a burst: every invite answered 200 is in the database afterwards,
//! and the process exits 0 within a bounded time.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::app::{api_key, migrated};
use crate::support::serve::ServeProcess;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_requests_in_flight_and_loses_no_accepted_invite() {
    let (db, pool) = migrated("sigterm", &[]).await;
    let key = api_key(&pool).await;
    let mail_dir = std::env::temp_dir().join(format!("sendguard-sigterm-{}", std::process::id()));
    let mut serve = ServeProcess::start(
        &db.url,
        crate::support::unique_prefix("term").as_str(),
        &[("SENDGUARD_MAIL_DIR", mail_dir.display().to_string())],
    )
    .await;
    let base = serve.base.clone();
    let http = reqwest::Client::new();

    // Eight clients, each sending until the server stops answering (at most 100 each).
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for c in 0..8 {
        let (http, base, key, accepted) =
            (http.clone(), base.clone(), key.clone(), accepted.clone());
        clients.push(tokio::spawn(async move {
            for n in 0..100 {
                let sent = http
                    .post(format!("{base}/api/v1/invites"))
                    .bearer_auth(&key)
                    .json(&json!({"sender_id": format!("c{c}-{n}"), "recipient": format!("t{c}.{n}@example.com")}))
                    .send()
                    .await;
                let Ok(resp) = sent else { break };
                if resp.status() != StatusCode::OK {
                    break;
                }
                let body: Value = resp.json().await.expect("json");
                accepted.lock().await.push(body["id"].as_str().expect("id").to_owned());
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Command::new("kill")
        .args(["-TERM", &serve.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(signalled.success());
    let stopping = Instant::now();
    for client in clients {
        client.await.expect("client");
    }
    let status = loop {
        if let Some(status) = serve.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            stopping.elapsed() < Duration::from_secs(20),
            "serve did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "serve exited with {status}");

    let accepted = accepted.lock().await.clone();
    assert!(
        !accepted.is_empty(),
        "the burst should have had answers before the signal"
    );
    assert!(
        accepted.len() < 800,
        "the signal should come in the middle of the burst"
    );
    let ids: Vec<uuid::Uuid> = accepted
        .iter()
        .map(|id| id.parse().expect("uuid"))
        .collect();
    let found: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE id = ANY($1)")
        .bind(&ids)
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(
        found as usize,
        ids.len(),
        "every invite answered 200 is recorded"
    );
    let _ = std::fs::remove_dir_all(&mail_dir);
}
