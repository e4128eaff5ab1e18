//! The dashboard over HTTP: login, sessions, CSRF, the review queue and the sender page's
//! decisions, against a running instance, Postgres, Redis and an SMTP server on 127.0.0.1.

use crate::support::api::Api;
use crate::support::app::{self as app, api_key, config, sender_state};
use crate::support::dashboard;
use crate::support::html::{self, Page};
use crate::support::rules;
use reqwest::StatusCode;
use sendguard::admin::accounts::Role;
use sendguard::limiter::KeyPrefix;
use sqlx::PgPool;

const PASSWORD: &str = "correct horse battery";

/// A running instance with `sender-hourly` at 3 and an admin, and the API key to feed it.
struct Stage {
    inner: app::Stage,
    base: String,
    api: Api,
}

impl std::ops::Deref for Stage {
    type Target = app::Stage;
    fn deref(&self) -> &app::Stage {
        &self.inner
    }
}

impl Stage {
    async fn new(test: &str) -> Stage {
        Stage::with(test, async |_| {}).await
    }

    /// As `new`, with `setup` run before the instance starts.
    async fn with(test: &str, setup: impl AsyncFnOnce(&PgPool)) -> Stage {
        Stage::configured(test, setup, |_| {}).await
    }

    /// As `with`, its configuration changed by `adjust`.
    async fn configured(
        test: &str,
        setup: impl AsyncFnOnce(&PgPool),
        adjust: impl FnOnce(&mut sendguard::config::Config),
    ) -> Stage {
        let prepare = async |pool: &PgPool| {
            rules::set(pool, "sender-hourly", |r| r.limit = 3).await;
            setup(pool).await;
        };
        let inner = app::Stage::start_prepared(test, prepare, adjust).await;
        sendguard::admin::accounts::add(&inner.pool, "alice", PASSWORD, Role::Admin, "test")
            .await
            .expect("admin");
        Stage {
            base: inner.base(),
            api: Api::new(inner.base(), api_key(&inner.pool).await),
            inner,
        }
    }

    fn browser() -> reqwest::Client {
        dashboard::client()
    }

    async fn log_in(&self, client: &reqwest::Client, password: &str) -> reqwest::Response {
        dashboard::log_in(client, &self.base, "alice", password).await
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> (StatusCode, Page) {
        let resp = client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("get");
        (resp.status(), page_of(resp).await)
    }

    async fn invite(&self, sender: &str, recipient: &str) {
        self.api.accepted(sender, recipient).await;
    }

    /// Posts `action` from the page of `sender` (`app/id`) as it is now, confirmed.
    async fn decide_now(
        &self,
        client: &reqwest::Client,
        sender: &str,
        action: &str,
    ) -> reqwest::Response {
        let (_, page) = self.get(client, &format!("/admin/senders/{sender}")).await;
        let fields = [
            ("csrf", page.field("csrf")),
            ("version", page.field("version")),
            ("held", page.field("held")),
            ("action", action.to_owned()),
            ("confirmed", "yes".to_owned()),
        ];
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.review(client, sender, &fields).await
    }

    /// Posts the review form of `sender` (`app/id`) with these fields besides its name.
    async fn review(
        &self,
        client: &reqwest::Client,
        sender: &str,
        fields: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut form = vec![("sender", sender)];
        form.extend_from_slice(fields);
        client
            .post(format!("{}/admin/senders/{sender}/review", self.base))
            .form(&form)
            .send()
            .await
            .expect("review")
    }
}

/// The body of an answer, parsed.
async fn page_of(resp: reqwest::Response) -> Page {
    html::parse(&resp.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_login_and_a_wrong_password_is_refused() {
    let stage = Stage::new("dashlogin").await;
    let browser = Stage::browser();
    let resp = browser
        .get(format!("{}/admin/queue", stage.base))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()["location"], "/admin/login");
    let (status, page) = stage.get(&browser, "/admin/login").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.exists("label[for=password]"), "{page}");

    let tokenless = browser
        .post(format!("{}/admin/login", stage.base))
        .form(&[("username", "alice"), ("password", PASSWORD)])
        .send()
        .await
        .expect("post");
    assert_eq!(
        tokenless.status(),
        StatusCode::FORBIDDEN,
        "a login form needs its token"
    );

    let wrong = stage.log_in(&browser, "not the password").await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(
        page_of(wrong)
            .await
            .text()
            .contains("Wrong username or password")
    );

    let ok = stage.log_in(&browser, PASSWORD).await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    let cookie = ok.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http here: {cookie}");
    let resp = browser
        .get(format!("{}/admin/queue", stage.base))
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), StatusCode::OK);
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"));
    assert_eq!(resp.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_logins_are_rate_limited() {
    let stage = Stage::new("dashlimit").await;
    let browser = Stage::browser();
    for _ in 0..10 {
        let resp = stage.log_in(&browser, "guess").await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    }
    let resp = stage.log_in(&browser, PASSWORD).await;
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        page_of(resp)
            .await
            .text()
            .contains("Too many failed attempts")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_lifts_a_ban_and_the_held_invites_are_delivered() {
    let stage = Stage::new("dashlift").await;
    for n in 0..5 {
        stage.invite("eager", &format!("e{n}@example.com")).await;
    }
    assert_eq!(stage.settle().await, 3);
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;

    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let row = queue.row("eager").expect("the sender's row");
    assert!(
        row.exists("a[href=/admin/senders/default/eager]")
            && row.text().contains("sender-hourly")
            && row.text().contains("4 / 3"),
        "{queue}"
    );

    let (status, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    assert_eq!(status, StatusCode::OK);
    let text = page.text();
    assert!(
        text.contains("exceeded sender-hourly 4/3"),
        "decision record shown"
    );
    assert!(text.contains("sender was shadow-banned"), "{page}");
    let (csrf, version, held) = (
        page.field("csrf"),
        page.field("version"),
        page.field("held"),
    );

    // Without the token: refused, nothing changes.
    let forged = stage
        .review(
            &browser,
            "default/eager",
            &[
                ("csrf", "0".repeat(64).as_str()),
                ("version", version.as_str()),
                ("action", "lift_and_release"),
            ],
        )
        .await;
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let state = sender_state(&stage.pool, "eager").await;
    assert_eq!(state, "shadow_banned");

    // A release sends mail: the first post only asks to confirm, with the count, and changes
    // nothing.
    let fields = [
        ("csrf", csrf.as_str()),
        ("version", version.as_str()),
        ("held", held.as_str()),
        ("action", "lift_and_release"),
        ("note", "known customer"),
    ];
    let asked = stage.review(&browser, "default/eager", &fields).await;
    assert_eq!(asked.status(), StatusCode::OK);
    let asked = page_of(asked).await;
    assert!(
        asked
            .text()
            .contains("Confirm: Lift ban and release 2 held invites")
            && asked.text().contains("cannot be recalled")
            && asked.field("confirmed") == "yes",
        "{asked}"
    );
    assert_eq!(sender_state(&stage.pool, "eager").await, "shadow_banned");
    assert_eq!(
        stage.settle().await,
        3,
        "nothing released before the confirmation"
    );
    let mut confirmed = fields.to_vec();
    confirmed.push(("confirmed", "yes"));
    let done = stage.review(&browser, "default/eager", &confirmed).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        stage.settle().await,
        5,
        "the two held invites reach the SMTP server"
    );

    // The same, stale form again: refused with a clear message.
    let stale = stage
        .review(
            &browser,
            "default/eager",
            &[
                ("csrf", csrf.as_str()),
                ("version", version.as_str()),
                ("action", "confirm_ban"),
            ],
        )
        .await;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert!(
        page_of(stale)
            .await
            .text()
            .contains("changed since you loaded the page")
    );

    let (_, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    let text = page.text();
    assert!(
        text.contains("alice")
            && text.contains("lift_and_release")
            && text.contains("known customer")
    );
    // A released invite says so, and who released it; not why it was held.
    assert_eq!(
        text.matches("held, then released by alice").count(),
        2,
        "{page}"
    );
    assert!(!text.contains("sender was shadow-banned"), "{page}");
}

/// A decision is offered only where it applies: a banned sender gets no "Confirm ban", a
/// sender with nothing held no "release", a shadow-banned one no "Shadow-ban"; and one posted
/// all the same is refused with a clear message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_offered_only_where_they_apply() {
    let stage = Stage::new("dashapply").await;
    for n in 0..4 {
        stage.invite("eager", &format!("e{n}@example.com")).await;
    }
    stage.invite("calm", "c0@example.com").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;

    let (_, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    assert_eq!(
        page.actions(),
        [
            "confirm_ban",
            "lift_and_release",
            "lift_and_discard",
            "mark_trusted"
        ],
        "shadow-banned with one held invite"
    );
    assert!(
        page.select("button[value=lift_and_release]")
            .any(|b| b.text() == "Lift ban and release 1 held invite…"),
        "{page}"
    );
    let (_, page) = stage.get(&browser, "/admin/senders/default/calm").await;
    assert_eq!(
        page.actions(),
        ["mark_trusted", "shadow_ban", "ban"],
        "active with nothing held"
    );

    // Confirmed: the held invite is discarded and the sender banned.
    let (_, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    let (csrf, version) = (page.field("csrf"), page.field("version"));
    let ban = [
        ("csrf", csrf.as_str()),
        ("version", version.as_str()),
        ("held", "1"),
        ("action", "confirm_ban"),
        ("confirmed", "yes"),
    ];
    let done = stage.review(&browser, "default/eager", &ban).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let (_, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    assert_eq!(
        page.actions(),
        ["lift_and_discard", "mark_trusted"],
        "banned with nothing held: a plain lift"
    );
    assert!(
        page.select("button[value=lift_and_discard]")
            .any(|b| b.text() == "Lift ban"),
        "{page}"
    );

    // A "Confirm ban" posted for the banned sender from a fresh page is refused.
    let version = page.field("version");
    let again = [
        ("csrf", csrf.as_str()),
        ("version", version.as_str()),
        ("action", "confirm_ban"),
    ];
    let refused = stage.review(&browser, "default/eager", &again).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
    let body = page_of(refused).await;
    assert!(
        body.text().contains("does not apply to this sender"),
        "{body}"
    );
}

/// The queue shows the invite that tripped the rule, not the latest held one (which may be
/// harmless), and says which it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_shows_the_invite_that_tripped_the_rule() {
    let stage = Stage::new("dashtrip").await;
    let texts = [
        "Join my doc",
        "Join my doc",
        "Join my doc",
        "Cheap pills, reply for the price list",
        "Here are the meeting notes",
    ];
    for (n, message) in texts.iter().enumerate() {
        let body = serde_json::json!({"sender_id": "trip", "message": message,
                                      "recipient": format!("t{n}@example.com")});
        assert_eq!(stage.api.send(body).await.0, StatusCode::OK);
    }
    app::flags_done(&stage.pool).await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let text = queue.row("trip").expect("the sender's row").text();
    assert!(
        text.contains("the invite that tripped the rule:")
            && text.contains("Cheap pills, reply for the price list"),
        "{queue}"
    );
    assert!(
        !queue.text().contains("Here are the meeting notes"),
        "{queue}"
    );
}

/// The sender page shows the text of sent invites too, and marks the ones their recipients
/// complained about: a reviewer reads what a sender banned for complaints sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_page_shows_sent_invites_and_marks_the_complaints() {
    let stage = Stage::new("dashsent").await;
    let mut ids = Vec::new();
    for (n, message) in ["Your parcel is waiting, call now", "Join my doc"]
        .iter()
        .enumerate()
    {
        let body = serde_json::json!({"sender_id": "parcel", "message": message,
                                      "recipient": format!("p{n}@example.com")});
        let (status, id) = stage.api.send(body).await;
        assert_eq!(status, StatusCode::OK);
        ids.push(id.expect("id"));
    }
    assert_eq!(stage.settle().await, 2);
    assert_eq!(
        stage.api.event(&ids[0], "complaint").await,
        StatusCode::ACCEPTED
    );
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, page) = stage.get(&browser, "/admin/senders/default/parcel").await;
    let row = page.row("p0@example.com").expect("the invite's row");
    assert!(
        row.text().contains("Your parcel is waiting, call now")
            && row.attr("class") == Some("reported")
            && row.select("strong").any(|s| s.text() == "complaint"),
        "{page}"
    );
    assert!(
        page.row("p1@example.com")
            .is_some_and(|row| row.text().contains("Join my doc")),
        "the other sent invite's text too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_confirm_from_the_queue_holds_later_invites() {
    let stage = Stage::new("dashbulk").await;
    for sender in ["b1", "b2"] {
        for n in 0..4 {
            stage
                .invite(sender, &format!("{sender}-{n}@example.com"))
                .await;
        }
    }
    assert_eq!(stage.settle().await, 6);
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let csrf = queue.field("csrf");
    // Each checkbox's value is the sender's version, app and id.
    let picks: Vec<&str> = ["b1", "b2"]
        .iter()
        .map(|id| {
            let row = queue.row(&format!("Select {id} of")).expect("row");
            let pick = row.select("input[name=sender]").next().expect("a checkbox");
            pick.attr("value").expect("its value")
        })
        .collect();
    let body = format!(
        "csrf={csrf}&sender={}&sender={}&note=spam+wave",
        picks[0].replace(':', "%3A"),
        picks[1].replace(':', "%3A")
    );
    let post = |body: String| {
        browser
            .post(format!("{}/admin/queue/confirm", stage.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    // Bans discard held invites for good: the first post names the senders and asks.
    let asked = post(body.clone()).await.expect("post");
    assert_eq!(asked.status(), StatusCode::OK);
    let asked = html::parse(&asked.text().await.expect("body"));
    assert!(
        asked.text().contains("Confirm the ban of 2 senders"),
        "{asked}"
    );
    assert_eq!(asked.field("confirmed"), "yes");
    let banned: i64 = sqlx::query_scalar("SELECT count(*) FROM senders WHERE state = 'banned'")
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(banned, 0, "nothing decided before the confirmation");
    let resp = post(format!("{body}&confirmed=yes")).await.expect("post");
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let banned: i64 = sqlx::query_scalar("SELECT count(*) FROM senders WHERE state = 'banned'")
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(banned, 2);
    stage.invite("b1", "later@example.com").await;
    assert_eq!(
        stage.settle().await,
        6,
        "a confirmed ban delivers nothing more"
    );
}

/// Keys end in a code, not the rule's name: the rules page shows each rule's keys as a pattern,
/// and the pattern finds the key an invite wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_page_shows_a_pattern_that_finds_the_rules_keys() {
    let stage = Stage::new("dashkeys").await;
    stage.invite("heavy", "h0@example.com").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, list) = stage.get(&browser, "/admin/rules").await;
    let row = list
        .select("tr")
        .find(|row| {
            row.select("td")
                .next()
                .is_some_and(|name| name.text() == "sender-hourly")
        })
        .expect("the rule's row");
    let pattern = row.select("code").next().expect("its keys").text();
    let (head, tail) = pattern.split_once('*').expect("a glob of every sender");
    let (prefix, _) = head.split_once(":{").expect("the prefix");
    let prefix = KeyPrefix::new(prefix).expect("a key prefix");
    let store = crate::support::redis_store().await;
    let keys = crate::support::keys_under(&store, &prefix).await;
    let found: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with(head) && k.ends_with(tail))
        .collect();
    assert_eq!(found.len(), 1, "{pattern} among {keys:?}");
    assert!(found[0].contains(":heavy}"), "{found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_is_edited_through_its_form_and_backtested() {
    let stage = Stage::new("dashrules").await;
    // Traffic to backtest: one sender with four invites, two senders with one each.
    for n in 0..4 {
        stage.invite("heavy", &format!("h{n}@example.com")).await;
    }
    stage.invite("light1", "l1@example.com").await;
    stage.invite("light2", "l2@example.com").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, list) = stage.get(&browser, "/admin/rules").await;
    let text = list.text();
    assert!(text.contains("recipient-daily") && text.contains("ip-hourly"));
    // What each rule counts, in words; the counting's machinery behind a disclosure.
    assert!(
        text.contains("invites with links per sender, new senders only")
            && list
                .select("details")
                .any(|d| d.select("summary").any(|s| s.text() == "Counting")),
        "{list}"
    );
    let id: i64 = sqlx::query_scalar("SELECT id FROM rules WHERE name = 'sender-hourly'")
        .fetch_one(&stage.pool)
        .await
        .expect("rule id");
    let (_, form) = stage.get(&browser, &format!("/admin/rules/{id}")).await;
    let (csrf, version) = (form.field("csrf"), form.field("version"));
    let url = format!("{}/admin/rules/{id}", stage.base);
    let post = |limit: &'static str, intent: &'static str| {
        browser
            .post(&url)
            .form(&[
                ("csrf", csrf.as_str()),
                ("version", version.as_str()),
                ("scope", "sender"),
                ("limit", limit),
                ("window", "3600"),
                ("algorithm", "hash_counters"),
                ("rule_action", "shadow_ban"),
                ("enabled", "on"),
                ("intent", intent),
            ])
            .send()
    };
    let invalid = post("zero", "save").await.expect("post");
    assert_eq!(invalid.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        page_of(invalid).await.exists("[id=limit-error]"),
        "the error sits beside the limit field"
    );

    let backtest = post("1", "backtest").await.expect("post");
    assert_eq!(backtest.status(), StatusCode::OK);
    let page = page_of(backtest).await;
    assert!(
        page.text()
            .contains("1 senders would have tripped it, and 3 invites"),
        "{page}"
    );
    // It names the sender it would catch, with a link to its page.
    assert!(
        page.text().contains("Senders it would catch (1)")
            && page
                .select("a[href=/admin/senders/default/heavy]")
                .any(|a| a.text() == "heavy (default)"),
        "{page}"
    );

    let saved = post("5", "save").await.expect("post");
    assert_eq!(saved.status(), StatusCode::SEE_OTHER);
    let limit: i64 = sqlx::query_scalar("SELECT limit_count FROM rules WHERE id = $1")
        .bind(id)
        .fetch_one(&stage.pool)
        .await
        .expect("limit");
    assert_eq!(limit, 5);
    // The same form again carries the old version: refused.
    let stale = post("6", "save").await.expect("post");
    assert_eq!(stale.status(), StatusCode::CONFLICT);

    let (_, audit) = stage.get(&browser, "/admin/audit?actor=alice").await;
    let audit = audit.text();
    assert!(audit.contains("rule_update") && audit.contains("alice"));
    let (_, system) = stage.get(&browser, "/admin/audit?actor=system").await;
    let system = system.text();
    assert!(system.contains("shadow_ban") && !system.contains("rule_update"));
    let (status, overview) = stage.get(&browser, "/admin").await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview.exists("svg") && overview.text().contains("senders awaiting review"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_admin_is_created_through_the_one_time_link() {
    let db = app::TestDb::create("dashsetup").await;
    let app = sendguard::start(&config(&db, None)).await.expect("start");
    let link = app
        .setup_url
        .clone()
        .expect("a setup link while no admin exists");
    let token = link.rsplit("token=").next().expect("token").to_owned();
    let base = format!("http://{}", app.addr);
    let browser = Stage::browser();
    let status = browser
        .get(format!("{base}/admin/setup?token={}", "0".repeat(64)))
        .send()
        .await
        .expect("get")
        .status();
    assert_eq!(status, StatusCode::NOT_FOUND, "a wrong token shows nothing");
    let page = browser
        .get(format!("{base}/admin/setup?token={token}"))
        .send()
        .await
        .expect("get");
    assert_eq!(page.status(), StatusCode::OK);
    let form = |p2: &'static str| {
        browser
            .post(format!("{base}/admin/setup"))
            .form(&[
                ("token", token.as_str()),
                ("username", "root"),
                ("password", PASSWORD),
                ("password2", p2),
            ])
            .send()
    };
    assert_eq!(
        form("something else").await.expect("post").status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let created = form(PASSWORD).await.expect("post");
    assert_eq!(created.status(), StatusCode::SEE_OTHER);
    let overview = browser
        .get(format!("{base}/admin"))
        .send()
        .await
        .expect("get");
    assert_eq!(overview.status(), StatusCode::OK, "logged in right away");
    let reuse = browser
        .get(format!("{base}/admin/setup?token={token}"))
        .send()
        .await
        .expect("get");
    assert_eq!(reuse.status(), StatusCode::NOT_FOUND, "the link works once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_is_shown_escaped() {
    let stage = Stage::new("dashhostile").await;
    let sender = "<script>alert(1)</script>";
    for n in 0..4 {
        stage.invite(sender, &format!("x{n}@example.com")).await;
    }
    stage.settle().await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let (status, page) = stage
        .get(
            &browser,
            "/admin/senders/default/%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The served markup, not the parsed text, which decodes the escapes this looks for.
    for html in [queue.source(), page.source()] {
        assert!(!html.contains("<script>"), "unescaped markup:\n{html}");
        assert!(html.contains("&lt;script&gt;") || html.contains("&#60;script&#62;"));
    }
}

/// A reviewer's page goes stale when the sender's standing changes: releasing a held invite
/// from a page loaded before the sender was shadow-banned is refused, and nothing is sent; a
/// release moves the sender's version on, so a ban decided on a page from before it is refused
/// in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_invite_is_not_released_from_a_page_older_than_the_senders_standing() {
    let stage = Stage::new("dashstale").await;
    let mut held = Vec::new();
    for n in 0..2 {
        let (status, id) = stage
            .api
            .send(
                serde_json::json!({"sender_id": "linky", "recipient": format!("s{n}@example.com"),
                "message": "see prize[.]example.com"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        held.push(id.expect("id"));
    }
    assert_eq!(stage.settle().await, 0, "both invites are held");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    let (csrf, version) = (page.field("csrf"), page.field("version"));
    let release = |id: String, version: String| {
        let (browser, base, csrf) = (browser.clone(), stage.base.clone(), csrf.clone());
        async move {
            browser
                .post(format!("{base}/admin/senders/default/linky/invites/{id}"))
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("sender", "default/linky"),
                    ("version", version.as_str()),
                    ("decision", "release"),
                ])
                .send()
                .await
                .expect("release")
                .status()
        }
    };
    // A rule shadow-bans the sender while the page is open.
    sqlx::query(
        "UPDATE senders SET state = 'shadow_banned', version = version + 1,
             state_changed_by = 'system' WHERE id = 'linky'",
    )
    .execute(&stage.pool)
    .await
    .expect("ban");
    assert_eq!(
        release(held[0].clone(), version.clone()).await,
        StatusCode::CONFLICT
    );
    assert_eq!(stage.settle().await, 0, "released from a stale page");
    // From a fresh page the release goes through, and the ban form of the page before it is
    // stale.
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    let fresh = page.field("version");
    assert_eq!(
        release(held[0].clone(), fresh.clone()).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(stage.settle().await, 1, "the released invite is delivered");
    let ban = stage
        .review(
            &browser,
            "default/linky",
            &[
                ("csrf", csrf.as_str()),
                ("version", fresh.as_str()),
                ("action", "confirm_ban"),
            ],
        )
        .await;
    assert_eq!(
        ban.status(),
        StatusCode::CONFLICT,
        "a ban on a page from before a release"
    );
}

/// A link-held invite of an active sender waits in the queue; the reviewer sees its text with
/// the link marked, releases it alone (it is delivered), and leaves a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_invite_is_reviewed_and_released_on_its_own() {
    let stage = Stage::new("dashhold").await;
    let (status, id) = stage
        .api
        .send(
            serde_json::json!({"sender_id": "linky", "recipient": "h@example.com",
            "message": "<b>Win</b> at prize[.]example.com"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let id = id.expect("id");
    stage.invite("linky", "clean@example.com").await;
    assert_eq!(stage.settle().await, 1, "only the clean invite goes out");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let row = queue.row("linky").expect("the sender's row");
    assert!(
        row.exists("a[href=/admin/senders/default/linky]")
            && row.text().contains("new-sender-links"),
        "{queue}"
    );
    // The served markup: the parsed text shows the escaped tags as the tags themselves.
    let source = queue.source();
    assert!(
        source.contains("&#60;b&#62;Win&#60;/b&#62;") && !source.contains("<b>Win"),
        "the held text, escaped: {queue}"
    );
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    assert!(
        page.select("mark")
            .any(|m| m.text() == "prize[.]example.com"),
        "{page}"
    );
    let (csrf, version) = (page.field("csrf"), page.field("version"));
    let release = browser
        .post(format!(
            "{}/admin/senders/default/linky/invites/{id}",
            stage.base
        ))
        .form(&[
            ("csrf", csrf.as_str()),
            ("sender", "default/linky"),
            ("version", version.as_str()),
            ("decision", "release"),
        ])
        .send()
        .await
        .expect("release");
    assert_eq!(release.status(), StatusCode::SEE_OTHER);
    assert_eq!(stage.settle().await, 2, "the released invite is delivered");
    let note = browser
        .post(format!("{}/admin/senders/default/linky/notes", stage.base))
        .form(&[
            ("csrf", csrf.as_str()),
            ("sender", "default/linky"),
            ("body", "known customer, ok"),
        ])
        .send()
        .await
        .expect("note");
    assert_eq!(note.status(), StatusCode::SEE_OTHER);
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    assert!(
        page.text().contains("known customer, ok") && page.text().contains("release_invite"),
        "{page}"
    );
    // The audit log names the invite the decision was about, linked to it on the sender page.
    let (_, audit) = stage.get(&browser, "/admin/audit?sender=linky").await;
    let anchor = format!("/admin/senders/default/linky#invite-{id}");
    assert!(audit.exists(&format!("a[href={anchor}]")), "{audit}");
    assert!(page.exists(&format!("[id=invite-{id}]")), "{page}");
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    assert!(
        !queue.exists("a[href=/admin/senders/default/linky]"),
        "nothing held: off the queue"
    );
}

/// "Release all held invites" releases what the reviewer's page showed: an invite held after
/// the page was loaded does not move the sender's version (a sender still sending would make
/// every page stale), so the form also carries the count of held invites it showed, and a
/// release is refused when more were held since. Nothing is sent from the stale page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_all_held_invites_leaves_those_held_after_the_page_was_loaded() {
    let stage = Stage::new("dashheldsince").await;
    let hold = |n: u32| {
        stage.api.send(serde_json::json!({"sender_id": "linky",
            "recipient": format!("since{n}@example.com"), "message": "see prize[.]example.com"}))
    };
    assert_eq!(hold(0).await.0, StatusCode::OK);
    assert_eq!(stage.settle().await, 0, "the link invite is held");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    let (csrf, version, held) = (
        page.field("csrf"),
        page.field("version"),
        page.field("held"),
    );
    assert_eq!(held, "1", "the page shows one held invite");
    // The sender sends another while the reviewer reads.
    assert_eq!(hold(1).await.0, StatusCode::OK);
    let release = |version: String, held: String| {
        let (stage, browser, csrf) = (&stage, browser.clone(), csrf.clone());
        async move {
            let fields = [
                ("csrf", csrf.as_str()),
                ("version", version.as_str()),
                ("held", held.as_str()),
                ("action", "release_held"),
                ("confirmed", "yes"),
            ];
            stage
                .review(&browser, "default/linky", &fields)
                .await
                .status()
        }
    };
    assert_eq!(
        release(version, held).await,
        StatusCode::CONFLICT,
        "a release from a page that showed fewer held invites"
    );
    assert_eq!(
        stage.settle().await,
        0,
        "nothing released from the stale page"
    );
    let (_, page) = stage.get(&browser, "/admin/senders/default/linky").await;
    let (version, held) = (page.field("version"), page.field("held"));
    assert_eq!(held, "2");
    assert_eq!(release(version, held).await, StatusCode::SEE_OTHER);
    assert_eq!(
        stage.settle().await,
        2,
        "both reach the SMTP server once seen"
    );
}

/// A decision's note is what the audit log keeps of why: one of 500 characters in any script
/// is kept whole (the form's `maxlength` counts characters, not bytes), a longer one is refused
/// with the decision rather than dropped from it, and a bulk confirm takes one page of senders
/// at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decisions_note_is_kept_whole_or_the_decision_refused() {
    let stage = Stage::new("dashnote").await;
    stage.invite("noted", "n@example.com").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, page) = stage.get(&browser, "/admin/senders/default/noted").await;
    let (csrf, version) = (page.field("csrf"), page.field("version"));
    let decide = |version: String, action: &'static str, note: String| {
        let (stage, browser, csrf) = (&stage, browser.clone(), csrf.clone());
        async move {
            let fields = [
                ("csrf", csrf.as_str()),
                ("version", version.as_str()),
                ("action", action),
                ("note", note.as_str()),
            ];
            stage
                .review(&browser, "default/noted", &fields)
                .await
                .status()
        }
    };
    let why = "д".repeat(500);
    assert_eq!(
        decide(version, "shadow_ban", why.clone()).await,
        StatusCode::SEE_OTHER
    );
    let kept: Option<String> =
        sqlx::query_scalar("SELECT note FROM audit_log WHERE action = 'shadow_ban'")
            .fetch_one(&stage.pool)
            .await
            .expect("audit");
    assert_eq!(kept.as_deref(), Some(why.as_str()), "the note, whole");

    let (_, page) = stage.get(&browser, "/admin/senders/default/noted").await;
    let version = page.field("version");
    assert_eq!(
        decide(version, "confirm_ban", "д".repeat(501)).await,
        StatusCode::BAD_REQUEST
    );
    let state = sender_state(&stage.pool, "noted").await;
    assert_eq!(
        state, "shadow_banned",
        "a refused note refuses its decision"
    );

    let picks: String = (0..26).map(|n| format!("&sender=1:1:s{n}")).collect();
    let bulk = browser
        .post(format!("{}/admin/queue/confirm", stage.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}{picks}"))
        .send()
        .await
        .expect("bulk");
    assert_eq!(bulk.status(), StatusCode::BAD_REQUEST, "more than a page");
}

/// A `hold` rule of complaints flags an active sender and holds nothing (the invite went out
/// before its complaint came): the sender waits in the review queue, counted among those
/// awaiting review, until a reviewer decides; a dismissal takes it out and leaves it active. A
/// complaint that flags it again while the page is open makes the page stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_flagged_for_a_complaint_waits_in_the_queue_until_dismissed() {
    let stage = Stage::with("dashcomplaint", async |pool| {
        rules::set(pool, "sender-complaints-daily", |r| {
            r.action = "hold".into();
            r.limit = 0;
        })
        .await
    })
    .await;
    let complain = |n: u32| {
        let api = stage.api.clone();
        async move {
            let id = api.accepted("grumbled", &format!("g{n}@example.com")).await;
            assert_eq!(api.event(&id, "complaint").await, StatusCode::ACCEPTED);
        }
    };
    complain(0).await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    let row = queue.row("grumbled").expect("the sender's row");
    assert!(
        row.exists("a[href=/admin/senders/default/grumbled]")
            && row.text().contains("sender-complaints-daily"),
        "{queue}"
    );
    let (_, overview) = stage.get(&browser, "/admin").await;
    assert!(
        overview
            .select("a[href=/admin/queue]")
            .any(|a| a.text() == "1"),
        "{overview}"
    );

    // The dismissal form of the sender page as it is now.
    let dismissal = || async {
        let (_, page) = stage.get(&browser, "/admin/senders/default/grumbled").await;
        assert!(page.actions().contains(&"dismiss"), "{page}");
        ["csrf", "version", "held"].map(|name| (name, page.field(name)))
    };
    let dismiss = |form: [(&'static str, String); 3]| {
        let (stage, browser) = (&stage, &browser);
        async move {
            let mut fields: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            fields.push(("action", "dismiss"));
            stage
                .review(browser, "default/grumbled", &fields)
                .await
                .status()
        }
    };
    let stale = dismissal().await;
    complain(1).await;
    assert_eq!(
        dismiss(stale).await,
        StatusCode::CONFLICT,
        "a dismissal from a page loaded before the second complaint's flag"
    );
    let form = dismissal().await;
    let mut fields: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fields.push(("action", "dismiss"));
    let done = stage.review(&browser, "default/grumbled", &fields).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let back = done.headers()["location"].to_str().expect("location");
    assert_eq!(back, "/admin/senders/default/grumbled?done=dismiss&n=0");
    let (_, page) = stage.get(&browser, back).await;
    assert!(
        page.text()
            .contains("Dismissed: the sender stays as it is."),
        "{page}"
    );
    let (_, queue) = stage.get(&browser, "/admin/queue").await;
    assert!(
        !queue.exists("a[href=/admin/senders/default/grumbled]"),
        "{queue}"
    );
    assert_eq!(sender_state(&stage.pool, "grumbled").await, "active");
    let (_, page) = stage.get(&browser, "/admin/senders/default/grumbled").await;
    assert!(!page.actions().contains(&"dismiss"), "decided: {page}");
    // Posted anyway, for a sender no longer awaiting review: refused, nothing audited.
    let form = ["csrf", "version", "held"].map(|name| (name, page.field(name)));
    assert_eq!(dismiss(form).await, StatusCode::CONFLICT);
    let dismissed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE sender_id = 'grumbled' AND action = 'dismiss'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(dismissed, 1);
}

/// With a settle time, a release a reviewer regrets is undone before its invites leave: they
/// are held again, the sender is shadow-banned again, and nothing reaches the recipients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_undone_before_its_invites_leave() {
    let stage = Stage::configured("dashundo", async |_| {}, |cfg| cfg.settle_secs = 60).await;
    for n in 0..6 {
        stage.invite("pills", &format!("p{n}@example.com")).await;
    }
    assert_eq!(sender_state(&stage.pool, "pills").await, "shadow_banned");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let done = stage
        .decide_now(&browser, "default/pills", "lift_and_release")
        .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(sender_state(&stage.pool, "pills").await, "active");
    let (_, page) = stage.get(&browser, "/admin/senders/default/pills").await;
    assert!(
        page.text()
            .contains("3 released invite(s) of this sender wait"),
        "{page}"
    );
    let undo = browser
        .post(format!(
            "{}/admin/senders/default/pills/undo-release",
            stage.base
        ))
        .form(&[
            ("csrf", page.field("csrf")),
            ("sender", "default/pills".into()),
        ])
        .send()
        .await
        .expect("undo");
    assert_eq!(undo.status(), StatusCode::SEE_OTHER);
    let (_, page) = stage
        .get(
            &browser,
            undo.headers()["location"].to_str().expect("location"),
        )
        .await;
    assert!(
        page.text()
            .contains("Undone: 3 released invite(s) are held again"),
        "{page}"
    );
    assert_eq!(sender_state(&stage.pool, "pills").await, "shadow_banned");
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM invites GROUP BY 1 ORDER BY 1")
            .fetch_all(&stage.pool)
            .await
            .expect("statuses");
    assert_eq!(
        statuses,
        [("held".to_owned(), 3), ("queued".to_owned(), 3)],
        "the released three held again; the first three still settling"
    );
    assert!(stage.sink.messages().is_empty(), "nothing was sent");
}

/// The sender's version, as a page loaded now would carry it.
async fn version_of(pool: &PgPool, sender: &str) -> i64 {
    sqlx::query_scalar("SELECT version FROM senders WHERE id = $1")
        .bind(sender)
        .fetch_one(pool)
        .await
        .expect("version")
}

/// The queue's bulk confirm applies only to shadow-banned senders, as the sender page's does:
/// posted for a sender banned already it would add a strike and lengthen the ban (a change of
/// term, which is for admins), and for an active one it would ban without the sender's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_confirm_changes_only_shadow_banned_senders() {
    let stage = Stage::new("dashbulkstate").await;
    sendguard::admin::accounts::add(&stage.pool, "mo", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    for n in 0..4 {
        stage.invite("spam", &format!("s{n}@example.com")).await;
    }
    stage.invite("calm", "friend@example.com").await;
    assert_eq!(sender_state(&stage.pool, "spam").await, "shadow_banned");
    let browser = Stage::browser();
    dashboard::log_in(&browser, &stage.base, "mo", PASSWORD).await;
    let confirm = |senders: Vec<String>| {
        let browser = &browser;
        let stage = &stage;
        async move {
            let (_, queue) = stage.get(browser, "/admin/queue").await;
            let mut form = vec![("csrf", queue.field("csrf")), ("confirmed", "yes".into())];
            form.extend(senders.into_iter().map(|s| ("sender", s)));
            browser
                .post(format!("{}/admin/queue/confirm", stage.base))
                .form(&form)
                .send()
                .await
                .expect("confirm")
        }
    };
    let pick = |version: i64, id: &str| format!("{version}:1:{id}");
    let first = confirm(vec![pick(version_of(&stage.pool, "spam").await, "spam")]).await;
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    assert_eq!(sender_state(&stage.pool, "spam").await, "banned");
    let standing = async || -> (i64, Option<chrono::DateTime<chrono::Utc>>) {
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM strikes WHERE sender_id = 'spam'),
                 (SELECT banned_until FROM senders WHERE id = 'spam')",
        )
        .fetch_one(&stage.pool)
        .await
        .expect("strikes")
    };
    let after_first = standing().await;
    assert_eq!(after_first.0, 1);
    // Each named at its current version, so no page is stale: the ban confirmed already and the
    // active sender are left as they are, and counted as changed.
    let again = confirm(vec![
        pick(version_of(&stage.pool, "spam").await, "spam"),
        pick(version_of(&stage.pool, "calm").await, "calm"),
    ])
    .await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        again.headers()["location"].to_str().expect("location"),
        "/admin/queue?done=confirmed&n=0&m=2"
    );
    assert_eq!(
        standing().await,
        after_first,
        "no second strike, the same end"
    );
    assert_eq!(sender_state(&stage.pool, "calm").await, "active");
}

/// A ban confirmed from a page that counted no held invite, when some were held since, is
/// refused rather than discarding what the reviewer never saw; from the page as it is now, it
/// asks first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ban_confirmed_from_a_page_that_counted_fewer_held_invites_is_refused() {
    let stage = Stage::new("dashbanunseen").await;
    stage.invite("quiet", "q0@example.com").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let form_of = |page: &Page, action: &str| {
        ["csrf", "version", "held"]
            .map(|name| (name.to_owned(), page.field(name)))
            .into_iter()
            .chain([("action".to_owned(), action.to_owned())])
            .collect::<Vec<_>>()
    };
    let post = |form: Vec<(String, String)>| {
        let (stage, browser) = (&stage, &browser);
        async move {
            let fields: Vec<(&str, &str)> =
                form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            stage.review(browser, "default/quiet", &fields).await
        }
    };
    let (_, page) = stage.get(&browser, "/admin/senders/default/quiet").await;
    let banned = post(form_of(&page, "shadow_ban")).await;
    assert_eq!(banned.status(), StatusCode::SEE_OTHER);
    let (_, page) = stage.get(&browser, "/admin/senders/default/quiet").await;
    assert_eq!(page.field("held"), "0");
    for n in 1..3 {
        stage.invite("quiet", &format!("q{n}@example.com")).await;
    }
    let stale = post(form_of(&page, "confirm_ban")).await;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'quiet' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held");
    assert_eq!(held, 2, "nothing discarded");
    assert_eq!(sender_state(&stage.pool, "quiet").await, "shadow_banned");
    let (_, page) = stage.get(&browser, "/admin/senders/default/quiet").await;
    let asked = post(form_of(&page, "confirm_ban")).await;
    assert_eq!(asked.status(), StatusCode::OK);
    let asked = page_of(asked).await;
    assert!(asked.text().contains("discard 2 held invites"), "{asked}");
}

/// Undoing a release that lifted no ban holds the invites again and leaves the sender as it
/// was: active, not shadow-banned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undoing_a_release_bans_no_sender_the_release_did_not_lift() {
    let stage = Stage::configured(
        "dashundohold",
        async |pool| rules::set(pool, "sender-hourly", |r| r.action = "hold".into()).await,
        |cfg| cfg.settle_secs = 60,
    )
    .await;
    for n in 0..5 {
        stage.invite("eager", &format!("e{n}@example.com")).await;
    }
    assert_eq!(sender_state(&stage.pool, "eager").await, "active");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (_, page) = stage.get(&browser, "/admin/senders/default/eager").await;
    assert_eq!(page.field("held"), "2");
    let done = stage
        .decide_now(&browser, "default/eager", "release_held")
        .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let undo = browser
        .post(format!(
            "{}/admin/senders/default/eager/undo-release",
            stage.base
        ))
        .form(&[
            ("csrf", page.field("csrf")),
            ("sender", "default/eager".into()),
        ])
        .send()
        .await
        .expect("undo");
    assert_eq!(undo.status(), StatusCode::SEE_OTHER);
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'eager' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held");
    assert_eq!(held, 2, "held again");
    assert_eq!(sender_state(&stage.pool, "eager").await, "active");
}

/// Admins manage the apps' keys and the dashboard's accounts from the dashboard: a key shown
/// once works at once and stops working when revoked (after a confirmation); an account added
/// logs in with its role, and its sessions end when disabled. Moderators get 403 on all of it,
/// no one disables their own account, and the last admin is never disabled. Each change is
/// audited under the admin's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_manage_keys_and_accounts_and_moderators_cannot() {
    let stage = Stage::new("dashaccess").await;
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let (status, keys) = stage.get(&browser, "/admin/keys").await;
    assert_eq!(status, StatusCode::OK);
    let csrf = keys.field("csrf");
    let post = |path: &str, form: Vec<(&str, &str)>| {
        browser
            .post(format!("{}{path}", stage.base))
            .form(&form)
            .send()
    };
    let created = post(
        "/admin/keys",
        vec![("csrf", &csrf), ("name", "partner-web"), ("app", "default")],
    )
    .await
    .expect("create");
    assert_eq!(created.status(), StatusCode::OK);
    let key = page_of(created).await.field("key");
    assert!(key.starts_with("sg_"), "{key}");
    let with_key = |key: String| {
        let api = Api::new(stage.base.clone(), key);
        async move {
            api.invite(serde_json::json!({"sender_id": "u1", "recipient": "ana@example.com"}))
                .await
                .status()
        }
    };
    assert_eq!(with_key(key.clone()).await, StatusCode::OK);
    let taken = post(
        "/admin/keys",
        vec![("csrf", &csrf), ("name", "partner-web"), ("app", "default")],
    )
    .await
    .expect("create again");
    assert_eq!(taken.status(), StatusCode::BAD_REQUEST);

    let asked = post("/admin/keys/partner-web/revoke", vec![("csrf", &csrf)])
        .await
        .expect("revoke");
    assert_eq!(asked.status(), StatusCode::OK);
    assert!(page_of(asked).await.text().contains("cannot be restored"));
    assert_eq!(
        with_key(key.clone()).await,
        StatusCode::OK,
        "not before it is confirmed"
    );
    let revoked = post(
        "/admin/keys/partner-web/revoke",
        vec![("csrf", &csrf), ("confirmed", "yes")],
    )
    .await
    .expect("revoke");
    assert_eq!(revoked.status(), StatusCode::SEE_OTHER);
    let refused = app::wait_for(std::time::Duration::from_secs(5), || {
        let key = key.clone();
        async move { with_key(key).await == StatusCode::UNAUTHORIZED }
    })
    .await;
    assert!(refused, "the revoked key still works");

    let added = post(
        "/admin/admins",
        vec![
            ("csrf", &csrf),
            ("username", "mo"),
            ("role", "moderator"),
            ("password", PASSWORD),
        ],
    )
    .await
    .expect("add");
    assert_eq!(added.status(), StatusCode::SEE_OTHER);
    let moderator = Stage::browser();
    let logged_in = dashboard::log_in(&moderator, &stage.base, "mo", PASSWORD).await;
    assert_eq!(logged_in.status(), StatusCode::SEE_OTHER);
    for path in ["/admin/keys", "/admin/admins"] {
        assert_eq!(
            stage.get(&moderator, path).await.0,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }
    let (_, queue) = stage.get(&moderator, "/admin/queue").await;
    assert!(!queue.exists("a[href=/admin/keys]"), "{queue}");
    let forged = moderator
        .post(format!("{}/admin/keys", stage.base))
        .form(&[
            ("csrf", queue.field("csrf")),
            ("name", "mine".into()),
            ("app", "default".into()),
        ])
        .send()
        .await
        .expect("forged");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    let own = post(
        "/admin/admins/alice/disable",
        vec![("csrf", &csrf), ("confirmed", "yes")],
    )
    .await
    .expect("own");
    assert_eq!(own.status(), StatusCode::BAD_REQUEST);
    let disabled = post(
        "/admin/admins/mo/disable",
        vec![("csrf", &csrf), ("confirmed", "yes")],
    )
    .await
    .expect("disable");
    assert_eq!(disabled.status(), StatusCode::SEE_OTHER);
    let gone = moderator
        .get(format!("{}/admin/queue", stage.base))
        .send()
        .await
        .expect("queue");
    assert_eq!(
        gone.status(),
        StatusCode::SEE_OTHER,
        "sent to the login page"
    );
    assert!(matches!(
        sendguard::admin::accounts::disable(&stage.pool, "alice", "test").await,
        Err(sendguard::admin::accounts::AccountError::LastAdmin(_))
    ));

    let audited: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE actor = 'alice' AND action LIKE ANY
             (ARRAY['api_key_%', 'admin_%']) ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(
        audited,
        [
            "api_key_create",
            "api_key_revoke",
            "admin_add",
            "admin_disable"
        ]
    );
}

/// After a lift, a later release of one invite is undone without the ban coming back: only
/// the invites the lift itself released bring it back when held again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undoing_a_release_after_a_lift_restores_only_the_lifts_own_ban() {
    let stage = Stage::configured("dashundolater", async |_| {}, |cfg| cfg.settle_secs = 60).await;
    for n in 0..4 {
        stage.invite("back", &format!("b{n}@example.com")).await;
    }
    assert_eq!(sender_state(&stage.pool, "back").await, "shadow_banned");
    let browser = Stage::browser();
    stage.log_in(&browser, PASSWORD).await;
    let lifted = stage
        .decide_now(&browser, "default/back", "lift_and_discard")
        .await;
    assert_eq!(lifted.status(), StatusCode::SEE_OTHER);
    assert_eq!(sender_state(&stage.pool, "back").await, "active");
    // A link from a sender still new is held by `new-sender-links`; the sender stays active.
    let (status, id) = stage
        .api
        .send(
            serde_json::json!({"sender_id": "back", "recipient": "b9@example.com",
            "message": "see prize[.]example.com"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let id = id.expect("id");
    assert_eq!(sender_state(&stage.pool, "back").await, "active");
    let (_, page) = stage.get(&browser, "/admin/senders/default/back").await;
    let released = browser
        .post(format!(
            "{}/admin/senders/default/back/invites/{id}",
            stage.base
        ))
        .form(&[
            ("csrf", page.field("csrf")),
            ("sender", "default/back".into()),
            ("version", page.field("version")),
            ("decision", "release".into()),
        ])
        .send()
        .await
        .expect("release");
    assert_eq!(released.status(), StatusCode::SEE_OTHER);
    let undo = browser
        .post(format!(
            "{}/admin/senders/default/back/undo-release",
            stage.base
        ))
        .form(&[
            ("csrf", page.field("csrf")),
            ("sender", "default/back".into()),
        ])
        .send()
        .await
        .expect("undo");
    assert_eq!(undo.status(), StatusCode::SEE_OTHER);
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id::text = $1")
        .bind(&id)
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(status, "held", "held again");
    assert_eq!(sender_state(&stage.pool, "back").await, "active");
}
