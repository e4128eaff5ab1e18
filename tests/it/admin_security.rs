//! The dashboard under attack: parallel password guessing, roles, ended sessions, the first
//! admin created twice at once, aliased links and planted notices.

use std::net::IpAddr;

use reqwest::StatusCode;
use sendguard::admin::accounts::{self, Role};

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};
use crate::support::dashboard;
use crate::support::html;
use crate::support::rules;

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
    let page = html::parse(&queue.text().await.expect("body"));
    assert!(
        !page.exists("a[href=/admin/rules]"),
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
    let csrf = page.field("csrf");
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
    // The last admin is never disabled: another one first.
    accounts::add(&stage.pool, "bob", PASSWORD, Role::Admin, "test")
        .await
        .expect("a second admin");
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
    let stage = Stage::start_prepared(
        "aliasing",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 1).await,
        |_| {},
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
        html::parse(&queue)
            .exists("a[href=/admin/senders/default/x%2F..%2F..%2Frules%3Fy%3D1%23z]"),
        "{queue}"
    );
    // A review form for `victim` posted to the sly sender's path is refused.
    let (_, victim) = get("/admin/senders/default/victim".into()).await;
    let victim = html::parse(&victim);
    let (csrf, version) = (victim.field("csrf"), victim.field("version"));
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
    crate::support::app::flags_done(&stage.pool).await;
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
    // Nowhere in the source, attributes included, which is stricter than the page's text.
    assert!(!page.contains("555-0100"), "a planted notice is shown");
    let (status, _) = get("/admin/queue?page=99999999999999".into()).await;
    assert_eq!(status, StatusCode::OK);
}

/// Guessing with a new name each time, as long as the form allows, escapes no count and fills
/// no memory: one address gets 30 attempts at any names, and the keys of the names it tried
/// carry a keyed tag, never the text typed, so Redis holds a bounded number of short keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_login_names_are_bounded_per_address() {
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
    for n in 0..40 {
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
        csrf = html::parse(&resp.text().await.expect("form")).field("csrf");
    }
    assert_eq!(
        refused, 10,
        "attempts at new names were not counted by address"
    );
    let store = crate::support::redis_store().await;
    let keys: Vec<String> = crate::support::query(
        &store,
        redis::cmd("KEYS").arg(format!("{}:*admin-login*", prefix.as_str())),
    )
    .await;
    // Per address and its refusals, and per name and (name, address) for the 30 let through.
    assert!(keys.len() <= 2 + 2 * 30, "{} keys", keys.len());
    assert!(
        keys.iter().all(|k| !k.contains("xxxx") && k.len() < 200),
        "{keys:?}"
    );
    // The admin is not locked out by them from another address.
    let admin = dashboard::log_in(&client_from("127.0.0.5"), &base, "alice", PASSWORD).await;
    assert_eq!(admin.status(), StatusCode::SEE_OTHER);
}

/// A stage whose admin is `alice` and which believes `X-Forwarded-For` from loopback, so that a
/// test can speak from any address, IPv6 networks included.
async fn stage_behind_proxy(test: &str) -> Stage {
    let stage = Stage::start_with(test, &[], |cfg| {
        cfg.trusted_proxies = vec!["127.0.0.0/8".parse().expect("net")];
    })
    .await;
    accounts::add(&stage.pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    stage
}

/// A login form token of the test's own: the form is accepted when its field and cookie agree.
const FORM_TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// One login attempt by the client at `from`, with a form token and the cookies in `cookies`.
async fn attempt_from(
    http: &reqwest::Client,
    base: &str,
    from: &str,
    name: &str,
    password: &str,
    cookies: &str,
) -> reqwest::Response {
    http.post(format!("{base}/admin/login"))
        .header("x-forwarded-for", from)
        .header("cookie", format!("sg_login={FORM_TOKEN}; {cookies}"))
        .form(&[
            ("csrf", FORM_TOKEN),
            ("username", name),
            ("password", password),
        ])
        .send()
        .await
        .expect("answer")
}

/// Whether an answer is the throttle's refusal (not the password checks' being busy).
async fn throttled(resp: reqwest::Response) -> bool {
    resp.status() == StatusCode::TOO_MANY_REQUESTS
        && html::parse(&resp.text().await.expect("body"))
            .text()
            .contains("Too many failed attempts")
}

/// What tells two login answers apart, short of the name echoed in the form.
fn shape(resp: &reqwest::Response) -> (StatusCode, Vec<String>) {
    let mut names: Vec<String> = resp.headers().keys().map(|k| k.to_string()).collect();
    names.sort();
    (resp.status(), names)
}

/// After ten attempts at random names from one address, an absent name and an admin's answer
/// alike, and so they do once the address is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_answers_do_not_tell_known_names_from_unknown() {
    let stage = stage_behind_proxy("enumerate").await;
    let base = stage.base();
    let http = client_from("127.0.0.1");
    let from = "198.51.100.7";
    for n in 0..10 {
        let resp = attempt_from(&http, &base, from, &format!("random{n}"), "guess", "").await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "attempt {n}");
    }
    let absent = attempt_from(&http, &base, from, "bob", "guess", "").await;
    let present = attempt_from(&http, &base, from, "alice", "guess", "").await;
    assert_eq!(
        shape(&absent),
        shape(&present),
        "bob and alice answer alike"
    );
    // Until the address itself is refused, for any name.
    let mut last = None;
    for n in 0..40 {
        let resp = attempt_from(&http, &base, from, &format!("more{n}"), "guess", "").await;
        if resp.status() == StatusCode::TOO_MANY_REQUESTS {
            last = Some(n);
            break;
        }
    }
    assert!(last.is_some(), "the address was never refused");
    let absent = attempt_from(&http, &base, from, "bob", "guess", "").await;
    let present = attempt_from(&http, &base, from, "alice", "guess", "").await;
    assert_eq!(absent.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(shape(&absent), shape(&present), "refused alike");
}

/// Refused logins from a loop write one audit row per address (IPv6: its /64) per window,
/// whose count says how many were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_logins_write_one_audit_row_per_address() {
    let stage = stage_behind_proxy("lockrows").await;
    let base = stage.base();
    let http = client_from("127.0.0.1");
    let mut refused = 0;
    for n in 0..60 {
        // One IPv4 address, then two addresses of one IPv6 /64.
        let from = match n {
            0..30 => "198.51.100.9",
            n if n % 2 == 0 => "2001:db8:5:6::1",
            _ => "2001:db8:5:6::2",
        };
        let resp = attempt_from(&http, &base, from, "alice", "guess", "").await;
        if throttled(resp).await {
            refused += 1;
        }
    }
    assert!(refused >= 30, "only {refused} refused");
    let rows: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT detail FROM audit_log WHERE action = 'login_locked' ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(
        rows.len(),
        2,
        "{} rows for {refused} refused attempts",
        rows.len()
    );
    let counted: i64 = rows.iter().filter_map(|d| d["refused"].as_i64()).sum();
    assert_eq!(counted, refused, "{rows:?}");
}

/// While a name is over its ceiling, the /64s of one /48 share one count: a large IPv6 block
/// gets no more attempts than a small one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_ipv6_block_is_counted_by_its_48_while_a_name_is_attacked() {
    let stage = stage_behind_proxy("block48").await;
    let base = stage.base();
    let http = client_from("127.0.0.1");
    // Put alice over her ceiling from 120 networks at once (most are answered busy, and every
    // one is counted).
    let flood: Vec<_> = (0..120)
        .map(|n| {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move {
                let from = format!("2001:db8:{n}::1");
                attempt_from(&http, &base, &from, "alice", "guess", "")
                    .await
                    .status()
            })
        })
        .collect();
    for attempt in flood {
        attempt.await.expect("task");
    }
    let mut checked = 0;
    let mut refused = 0;
    for n in 0..30 {
        let from = format!("2001:db8:ffff:{n:x}::1");
        let resp = attempt_from(&http, &base, &from, "alice", "guess", "").await;
        match resp.status() {
            StatusCode::UNAUTHORIZED => checked += 1,
            _ if throttled(resp).await => refused += 1,
            other => panic!("unexpected answer {other}"),
        }
    }
    assert!(
        checked <= 10,
        "{checked} of 30 /64s in one /48 had their password checked"
    );
    assert_eq!(checked + refused, 30);
}

/// An admin whose browser logged in before keeps a password check of its own while a flood
/// of guesses from many networks keeps the shared ones busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_on_a_known_device_logs_in_during_a_flood() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let stage = stage_behind_proxy("device").await;
    let base = stage.base();
    let admin = client_from("127.0.0.1");
    let first = dashboard::log_in(&admin, &base, "alice", PASSWORD).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);

    let stop = Arc::new(AtomicBool::new(false));
    let busy = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..12)
        .map(|task| {
            let (stop, busy, base) = (stop.clone(), busy.clone(), base.clone());
            let http = client_from("127.0.0.2");
            tokio::spawn(async move {
                for n in 0..400 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let from = format!("2001:db8:{task:x}{n:03x}::1");
                    let resp =
                        attempt_from(&http, &base, &from, &format!("x{task}_{n}"), "guess", "")
                            .await;
                    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
                        busy.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let saturated = crate::support::app::wait_for(std::time::Duration::from_secs(20), || async {
        busy.load(Ordering::Relaxed) >= 20
    })
    .await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(
            dashboard::log_in(&admin, &base, "alice", PASSWORD)
                .await
                .status(),
        );
    }
    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.await.expect("attacker");
    }
    assert!(saturated, "the flood never kept the password checks busy");
    assert_eq!(
        answers,
        [StatusCode::SEE_OTHER; 3],
        "the admin was locked out"
    );
}
