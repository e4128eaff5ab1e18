//! Slow clients cannot hold connections: headers and invite bodies must arrive in time.

use std::time::Duration;

use crate::support::app::{api_key, config, migrated};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes the connection or `limit` passes; returns what came.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&got).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_slow_bodies_are_cut_off() {
    let (db, pool) = migrated("slow", &[]).await;
    let key = api_key(&pool).await;
    let mut cfg = config(&db, None);
    cfg.read_timeout_ms = 500;
    let app = sendguard::start(&cfg).await.expect("start");

    // Headers that never finish: the connection is closed.
    let mut slow = TcpStream::connect(app.addr).await.expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .expect("write");
    let closed = read_until_closed(&mut slow, Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "a connection with unfinished headers must be closed"
    );

    // A body that never finishes: 408 as a problem.
    let mut slow = TcpStream::connect(app.addr).await.expect("connect");
    let head = format!(
        "POST /api/v1/invites HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"sender_id\":"
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let answer = read_until_closed(&mut slow, Duration::from_secs(5))
        .await
        .expect("an answer within the limit");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");

    // A prompt client is served as usual.
    let health = reqwest::get(format!("http://{}/healthz", app.addr))
        .await
        .expect("healthz");
    assert!(health.status().is_success());
}
