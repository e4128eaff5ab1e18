//! The dashboard under attack: parallel password guessing, roles, ended sessions, the first
//! admin created twice at once, aliased links and planted notices.

use std::net::IpAddr;

use reqwest::StatusCode;
use sendguard::admin::accounts::{self, Role};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};
use crate::support::dashboard::{self, hidden};

const PASSWORD: &str = "correct horse battery";

/// A browser-like client whose connections come from `source` (any 127.0.0.x is loopback).
fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .local_address(source.parse::<IpAddr>().expect("address"))
        .build()
        .expect("client")
}

async fn stage_with_admin(test: &str) -> Stage {
    let stage = Stage::start(test, &[]).await;
    accounts::add(&stage.pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    stage
}

/// Thirty wrong passwords at once from one address, all through one login form: each attempt
/// is counted before its password is checked, so at most ten are checked and the rest are
/// refused with 429 and Retry-After. The right password from that address is then refused
/// too, while the same admin logs in from another address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_guesses_are_counted_before_they_are_checked() {
    let stage = stage_with_admin("guesses").await;
    let base = stage.base();
    let attacker = client_from("127.0.0.1");
    let csrf = dashboard::login_form(&attacker, &base).await;
    let guesses: Vec<_> = (0..30)
        .map(|n| {
            let (attacker, url, csrf) = (
                attacker.clone(),
                format!("{base}/admin/login"),
                csrf.clone(),
            );
            tokio::spawn(async move {
                let guess = format!("guess number {n}");
                let resp = attacker
                    .post(url)
                    .form(&[
                        ("csrf", csrf.as_str()),
                        ("username", "alice"),
                        ("password", &guess),
                    ])
                    .send()
                    .await
                    .expect("answer");
                (resp.status(), resp.headers().contains_key("retry-after"))
            })
        })
        .collect();
    let mut checked = 0;
    let mut refused = 0;
    for guess in guesses {
        match guess.await.expect("task") {
            (StatusCode::UNAUTHORIZED, _) => checked += 1,
            (StatusCode::TOO_MANY_REQUESTS, true) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(checked <= 10, "{checked} guesses were checked");
    assert_eq!(checked + refused, 30);

    let right = dashboard::log_in(&attacker, &base, "alice", PASSWORD).await;
    assert_eq!(
        right.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "locked, even with the right password"
    );
    assert!(right.headers().contains_key("retry-after"));

    let elsewhere = client_from("127.0.0.4");
    let admin = dashboard::log_in(&elsewhere, &base, "alice", PASSWORD).await;
    assert_eq!(
        admin.status(),
        StatusCode::SEE_OTHER,
        "another address logs in"
    );

    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT action FROM audit_log WHERE action LIKE 'login%' ORDER BY 1",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(actions, ["login_failed", "login_locked", "login_succeeded"]);
    let with_id: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action LIKE 'login%' AND admin_id IS NOT NULL",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit ids");
    assert!(with_id >= 3, "login entries carry the admin's id");
}

/// A moderator works the queue and the senders but never sees or reaches rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderator_reviews_but_cannot_change_rules() {
    let stage = stage_with_admin("roles").await;
    accounts::add(&stage.pool, "mo", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    let browser = dashboard::client();
    let login = dashboard::log_in(&browser, &stage.base(), "mo", PASSWORD).await;
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let get = |path: &str| browser.get(format!("{}{path}", stage.base())).send();
    let queue = get("/admin/queue").await.expect("queue");
    assert_eq!(queue.status(), StatusCode::OK);
    let page = queue.text().await.expect("body");
    assert!(
        !page.contains("href=\"/admin/rules\""),
        "rules are hidden: {page}"
    );
    assert_eq!(
        get("/admin/audit").await.expect("audit").status(),
        StatusCode::OK
    );
    for path in ["/admin/rules", "/admin/rules/new", "/admin/rules/1"] {
        assert_eq!(
            get(path).await.expect(path).status(),
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    let csrf = hidden(&page, "csrf");
    let created = browser
        .post(format!("{}/admin/rules/new", stage.base()))
        .form(&[
            ("csrf", csrf.as_str()),
            ("name", "sneaky"),
            ("scope", "sender"),
            ("limit", "1"),
            ("window", "60"),
            ("algorithm", "hash_counters"),
            ("rule_action", "monitor"),
        ])
        .send()
        .await
        .expect("post");
    assert_eq!(created.status(), StatusCode::FORBIDDEN);
    let rules: i64 = sqlx::query_scalar("SELECT count(*) FROM rules WHERE name = 'sneaky'")
        .fetch_one(&stage.pool)
        .await
        .expect("rules");
    assert_eq!(rules, 0);
}

/// Disabling an admin ends their sessions at once; idle and old sessions end by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_end_when_disabled_idle_or_old() {
    let stage = stage_with_admin("sessions").await;
    let queue = |b: &reqwest::Client| {
        let url = format!("{}/admin/queue", stage.base());
        let b = b.clone();
        async move { b.get(url).send().await.expect("queue").status() }
    };
    let idle = dashboard::client();
    dashboard::log_in(&idle, &stage.base(), "alice", PASSWORD).await;
    assert_eq!(queue(&idle).await, StatusCode::OK);
    sqlx::query("UPDATE admin_sessions SET last_seen_at = now() - interval '31 minutes'")
        .execute(&stage.pool)
        .await
        .expect("age");
    assert_eq!(
        queue(&idle).await,
        StatusCode::SEE_OTHER,
        "30 idle minutes end a session"
    );

    let old = dashboard::client();
    dashboard::log_in(&old, &stage.base(), "alice", PASSWORD).await;
    sqlx::query("UPDATE admin_sessions SET created_at = now() - interval '8 hours 1 minute'")
        .execute(&stage.pool)
        .await
        .expect("age");
    assert_eq!(
        queue(&old).await,
        StatusCode::SEE_OTHER,
        "8 hours end a session"
    );

    let live = dashboard::client();
    dashboard::log_in(&live, &stage.base(), "alice", PASSWORD).await;
    assert_eq!(queue(&live).await, StatusCode::OK);
    accounts::disable(&stage.pool, "alice", "test")
        .await
        .expect("disable");
    assert_eq!(
        queue(&live).await,
        StatusCode::SEE_OTHER,
        "disabled: logged out at once"
    );
    let again = dashboard::log_in(&live, &stage.base(), "alice", PASSWORD).await;
    assert_eq!(
        again.status(),
        StatusCode::UNAUTHORIZED,
        "a disabled admin cannot log in"
    );
}

/// Behind https: `__Host-` cookies and HSTS; the security headers are on every response, the
/// API's included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_deployments_get_host_cookies_and_hsts() {
    let stage = Stage::start_with("https", &[], |cfg| {
        cfg.public_url = "https://sendguard.example".into();
    })
    .await;
    accounts::add(&stage.pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    let browser = dashboard::client();
    let page = browser
        .get(format!("{}/admin/login", stage.base()))
        .send()
        .await
        .expect("login page");
    let cookie = page.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    assert!(cookie.starts_with("__Host-"), "{cookie}");
    for part in ["Secure", "Path=/", "HttpOnly"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(
        page.headers()["strict-transport-security"]
            .to_str()
            .expect("hsts")
            .contains("max-age=")
    );
    let api = reqwest::Client::new()
        .post(format!("{}/api/v1/invites", stage.base()))
        .send()
        .await
        .expect("api");
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    for header in [
        "content-security-policy",
        "x-content-type-options",
        "strict-transport-security",
    ] {
        assert!(
            api.headers().contains_key(header),
            "{header} missing on the API"
        );
    }
}

/// Two first-admin setups at once, through the links of two instances, create one admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_setups_at_once_create_one_admin() {
    let stage = Stage::start("setuprace", &[]).await;
    let second = sendguard::start(&crate::support::app::config(&stage.db, None))
        .await
        .expect("second instance");
    let links = [
        stage.app.setup_url.clone().expect("first link"),
        second.setup_url.clone().expect("second link"),
    ];
    let bases = [stage.base(), format!("http://{}", second.addr)];
    let setups: Vec<_> = links
        .iter()
        .zip(&bases)
        .enumerate()
        .map(|(n, (link, base))| {
            let token = link.rsplit("token=").next().expect("token").to_owned();
            let url = format!("{base}/admin/setup");
            tokio::spawn(async move {
                dashboard::client()
                    .post(url)
                    .form(&[
                        ("token", token.as_str()),
                        ("username", &format!("first{n}")),
                        ("password", PASSWORD),
                        ("password2", PASSWORD),
                    ])
                    .send()
                    .await
                    .expect("setup")
                    .status()
            })
        })
        .collect();
    for setup in setups {
        setup.await.expect("task");
    }
    let admins: i64 = sqlx::query_scalar("SELECT count(*) FROM admins")
        .fetch_one(&stage.pool)
        .await
        .expect("admins");
    assert_eq!(admins, 1);
}

/// `system` names automatic decisions in the audit log: no admin may take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_name_system_is_reserved() {
    let stage = Stage::start("reserved", &[]).await;
    for name in ["system", "System"] {
        assert!(
            accounts::add(&stage.pool, name, PASSWORD, Role::Admin, "test")
                .await
                .is_err()
        );
    }
}

/// A sender id cannot alias another dashboard path, a review form must name the sender of its
/// path, and the notices and page numbers in a link cannot carry an attacker's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_forms_and_notices_cannot_be_forged_through_ids() {
    let stage = Stage::start(
        "aliasing",
        &["UPDATE rules SET limit_count = 1 WHERE name = 'sender-hourly'"],
    )
    .await;
    accounts::add(&stage.pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let sly = "x/../../rules?y=1#z";
    for n in 0..2 {
        api.accepted(sly, &format!("s{n}@example.com")).await;
        api.accepted("victim", &format!("v{n}@example.com")).await;
    }
    let browser = dashboard::client();
    dashboard::log_in(&browser, &stage.base(), "alice", PASSWORD).await;
    let get = |path: String| {
        let b = browser.clone();
        let url = format!("{}{path}", stage.base());
        async move {
            let resp = b.get(url).send().await.expect("get");
            (resp.status(), resp.text().await.expect("body"))
        }
    };
    let (_, queue) = get("/admin/queue".into()).await;
    assert!(
        queue.contains("href=\"/admin/senders/default/x%2F..%2F..%2Frules%3Fy%3D1%23z\""),
        "{queue}"
    );
    // A review form for `victim` posted to the sly sender's path is refused.
    let (_, victim) = get("/admin/senders/default/victim".into()).await;
    let csrf = hidden(&victim, "csrf");
    let version = hidden(&victim, "version");
    let forged = browser
        .post(format!(
            "{}/admin/senders/default/x%2F..%2F..%2Frules%3Fy%3D1%23z/review",
            stage.base()
        ))
        .form(&[
            ("csrf", csrf.as_str()),
            ("version", version.as_str()),
            ("sender", "default/victim"),
            ("action", "confirm_ban"),
        ])
        .send()
        .await
        .expect("post");
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM senders ORDER BY id")
        .fetch_all(&stage.pool)
        .await
        .expect("states");
    assert_eq!(
        states,
        ["shadow_banned", "shadow_banned"],
        "nothing was decided"
    );

    let planted = "Your account is suspended: call 555-0100";
    let (status, page) = get(format!("/admin/queue?done={}", planted.replace(' ', "+"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("555-0100"), "a planted notice is shown");
    let (status, _) = get("/admin/queue?page=99999999999999".into()).await;
    assert_eq!(status, StatusCode::OK);
}

/// Guessing with a new name each time, as long as the form allows, escapes no count and fills
/// no memory: attempts at names that are no admin's share one count per address, so the
/// eleventh from one address is refused, and Redis holds the same few keys however many names
/// were tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_login_names_are_counted_together_and_keep_no_keys_of_their_own() {
    let prefix = crate::support::unique_prefix("rotate");
    let key_prefix = prefix.as_str().to_owned();
    let stage = Stage::start_with("rotate", &[], |cfg| cfg.key_prefix = key_prefix).await;
    accounts::add(&stage.pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    let base = stage.base();
    let attacker = client_from("127.0.0.1");
    let mut csrf = dashboard::login_form(&attacker, &base).await;
    let mut refused = 0;
    for n in 0..20 {
        // Half of them a name far longer than any account's.
        let name = if n % 2 == 0 {
            format!("{}{n}", "x".repeat(4000))
        } else {
            format!("nobody{n}")
        };
        let resp = attacker
            .post(format!("{base}/admin/login"))
            .form(&[
                ("csrf", csrf.as_str()),
                ("username", name.as_str()),
                ("password", "guess"),
            ])
            .send()
            .await
            .expect("answer");
        match resp.status() {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected answer {other} to attempt {n}"),
        }
        // Each answer is the form again, with the token for the next attempt.
        csrf = hidden(&resp.text().await.expect("form"), "csrf");
    }
    assert_eq!(
        refused, 10,
        "attempts at unknown names were not counted together"
    );
    let store = crate::support::redis_store().await;
    let keys: Vec<String> = crate::support::query(
        &store,
        redis::cmd("KEYS").arg(format!("{}:*admin-login*", prefix.as_str())),
    )
    .await;
    assert!(keys.len() <= 2, "{} keys: {keys:?}", keys.len());
    // The admin is not locked out by them from another address.
    let admin = dashboard::log_in(&client_from("127.0.0.5"), &base, "alice", PASSWORD).await;
    assert_eq!(admin.status(), StatusCode::SEE_OTHER);
}
