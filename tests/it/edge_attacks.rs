//! Attacks on the service's own edges, done for real on loopback: idle sockets that hold
//! requests open, half-sent HTTP/2 prefaces, floods of bad keys, and what the public port tells.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};
use crate::support::proxy::Proxy;

/// A connection from `source` (any 127.0.0.x is loopback) to `to`; `None` when refused or not
/// accepted within a second.
async fn connect_from(source: &str, to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{source}:0").parse().expect("source address"))
        .expect("bind the source address");
    tokio::time::timeout(Duration::from_secs(1), socket.connect(to))
        .await
        .ok()?
        .ok()
}

/// Whether the server has closed the connection (or answered and closed it) by `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Whether the server has closed the connection already (a read would not wait).
async fn closed_now(stream: &mut TcpStream) -> bool {
    closed_within(stream, Duration::from_millis(20)).await
}

/// 1,100 dashboard logins whose body never comes, from one client address: the API keeps its
/// budget (invites from another address answer 200 while the stalled requests still hang),
/// /healthz answers, and every stalled connection is closed by its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_dashboard_requests_leave_the_api_its_budget() {
    sendguard::startup::raise_open_file_limit();
    let deadline = Duration::from_secs(4);
    let stage = Stage::start_with("stall", &[], |cfg| {
        cfg.read_timeout_ms = deadline.as_millis() as u64;
    })
    .await;
    let addr = stage.app.addr;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);

    let mut stalled = Vec::new();
    for _ in 0..1100 {
        let Some(mut stream) = connect_from("127.0.0.2", addr).await else {
            continue;
        };
        let head = "POST /admin/login HTTP/1.1\r\nHost: sendguard\r\n\
                    Content-Type: application/x-www-form-urlencoded\r\n\
                    Content-Length: 200\r\n\r\ncsrf=";
        if stream.write_all(head.as_bytes()).await.is_ok() {
            stalled.push(stream);
        }
    }
    assert!(
        !stalled.is_empty(),
        "no connection from 127.0.0.2 was accepted"
    );

    for n in 0..20 {
        let (status, _) = api
            .send(
                json!({"sender_id": format!("calm{n}"), "recipient": format!("c{n}@example.com")}),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "invite {n} while the dashboard is stalled"
        );
    }
    let health = api
        .http
        .get(format!("{}/healthz", stage.base()))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    // Those invites did not wait for the stall to clear: some stalled requests still hang.
    let mut still_open = 0;
    for stream in &mut stalled {
        if !closed_now(stream).await {
            still_open += 1;
        }
    }
    assert!(
        still_open > 0,
        "the stalled requests were over before the invites were sent"
    );

    // Every stalled connection is closed by its deadline (with a margin for a busy machine).
    let mut lingering = 0;
    for stream in &mut stalled {
        if !closed_within(stream, deadline * 2 + Duration::from_secs(2)).await {
            lingering += 1;
        }
    }
    assert_eq!(lingering, 0, "stalled connections outlived their deadline");
}

/// One client address cannot hold more than its share of connections: beyond the cap, new
/// connections are closed at once, while another address is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_connection() {
    sendguard::startup::raise_open_file_limit();
    let stage = Stage::start_with("percap", &[], |cfg| cfg.max_connections_per_client = 20).await;
    let addr = stage.app.addr;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(
            connect_from("127.0.0.3", addr)
                .await
                .expect("within the cap"),
        );
    }
    // The server sees them all before the next one is judged.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = connect_from("127.0.0.3", addr)
        .await
        .expect("the TCP handshake");
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "a connection beyond the cap is closed at once"
    );
    let health = reqwest::get(format!("{}/healthz", stage.base()))
        .await
        .expect("healthz from 127.0.0.1");
    assert_eq!(health.status(), StatusCode::OK);
    drop(held);
}

/// A connection that sends part of an HTTP/2 preface and stops is closed by the header
/// deadline, like any other half-sent request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_http2_preface_is_cut_off() {
    let stage = Stage::start_with("preface", &[], |cfg| cfg.read_timeout_ms = 500).await;
    for partial in [&b"PRI * HTTP/2.0\r\n\r\nSM\r\n"[..], &b"PRI * HTT"[..]] {
        let mut stream = TcpStream::connect(stage.app.addr).await.expect("connect");
        stream.write_all(partial).await.expect("write");
        assert!(
            closed_within(&mut stream, Duration::from_secs(5)).await,
            "{:?} held the connection",
            String::from_utf8_lossy(partial)
        );
    }
}

/// A key that cannot be one (wrong shape) is refused without asking the database: with
/// Postgres cut off it still gets 401, where a well-formed unknown key gets 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_key_is_refused_without_a_query() {
    let (db, pool) = crate::support::app::migrated("keyshape", &[]).await;
    drop(pool);
    let proxy = Proxy::start("127.0.0.1:5432".parse().expect("address")).await;
    let mut cfg = crate::support::app::config(&db, None);
    cfg.database.database_url = format!("postgres://postgres@127.0.0.1:{}/{}", proxy.port, db.name);
    let app = sendguard::start(&cfg).await.expect("start");
    proxy.cut();
    let body = json!({"sender_id": "x", "recipient": "x@example.com"});
    let with_key = |key: &str| {
        reqwest::Client::new()
            .post(format!("http://{}/api/v1/invites", app.addr))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    for malformed in ["guess", "sg_short", &format!("sg_{}", "z".repeat(64))] {
        let resp = with_key(malformed).await.expect("answer");
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{malformed}");
    }
    let unknown = with_key(&format!("sg_{}", "ab".repeat(32)))
        .await
        .expect("answer");
    assert_eq!(
        unknown.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a well-formed key must be looked up"
    );
}

/// A flood of unknown keys while key lookups are slow (the keys table locked) cannot take the
/// connection pool: invites with a known key are still recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_keys_leaves_the_pool_to_invites() {
    // Key lookups are made slow by a lock on the keys table; invites do not read that table
    // when they are written (they have no foreign key to it).
    let stage = Stage::start("keyflood", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    // The known key is cached after its use (twice: an instance empties its caches once when
    // its change listener connects at start).
    for n in 0..2 {
        api.accepted("warm", &format!("warm{n}@example.com")).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut lock = stage.pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let flood: Vec<_> = (0..200)
        .map(|n| {
            let url = api.url();
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .bearer_auth(format!("sg_{n:064x}"))
                    .json(&json!({"sender_id": "f", "recipient": "f@example.com"}))
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for n in 0..5 {
        let body = json!({"sender_id": "known", "recipient": format!("k{n}@example.com")});
        let (status, _) = tokio::time::timeout(Duration::from_secs(10), api.send(body))
            .await
            .expect("an answer during the flood");
        assert_eq!(status, StatusCode::OK, "invite {n} during the flood");
    }
    lock.rollback().await.expect("unlock");
    for answer in flood {
        let status = answer.await.expect("task").expect("an answer");
        assert!(
            [StatusCode::UNAUTHORIZED, StatusCode::SERVICE_UNAVAILABLE].contains(&status),
            "{status}"
        );
    }
}

/// The public port says nothing about counts: /metrics is 404 there and served on its own
/// listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_not_on_the_public_port() {
    let stage = Stage::start("metricsport", &[]).await;
    let public = reqwest::get(format!("{}/metrics", stage.base()))
        .await
        .expect("public");
    assert_eq!(public.status(), StatusCode::NOT_FOUND);
    let private = reqwest::get(format!("http://{}/metrics", stage.app.metrics_addr))
        .await
        .expect("metrics listener");
    assert_eq!(private.status(), StatusCode::OK);
    let text = private.text().await.expect("text");
    assert!(
        text.contains("# TYPE sendguard_smtp_failures counter\n"),
        "{text}"
    );
}
