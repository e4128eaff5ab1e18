//! Random methods, paths, headers and bodies at every route of a running instance: never a
//! 5xx, never a dropped connection, and every 4xx of the API is problem+json.

use crate::support::app::{TestDb, api_key, config, migrated};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const ROUTES: [&str; 23] = [
    "/api/v1/invites",
    "/api/v1/events",
    "/admin/senders/default/u_1/invites/not-a-uuid",
    "/admin/senders/default/u_1/notes",
    "/api/v1/invites/x",
    "/api/openapi.json",
    "/api/nope",
    "/healthz",
    "/readyz",
    "/metrics",
    "/admin",
    "/admin/login",
    "/admin/logout",
    "/admin/setup",
    "/admin/queue",
    "/admin/queue/confirm",
    "/admin/senders?id=%00%ff",
    "/admin/senders/default/%3Cscript%3E/review",
    "/admin/rules",
    "/admin/rules/new",
    "/admin/rules/99999999999999999999",
    "/admin/audit?page=-5&actor=%0d%0a",
    "/admin/static/admin.css",
];
const METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
const CONTENT_TYPES: [&str; 6] = [
    "application/json",
    "application/json; charset=utf-8",
    "application/x-www-form-urlencoded",
    "text/plain",
    "multipart/form-data; boundary=x",
    "garbage",
];

/// A running instance on a database of its own, both gone when dropped.
struct Target {
    base: String,
    key: String,
    _app: sendguard::Running,
    _db: TestDb,
}

impl Target {
    async fn start() -> Target {
        let (db, pool) = migrated("fuzz", &[]).await;
        let key = api_key(&pool).await;
        let app = sendguard::start(&config(&db, None)).await.expect("start");
        Target {
            base: format!("http://{}", app.addr),
            key,
            _app: app,
            _db: db,
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Text with the characters that break things: markup, quotes, CR/LF, NUL, non-ASCII.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,40}",
        Just("<script>alert(1)</script>".to_owned()),
        Just("a\r\nBcc: x@example.com".to_owned()),
        Just("\u{0}\u{202e}ü😀".to_owned()),
        "[a-z]{0,3000}",
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let invite = (nasty(), nasty(), nasty(), nasty(), nasty(), nasty()).prop_map(
        |(sender, recipient, ip, resource, message, name)| {
            serde_json::json!({"sender_id": sender, "recipient": recipient, "sender_ip": ip,
                "resource": resource, "message": message, "sender_name": name})
            .to_string()
            .into_bytes()
        },
    );
    let form = (nasty(), nasty()).prop_map(|(a, b)| {
        format!(
            "csrf={}&username={}&password={}&action=confirm_ban&version=x",
            a.len(),
            urlish(&a),
            urlish(&b)
        )
        .into_bytes()
    });
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..2000),
        invite,
        form,
        Just(b"{\"sender_id\": 1e999, \"recipient\": []}".to_vec()),
        Just(vec![b'['; 5000]),
    ]
}

fn urlish(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// One request of the fuzzer: route, method, content type, credentials, idempotency key and
/// body, each drawn at random.
fn request() -> impl Strategy<Value = (usize, usize, Option<usize>, u8, Option<String>, Vec<u8>)> {
    (
        0..ROUTES.len(),
        0..METHODS.len(),
        proptest::option::of(0..CONTENT_TYPES.len()),
        0..3u8,
        proptest::option::of("[ -~]{0,300}"),
        body(),
    )
}

#[test]
fn no_input_breaks_a_route() {
    let rt = runtime();
    let t = rt.block_on(Target::start());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(400));
    let result = runner.run(
        &request(),
        |(route, method, content_type, auth, idempotency, body)| {
            let (status, problem, path) = rt.block_on(async {
                let url = format!("{}{}", t.base, ROUTES[route]);
                let method =
                    reqwest::Method::from_bytes(METHODS[method].as_bytes()).expect("method");
                let mut request = reqwest::Client::new().request(method, &url).body(body);
                if let Some(ct) = content_type {
                    request = request.header("content-type", CONTENT_TYPES[ct]);
                }
                request = match auth {
                    0 => request,
                    1 => request.bearer_auth(&t.key),
                    _ => request.header("authorization", "Basic Z2FyYmFnZQ== Bearer"),
                };
                if let Some(key) = idempotency {
                    request = request.header("idempotency-key", key);
                }
                let resp = request
                    .send()
                    .await
                    .expect("the server answers every request");
                let problem = resp
                    .headers()
                    .get("content-type")
                    .is_some_and(|v| v == "application/problem+json");
                (resp.status().as_u16(), problem, ROUTES[route])
            });
            prop_assert!(status < 500, "{} answered {}", path, status);
            if path.starts_with("/api/") && (400..500).contains(&status) {
                prop_assert!(problem, "{} answered {} without problem+json", path, status);
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_openapi_description_is_served_and_lists_every_route() {
    let rt = runtime();
    let t = rt.block_on(Target::start());
    let doc: serde_json::Value = rt.block_on(async {
        reqwest::get(format!("{}/api/openapi.json", t.base))
            .await
            .expect("get")
            .json()
            .await
            .expect("json")
    });
    assert_eq!(doc["openapi"], "3.1.0");
    // Under /api/ a method the path does not take is a problem too.
    let (status, kind) = rt.block_on(async {
        let resp = reqwest::Client::new()
            .post(format!("{}/api/openapi.json", t.base))
            .send()
            .await
            .expect("post");
        (
            resp.status().as_u16(),
            resp.headers().get("content-type").cloned(),
        )
    });
    assert_eq!(status, 405);
    assert_eq!(
        kind.as_ref().and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    for path in [
        "/api/v1/invites",
        "/api/v1/events",
        "/healthz",
        "/readyz",
        "/api/openapi.json",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    let invite = &doc["components"]["schemas"]["Invite"];
    assert_eq!(
        invite["required"],
        serde_json::json!(["sender_id", "recipient"])
    );
    assert_eq!(invite["properties"]["message"]["maxLength"], 2000);
}
