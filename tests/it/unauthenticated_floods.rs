//! Floods of requests that never finish, from callers without a key or on paths that do not
//! exist, done for real on loopback: they cannot take the API, the dashboard or the health
//! checks from anyone else (docs/DESIGN.md §4).

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, app_key, create_app};

/// Client addresses of the flood (all loopback), each within the default cap of 256
/// connections per address: five of them hold more than the API's budget of 1,024, with a
/// margin for a connection the busy machine drops.
const SOURCES: [&str; 5] = [
    "127.0.0.2",
    "127.0.0.3",
    "127.0.0.4",
    "127.0.0.5",
    "127.0.0.6",
];

/// How long a prompt answer may take on a busy machine: only a hang fails it.
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

/// Opens `per_source` connections from each address in `sources` and sends `head` on each:
/// headers that promise a body of 100 bytes, and its first byte. Answers the connections,
/// which stay open for as long as they are held.
async fn hold(to: SocketAddr, sources: &[&str], per_source: usize, head: &str) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for source in sources {
        for _ in 0..per_source {
            let socket = TcpSocket::new_v4().expect("socket");
            socket
                .bind(format!("{source}:0").parse().expect("source address"))
                .expect("bind the source address");
            // A connect whose first SYN was dropped on a busy machine is answered after the
            // kernel's one-second retry: five seconds spare the test's count that flake.
            let Ok(Ok(mut stream)) =
                tokio::time::timeout(Duration::from_secs(5), socket.connect(to)).await
            else {
                continue;
            };
            if stream.write_all(head.as_bytes()).await.is_ok() {
                held.push(stream);
            }
        }
    }
    held
}

/// Lets the server read every head before the requests under test are sent.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

fn half_sent(method_path: &str, authorization: &str) -> String {
    format!(
        "{method_path} HTTP/1.1\r\nHost: sendguard\r\n{authorization}\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    )
}

/// Half-sent invites without a key, 256 from each of five addresses: an invite with a key from
/// another address is answered 200 at once, and so are the health checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_half_sent_invites_leave_the_api_to_callers_with_a_key() {
    sendguard::startup::raise_open_file_limit();
    let stage = Stage::start("keyless", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let head = half_sent("POST /api/v1/invites", "");
    let held = hold(stage.app.addr, &SOURCES, 256, &head).await;
    settle().await;
    assert!(held.len() > 1100, "only {} connections held", held.len());

    let invite = tokio::time::timeout(
        ANSWERED_WITHIN,
        api.send(json!({"sender_id": "calm", "recipient": "calm@example.com"})),
    )
    .await
    .expect("the invite is answered while the flood holds");
    assert_eq!(invite.0, StatusCode::OK, "an invite with a key");
    for probe in ["readyz", "healthz"] {
        let status = tokio::time::timeout(
            ANSWERED_WITHIN,
            api.http.get(format!("{}/{probe}", stage.base())).send(),
        )
        .await
        .expect("answered")
        .expect(probe)
        .status();
        assert_eq!(status, StatusCode::OK, "/{probe} while the flood holds");
    }
    drop(held);
}

/// 64 half-sent posts to a path that does not exist leave `/readyz` and `/healthz` answering
/// 200: unknown paths draw on no budget the health checks need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_leave_the_health_checks_their_budget() {
    let stage = Stage::start("unknownpath", &[]).await;
    let head = half_sent("POST /nonexistent", "");
    let held = hold(stage.app.addr, &SOURCES[..1], 64, &head).await;
    settle().await;
    assert_eq!(held.len(), 64);

    let http = reqwest::Client::new();
    for probe in ["readyz", "healthz"] {
        let status = tokio::time::timeout(
            ANSWERED_WITHIN,
            http.get(format!("{}/{probe}", stage.base())).send(),
        )
        .await
        .expect("answered")
        .expect(probe)
        .status();
        assert_eq!(status, StatusCode::OK, "/{probe} while unknown paths hang");
    }
    drop(held);
}

/// 256 half-sent dashboard logins from one address hold only that address's share of the
/// dashboard: its login page still answers another address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_only_a_share_of_the_dashboard() {
    sendguard::startup::raise_open_file_limit();
    let stage = Stage::start("dashshare", &[]).await;
    let head = "POST /admin/login HTTP/1.1\r\nHost: sendguard\r\n\
                Content-Type: application/x-www-form-urlencoded\r\n\
                Content-Length: 100\r\n\r\nc";
    let held = hold(stage.app.addr, &SOURCES[..1], 256, head).await;
    settle().await;
    assert_eq!(held.len(), 256);

    let status = tokio::time::timeout(
        ANSWERED_WITHIN,
        reqwest::get(format!("{}/admin/login", stage.base())),
    )
    .await
    .expect("answered")
    .expect("login page")
    .status();
    assert_eq!(
        status,
        StatusCode::OK,
        "the login page from another address"
    );
    drop(held);
}

/// One app's key holding 1,280 half-sent invites leaves another app's key its invites:
/// once a key is known, the API's budget is shared out by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_cannot_take_the_api_from_another_app() {
    sendguard::startup::raise_open_file_limit();
    let stage = Stage::start("keyshare", &[]).await;
    create_app(&stage.pool, "other", Default::default()).await;
    let greedy = api_key(&stage.pool).await;
    let other = Api::new(stage.base(), app_key(&stage.pool, "other").await);
    let head = half_sent(
        "POST /api/v1/invites",
        &format!("Authorization: Bearer {greedy}\r\n"),
    );
    let held = hold(stage.app.addr, &SOURCES, 256, &head).await;
    settle().await;
    assert!(held.len() > 1100, "only {} connections held", held.len());

    let invite = tokio::time::timeout(
        ANSWERED_WITHIN,
        other.send(json!({"sender_id": "calm", "recipient": "calm@example.com"})),
    )
    .await
    .expect("the invite is answered while the flood holds");
    assert_eq!(invite.0, StatusCode::OK, "another app's invite");
    drop(held);
}

/// One key's half-sent invites hold at most a quarter of the API's budget (256) while their
/// bodies are awaited: beyond it that key is answered 503 at once, while another app's key is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_holds_only_a_quarter_of_the_api() {
    sendguard::startup::raise_open_file_limit();
    let stage = Stage::start("keyquarter", &[]).await;
    create_app(&stage.pool, "other", Default::default()).await;
    let greedy = Api::new(stage.base(), api_key(&stage.pool).await);
    let other = Api::new(stage.base(), app_key(&stage.pool, "other").await);
    let head = half_sent(
        "POST /api/v1/invites",
        &format!("Authorization: Bearer {}\r\n", greedy.key),
    );
    // Sent without a pause: the API waits at most 2 s for these bodies. More than the key's
    // quarter (256) must be held; on a loaded machine a connection may time out, which changes
    // nothing the test is about (seen once in a CI run: 299 of 300).
    let held = hold(stage.app.addr, &SOURCES[..2], 150, &head).await;
    assert!(held.len() > 270, "only {} requests held", held.len());

    let mut refused = false;
    for n in 0..20 {
        let (status, _) = greedy
            .send(json!({"sender_id": format!("g{n}"), "recipient": format!("g{n}@example.com")}))
            .await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "a key holding 300 requests was never refused");
    let (status, _) = other
        .send(json!({"sender_id": "calm", "recipient": "calm@example.com"}))
        .await;
    assert_eq!(status, StatusCode::OK, "another app's invite");
    drop(held);
}
