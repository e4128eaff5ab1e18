//! Plugging into a real product, against the real Postgres, Redis and SMTP sink: apps with
//! their own senders, invitation links that work (the caller's `accept_url`, the app's
//! template, or none), branding, and the recipient's one-click unsubscribe and report links.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, app_key, create_app, flags_done, wait_for};
use crate::support::rules;
use crate::support::smtp::Received;
use sendguard::apps::AppChanges;

fn drawbox() -> AppChanges {
    AppChanges {
        product: Some("Drawbox".into()),
        link_hosts: Some(vec!["drawbox.example".into()]),
        mail_from: Some("Drawbox <invites@drawbox.example>".into()),
        ..AppChanges::default()
    }
}

/// Waits for the sink to hold `n` messages and returns them.
async fn delivered(stage: &Stage, n: usize) -> Vec<Received> {
    let arrived = wait_for(Duration::from_secs(15), || async {
        stage.sink.messages().len() >= n
    })
    .await;
    assert!(
        arrived,
        "{} of {n} messages arrived",
        stage.sink.messages().len()
    );
    stage.sink.messages()
}

async fn status_of(pool: &PgPool, id: &str) -> String {
    sqlx::query_scalar("SELECT status FROM invites WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("invite")
}

/// The URL inside `<…>` of a `List-Unsubscribe` header.
fn unsubscribe_link(message: &Received) -> String {
    message
        .header("List-Unsubscribe")
        .expect("List-Unsubscribe")
        .trim_matches(['<', '>'])
        .to_owned()
}

/// The public URL of the test instances (the links of emails start with it).
const PUBLIC: &str = "http://127.0.0.1:8080";

/// The link that follows `label` in the text part.
fn link_after(message: &Received, label: &str) -> String {
    let text = message.text();
    let start = text.find(label).expect("label in the message") + label.len();
    text[start..]
        .split_whitespace()
        .next()
        .expect("link")
        .to_owned()
}

/// A ban in one app never holds another app's sender of the same id: their counters, states
/// and invites are their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apps_sharing_a_sender_id_are_two_senders() {
    let stage = Stage::start_prepared(
        "two_apps",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 3).await,
        |_| {},
    )
    .await;
    create_app(&stage.pool, "drawbox", drawbox()).await;
    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    let draw = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    for n in 0..5 {
        web.accepted("u_123", &format!("w{n}@example.com")).await;
    }
    for n in 0..3 {
        draw.accepted("u_123", &format!("d{n}@example.com")).await;
    }
    flags_done(&stage.pool).await;
    let states: Vec<(String, String)> = sqlx::query_as(
        "SELECT a.name, s.state FROM senders s JOIN apps a ON a.id = s.app_id
         WHERE s.id = 'u_123' ORDER BY a.name",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("states");
    assert_eq!(
        states,
        [
            ("default".to_owned(), "shadow_banned".to_owned()),
            ("drawbox".to_owned(), "active".to_owned())
        ]
    );
    // Three of the first app's invites and all three of the second's are delivered.
    assert_eq!(stage.settle().await, 6);
    let to_drawbox = stage
        .sink
        .messages()
        .iter()
        .filter(|m| m.to[0].starts_with('d'))
        .count();
    assert_eq!(to_drawbox, 3, "the other app's sender is not held");
}

/// An `accept_url` on one of the app's link hosts is the link of both parts of the email; one
/// on another host, or plain http to a public host, is refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_urls_must_point_to_the_apps_hosts() {
    let stage = Stage::start("accept_url", &[]).await;
    create_app(&stage.pool, "drawbox", drawbox()).await;
    let api = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    let url = "https://drawbox.example/accept/7f3c?from=bo";
    let (status, _) = api
        .send(
            json!({"sender_id": "bo", "recipient": "ana@example.com", "sender_name": "Bo",
                     "resource": "Q3 plan", "accept_url": url}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let message = &delivered(&stage, 1).await[0];
    let text = message.text();
    assert_eq!(
        link_after(message, "Open the invitation: "),
        url,
        "text part: {text}"
    );
    assert_eq!(
        text.matches(&format!("href=\"{url}\"")).count(),
        1,
        "HTML part: {text}"
    );
    assert_eq!(
        message.header("Subject").as_deref(),
        Some("Bo invited you to Drawbox")
    );
    assert_eq!(
        message.header("From").as_deref(),
        Some("Drawbox <invites@drawbox.example>")
    );
    for bad in [
        "https://evil.example/accept/1",
        "http://drawbox.example/accept/1",
        "javascript:alert(1)",
    ] {
        let resp = api
            .invite(json!({"sender_id": "bo", "recipient": "ana@example.com", "accept_url": bad}))
            .await;
        assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        let problem: Value = resp.json().await.expect("problem");
        assert_eq!(problem["field"], "accept_url", "{bad}: {problem}");
    }
    let name = api
        .invite(json!({"sender_id": "bo", "recipient": "ana@example.com",
                       "sender_name": "PayPal.com Security"}))
        .await;
    assert_eq!(name.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = name.json().await.expect("problem");
    assert_eq!(problem["field"], "sender_name");
}

/// Without an `accept_url` the app's template is filled in (each placeholder URL-encoded); with
/// neither, the email has no invitation link and says what to do instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_link_is_filled_in_and_without_one_there_is_no_link() {
    let stage = Stage::start("link_template", &[]).await;
    create_app(
        &stage.pool,
        "drawbox",
        AppChanges {
            link_template: Some("https://drawbox.example/i/{invite_id}?doc={resource}".into()),
            ..drawbox()
        },
    )
    .await;
    let draw = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    let (_, id) = draw
        .send(json!({"sender_id": "bo", "recipient": "ana@example.com",
                     "resource": "Q3 plan/&x"}))
        .await;
    let id = id.expect("id");
    let message = &delivered(&stage, 1).await[0];
    let filled = format!("https://drawbox.example/i/{id}?doc=Q3%20plan%2F%26x");
    assert_eq!(link_after(message, "Open the invitation: "), filled);
    assert!(message.text().contains(&format!("href=\"{filled}\"")));

    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    web.accepted("cy", "bea@example.com").await;
    let plain = delivered(&stage, 2)
        .await
        .into_iter()
        .find(|m| m.to == ["bea@example.com"])
        .expect("second message");
    assert!(
        plain.data.contains("To accept, sign in to"),
        "{}",
        plain.data
    );
    assert!(
        !plain.data.contains("Open the invitation"),
        "{}",
        plain.data
    );
    assert!(
        !plain.data.contains("/invites/"),
        "no link to a page of sendguard that does not exist: {}",
        plain.data
    );
}

/// The one-click unsubscribe taken from the delivered message's header: a GET only asks, a
/// POST without cookies suppresses the recipient for that app, so the next invite to them is
/// `suppressed` (with the reason) and never sent; another app may still invite them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_click_unsubscribe_suppresses_the_next_invite_of_that_app() {
    let stage = Stage::start("unsubscribe", &[]).await;
    create_app(&stage.pool, "drawbox", drawbox()).await;
    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    let draw = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    web.accepted("bo", "ana@example.com").await;
    let first = &delivered(&stage, 1).await[0];
    // The links name the public URL; this instance listens elsewhere.
    let link = unsubscribe_link(first).replace(PUBLIC, &stage.base());
    assert!(link.contains("/unsubscribe?t="), "{link}");
    assert_eq!(
        first.header("List-Unsubscribe-Post").as_deref(),
        Some("List-Unsubscribe=One-Click")
    );
    let http = reqwest::Client::new();
    let page = http.get(&link).send().await.expect("get");
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.expect("page");
    assert!(page.contains("<form method=\"post\""), "{page}");
    let suppressed = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM suppressions")
            .fetch_one(&stage.pool)
            .await
            .expect("count")
    };
    assert_eq!(suppressed().await, 0, "a GET alone never unsubscribes");
    for _ in 0..2 {
        let done = http
            .post(&link)
            .header("content-type", "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .expect("post");
        assert_eq!(done.status(), StatusCode::OK);
    }
    assert_eq!(suppressed().await, 1);

    let (_, id) = web
        .send(json!({"sender_id": "bo", "recipient": "ana@example.com"}))
        .await;
    let id = id.expect("id");
    let settled = wait_for(Duration::from_secs(10), || async {
        status_of(&stage.pool, &id).await == "suppressed"
    })
    .await;
    assert!(settled, "status {}", status_of(&stage.pool, &id).await);
    let decision: Value = sqlx::query_scalar("SELECT decision FROM invites WHERE id = $1::uuid")
        .bind(&id)
        .fetch_one(&stage.pool)
        .await
        .expect("decision");
    assert_eq!(decision["suppressed"], "unsubscribed");
    draw.accepted("bo", "ana@example.com").await;
    assert_eq!(
        stage.settle().await,
        2,
        "only the other app's invite went out"
    );
}

/// The report link records one complaint however often it is followed; a link with a changed
/// token or invite, or the unsubscribe token on the report page, is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_link_records_one_complaint() {
    let stage = Stage::start("report", &[]).await;
    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    web.accepted("bo", "ana@example.com").await;
    let message = &delivered(&stage, 1).await[0];
    let report = link_after(message, "Report this invitation as abuse: ");
    assert!(report.starts_with(&format!("{PUBLIC}/r/")), "{report}");
    assert!(report.contains("/report?t="), "{report}");
    let report = report.replace(PUBLIC, &stage.base());
    let http = reqwest::Client::new();
    let page = http.get(&report).send().await.expect("get");
    assert_eq!(page.status(), StatusCode::OK);
    for _ in 0..3 {
        let done = http.post(&report).send().await.expect("post");
        assert_eq!(done.status(), StatusCode::OK);
    }
    let complaints: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outcomes WHERE type = 'complaint'")
            .fetch_one(&stage.pool)
            .await
            .expect("count");
    assert_eq!(complaints, 1);

    let unsubscribe = unsubscribe_link(message).replace(PUBLIC, &stage.base());
    let (path, token) = report.split_once("?t=").expect("token");
    let mut flipped = token.to_owned().into_bytes();
    flipped[3] = if flipped[3] == b'a' { b'b' } else { b'a' };
    let flipped = String::from_utf8(flipped).expect("ascii");
    let other_invite = path.replace(
        &path[path.len() - "/report".len() - 36..path.len() - "/report".len()],
        &uuid::Uuid::new_v4().to_string(),
    );
    let unsubscribe_token = unsubscribe.split_once("?t=").expect("token").1;
    for forged in [
        format!("{path}?t={flipped}"),
        format!("{other_invite}?t={token}"),
        format!("{path}?t={unsubscribe_token}"),
        path.to_owned(),
        path.replace("/report", "x/report"),
    ] {
        for method in [reqwest::Method::GET, reqwest::Method::POST] {
            let resp = http
                .request(method.clone(), &forged)
                .send()
                .await
                .expect("forged");
            assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{method} {forged}");
        }
    }
}

/// The dashboard names the app beside each sender, filters the queue by app, finds a sender id
/// in every app that has one, and lets an admin see and remove an app's suppressed recipients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_keeps_apps_apart() {
    use crate::support::dashboard::{client, log_in};
    use crate::support::html;
    use sendguard::admin::accounts::{self, Role};
    let stage = Stage::start_prepared(
        "apps_dashboard",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 1).await,
        |_| {},
    )
    .await;
    create_app(&stage.pool, "drawbox", drawbox()).await;
    accounts::add(
        &stage.pool,
        "alice",
        "correct horse battery",
        Role::Admin,
        "test",
    )
    .await
    .expect("admin");
    accounts::add(
        &stage.pool,
        "mo",
        "correct horse battery",
        Role::Moderator,
        "test",
    )
    .await
    .expect("moderator");
    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    let draw = Api::new(stage.base(), app_key(&stage.pool, "drawbox").await);
    for api in [&web, &draw] {
        for n in 0..2 {
            api.accepted("u_1", &format!("r{n}@example.com")).await;
        }
    }
    let base = stage.base();
    let browser = client();
    log_in(&browser, &base, "alice", "correct horse battery").await;
    let get = |path: String| {
        let browser = browser.clone();
        async move {
            let resp = browser.get(path).send().await.expect("get");
            (resp.status(), resp.text().await.expect("body"))
        }
    };
    let (_, queue) = get(format!("{base}/admin/queue")).await;
    assert!(
        queue.contains("href=\"/admin/senders/default/u_1\"")
            && queue.contains("href=\"/admin/senders/drawbox/u_1\""),
        "{queue}"
    );
    let (_, only) = get(format!("{base}/admin/queue?app=drawbox")).await;
    assert!(
        only.contains("/admin/senders/drawbox/u_1") && !only.contains("/admin/senders/default/u_1"),
        "{only}"
    );
    let (status, found) = get(format!("{base}/admin/senders?id=u_1")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        found.contains("u_1 of default") && found.contains("u_1 of drawbox"),
        "{found}"
    );
    let (_, page) = get(format!("{base}/admin/senders/drawbox/u_1")).await;
    assert!(page.contains("of drawbox"), "{page}");
    // A NUL, which no sender id can hold: refused as input, never shown as an outage.
    for path in ["/admin/senders?id=u%00_1", "/admin/senders/drawbox/u%00_1"] {
        let (status, body) = get(format!("{base}{path}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains("NUL"), "{path}: {body}");
    }

    sqlx::query(
        "INSERT INTO suppressions (app_id, recipient)
         SELECT id, 'gone@example.com' FROM apps WHERE name = 'drawbox'",
    )
    .execute(&stage.pool)
    .await
    .expect("suppression");
    let (status, app_page) = get(format!("{base}/admin/apps/drawbox")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(app_page.contains("gone@example.com"), "{app_page}");
    let removed = browser
        .post(format!("{base}/admin/apps/drawbox/suppressions/remove"))
        .form(&[
            ("csrf", html::parse(&app_page).field("csrf").as_str()),
            ("recipient", "gone@example.com"),
        ])
        .send()
        .await
        .expect("remove");
    assert_eq!(removed.status(), StatusCode::SEE_OTHER);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(left, 0);
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'unsuppress'")
            .fetch_one(&stage.pool)
            .await
            .expect("audit");
    assert_eq!(audited, 1);

    let moderator = client();
    log_in(&moderator, &base, "mo", "correct horse battery").await;
    let denied = moderator
        .get(format!("{base}/admin/apps/drawbox"))
        .send()
        .await
        .expect("get");
    assert_eq!(denied.status(), StatusCode::FORBIDDEN);
}

/// Links already in inboxes keep working when the signing key changes: moving from the key
/// kept in the database to `SENDGUARD_SECRET_KEY`, and from one configured key to the next
/// with the old one as `SENDGUARD_PREVIOUS_SECRET_KEY` (which retires the stored key). A key
/// that never signed them still finds them changed (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_signed_with_a_former_key_still_unsubscribe() {
    let stage = Stage::start("linkrotation", &[]).await;
    let web = Api::new(stage.base(), api_key(&stage.pool).await);
    web.accepted("bo", "ana@example.com").await;
    let stored_link = unsubscribe_link(&delivered(&stage, 1).await[0]);
    let (first, second) = ("a".repeat(40), "b".repeat(40));
    let with_keys = |current: &str, previous: Option<&str>| {
        let mut cfg = crate::support::app::config(&stage.db, Some(stage.sink.url()));
        cfg.keys.secret_key = Some(current.to_owned());
        cfg.keys.previous_secret_key = previous.map(str::to_owned);
        cfg
    };
    let unsubscribe = |base: String, link: String| async move {
        reqwest::Client::new()
            .post(link.replace(PUBLIC, &base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("List-Unsubscribe=One-Click")
            .send()
            .await
            .expect("post")
            .status()
    };
    // The first configured key: links of the stored key still work; its own are signed anew.
    let moved = sendguard::start(&with_keys(&first, None))
        .await
        .expect("start");
    let moved_base = format!("http://{}", moved.addr);
    assert_eq!(
        unsubscribe(moved_base.clone(), stored_link.clone()).await,
        StatusCode::OK
    );
    let api = Api::new(moved_base, api_key(&stage.pool).await);
    api.accepted("bo", "cy@example.com").await;
    let first_link = unsubscribe_link(&delivered(&stage, 2).await[1]);
    assert_ne!(first_link, stored_link);
    moved.shutdown().await;
    // The next key, with the first as the previous one.
    let rotated = sendguard::start(&with_keys(&second, Some(&first)))
        .await
        .expect("start");
    let rotated_base = format!("http://{}", rotated.addr);
    assert_eq!(
        unsubscribe(rotated_base.clone(), first_link.clone()).await,
        StatusCode::OK
    );
    assert_eq!(
        unsubscribe(rotated_base, stored_link).await,
        StatusCode::NOT_FOUND,
        "a previous key set retires the stored one"
    );
    rotated.shutdown().await;
    // A key that never signed them.
    let stranger = sendguard::start(&with_keys(&"c".repeat(40), None))
        .await
        .expect("start");
    assert_eq!(
        unsubscribe(format!("http://{}", stranger.addr), first_link).await,
        StatusCode::NOT_FOUND
    );
    stranger.shutdown().await;
    let suppressed: i64 = sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(suppressed, 2);
}
