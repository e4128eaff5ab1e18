//! The dashboard in a real browser (headless Chromium over WebDriver) against a running
//! instance, Postgres, Redis and an SMTP server on 127.0.0.1. It also takes the screenshots in
//! docs/screenshots/.

use sendguard::admin::accounts::Role;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key};
use crate::support::browser::Browser;
use reqwest::StatusCode;
use serde_json::json;

const PASSWORD: &str = "correct horse battery";

/// Where a screenshot goes: docs/screenshots/ with SENDGUARD_SCREENSHOTS=1 (to refresh the
/// README's pictures), a temporary folder otherwise.
fn shot(name: &str) -> PathBuf {
    let dir = if std::env::var("SENDGUARD_SCREENSHOTS").is_ok_and(|v| v == "1") {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots")
    } else {
        std::env::temp_dir().join(format!("sendguard-screenshots-{}", std::process::id()))
    };
    dir.join(format!("{name}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_reviews_senders_and_tunes_a_rule_in_the_browser() {
    let stage = Stage::start("browser", &[]).await;
    let pool = &stage.pool;
    sendguard::admin::accounts::add(pool, "alice", PASSWORD, Role::Admin, "test")
        .await
        .expect("admin");
    let base = stage.base();
    let api = Api::new(base.clone(), api_key(pool).await);
    let invite = |sender: String, recipient: String| {
        let request = api.invite(json!({"sender_id": sender, "recipient": recipient, "sender_name": "Bo", "resource": "doc_42"}));
        async move {
            assert_eq!(request.await.status(), StatusCode::OK);
        }
    };
    let settle = || stage.settle();
    let b = Browser::start().await;

    // Not logged in: sent to the login page.
    b.goto(&format!("{base}/admin/queue")).await;
    assert!(b.wait_for_url("/admin/login").await, "{}", b.url().await);
    b.screenshot(&shot("login")).await;

    // A wrong password, then the right one.
    b.fill("#username", "alice").await;
    b.fill("#password", "wrong password").await;
    b.click("form[action='/admin/login'] button").await;
    assert!(b.wait_for_text("Wrong username or password").await);
    b.fill("#password", PASSWORD).await;
    b.click("form[action='/admin/login'] button").await;
    assert!(b.wait_for_url("/admin/queue").await, "{}", b.url().await);

    // sender-hourly to 5 through the form; an invalid value first.
    let rule_id: i64 = sqlx::query_scalar("SELECT id FROM rules WHERE name = 'sender-hourly'")
        .fetch_one(pool)
        .await
        .expect("rule");
    b.goto(&format!("{base}/admin/rules")).await;
    b.screenshot(&shot("rules")).await;
    b.click(&format!("a[href='/admin/rules/{rule_id}']")).await;
    assert!(b.wait_for_text("Backtest on the last 24 hours").await);
    b.fill("#limit", "five").await;
    b.click("button[value='save']").await;
    assert!(
        b.wait_for_text("id=\"limit-error\"").await,
        "the error shows beside the field"
    );
    b.screenshot(&shot("rule-edit-error")).await;
    b.fill("#limit", "5").await;
    b.click("button[value='save']").await;
    assert!(
        b.wait_for_url("/admin/rules?done=").await,
        "{}",
        b.url().await
    );
    // Every instance applies a saved rule within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // A sender over it appears in the review queue.
    for n in 0..7 {
        invite("eager".into(), format!("e{n}@example.com")).await;
    }
    // A new sender's link: that one invite is held for review.
    let link = api.invite(json!({"sender_id": "fresh", "recipient": "f@example.net",
        "sender_name": "Fresh", "message": "Claim your prize at http://scam.example now"}));
    assert_eq!(link.await.status(), StatusCode::OK);
    assert_eq!(settle().await, 5);
    b.goto(&format!("{base}/admin/queue")).await;
    assert!(b.wait_for_text("Review queue").await);
    let page = b.source().await;
    assert!(
        page.contains("/admin/senders/default/eager") && page.contains("6 / 5"),
        "{page}"
    );
    b.screenshot(&shot("queue")).await;

    // Lift and release: the held invites reach the SMTP server.
    b.click("a[href='/admin/senders/default/eager']").await;
    assert!(b.wait_for_text("Live counters").await);
    b.screenshot(&shot("sender")).await;
    b.fill("#note", "a busy but real customer").await;
    b.click("button[value='lift_and_release']").await;
    // It sends mail: a page of its own asks to confirm, with the count.
    assert!(
        b.wait_for_text("Confirm: Lift ban and release 2 held invites")
            .await
    );
    b.screenshot(&shot("confirm")).await;
    b.click("button.danger[type='submit']").await;
    assert!(
        b.wait_for_text("Done: lift and release (2 held invite(s) changed).")
            .await
    );
    assert_eq!(settle().await, 7);

    // Another sender: confirm the ban; later invites are held and never delivered.
    for n in 0..7 {
        invite("spammy".into(), format!("s{n}@example.org")).await;
    }
    assert_eq!(settle().await, 12);
    b.goto(&format!("{base}/admin/senders/default/spammy"))
        .await;
    b.click("button[value='confirm_ban']").await;
    assert!(b.wait_for_text("Confirm: Confirm ban and discard").await);
    b.click("button.danger[type='submit']").await;
    assert!(b.wait_for_text("Done: confirm ban").await);
    for n in 7..10 {
        invite("spammy".into(), format!("s{n}@example.org")).await;
    }
    assert_eq!(settle().await, 12, "nothing more from a confirmed spammer");
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'spammy' AND status = 'held'",
    )
    .fetch_one(pool)
    .await
    .expect("held");
    assert_eq!(held, 3);

    // The link-held invite: its text with the link marked, released on its own.
    b.goto(&format!("{base}/admin/senders/default/fresh")).await;
    assert!(b.wait_for_text("<mark>http://scam.example</mark>").await);
    b.screenshot(&shot("sender-held")).await;
    b.click("button[value='release']").await;
    assert!(b.wait_for_text("Done: the invite was decided.").await);
    assert_eq!(settle().await, 13, "the released invite is delivered");

    // A form posted with this browser's session but without the page's CSRF token: refused.
    let session = b.cookie("sg_session").await.expect("session cookie");
    let forged = reqwest::Client::new()
        .post(format!("{base}/admin/senders/default/eager/review"))
        .header("cookie", format!("sg_session={session}"))
        .form(&[
            ("csrf", "f".repeat(64).as_str()),
            ("version", "1"),
            ("action", "confirm_ban"),
        ])
        .send()
        .await
        .expect("forged post");
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);

    // A key for an app, made through the form and shown once.
    b.goto(&format!("{base}/admin/keys")).await;
    b.fill("#key-name", "browser-web").await;
    b.click("form[action='/admin/keys'] button").await;
    assert!(
        b.wait_for_text("This is the only time the key is shown")
            .await,
        "{}",
        b.source().await
    );
    b.screenshot(&shot("key-created")).await;

    // The audit log names the admin on every action.
    b.goto(&format!("{base}/admin/audit?actor=alice")).await;
    let page = b.source().await;
    for action in [
        "rule_update",
        "lift_and_release",
        "confirm_ban",
        "api_key_create",
    ] {
        assert!(page.contains(action), "{action} missing from the audit log");
    }
    b.screenshot(&shot("audit")).await;
    b.goto(&format!("{base}/admin")).await;
    assert!(b.wait_for_text("<svg").await);
    b.screenshot(&shot("overview")).await;

    b.close().await;
}

/// A moderator reviews a sender banned for complaints: the queue names the rule, the sender
/// page shows the text of the invites that were complained about, marked, and the decision
/// applies in one click (nothing held, so nothing to confirm), after which it is offered no
/// more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderator_reads_what_a_sender_banned_for_complaints_sent() {
    let stage = Stage::start("browser_complaints", &[]).await;
    let pool = &stage.pool;
    sendguard::admin::accounts::add(pool, "mona", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    let base = stage.base();
    let api = Api::new(base.clone(), api_key(pool).await);
    let pitch = "Your parcel is waiting, call +1 555 0100 to claim it";
    let mut ids = Vec::new();
    for n in 0..3 {
        let (status, id) = api
            .send(
                json!({"sender_id": "parcel", "recipient": format!("p{n}@example.org"),
                         "sender_name": "Parcel desk", "message": pitch}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        ids.push(id.expect("id"));
    }
    assert_eq!(stage.settle().await, 3);
    for id in &ids {
        assert_eq!(api.event(id, "complaint").await, StatusCode::ACCEPTED);
    }
    assert_eq!(
        crate::support::app::sender_state(pool, "parcel").await,
        "shadow_banned",
        "three complaints are over sender-complaints-daily (2)"
    );

    let b = Browser::start().await;
    b.goto(&format!("{base}/admin/login")).await;
    b.fill("#username", "mona").await;
    b.fill("#password", PASSWORD).await;
    b.click("form[action='/admin/login'] button").await;
    assert!(b.wait_for_url("/admin/queue").await, "{}", b.url().await);
    assert!(b.wait_for_text("sender-complaints-daily").await);
    b.click("a[href='/admin/senders/default/parcel']").await;
    assert!(b.wait_for_text("Live counters").await);
    let page = b.source().await;
    let reported = page.matches("<strong>complaint</strong>").count();
    assert_eq!(reported, 3, "each complained-about invite is marked");
    assert!(page.contains(pitch), "the text that was complained about");
    assert!(
        !page.contains("value=\"shadow_ban\""),
        "already shadow-banned"
    );
    b.goto(&format!(
        "{base}/admin/senders/default/parcel#invite-{}",
        ids[2]
    ))
    .await;
    assert!(b.wait_for_text("Live counters").await);
    b.screenshot(&shot("sender-complaints")).await;
    b.click("button[value='confirm_ban']").await;
    assert!(b.wait_for_text("Done: confirm ban").await);
    assert_eq!(
        crate::support::app::sender_state(pool, "parcel").await,
        "banned"
    );
    assert!(
        !b.source().await.contains("value=\"confirm_ban\""),
        "no confirm for a banned sender"
    );
    b.close().await;
}

/// A moderator finds a campaign as one row of the review queue, reads it on its own page and
/// bans all its senders with one confirmed decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderator_bans_a_campaign_in_one_decision() {
    let stage = Stage::start("browser_campaign", &[]).await;
    let pool = &stage.pool;
    sendguard::admin::accounts::add(pool, "mona", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    let base = stage.base();
    let api = Api::new(base.clone(), api_key(pool).await);
    let created = crate::campaigns::year_ago();
    for account in 0..8 {
        for n in 0..2 {
            let (status, _) = api
                .send(json!({
                    "sender_id": format!("acct{account:02}"),
                    "recipient": format!("stranger{account}x{n}@mail.example"),
                    "message": crate::campaigns::pitch(account, n),
                    "sender_created_at": created,
                }))
                .await;
            assert_eq!(status, StatusCode::OK);
        }
    }
    assert_eq!(stage.settle().await, 10, "the first five senders' invites");

    let b = Browser::start().await;
    b.goto(&format!("{base}/admin/login")).await;
    b.fill("#username", "mona").await;
    b.fill("#password", PASSWORD).await;
    b.click("form[action='/admin/login'] button").await;
    assert!(b.wait_for_url("/admin/queue").await, "{}", b.url().await);
    assert!(b.wait_for_text("#1, text").await, "the campaign's row");
    assert!(
        !b.source().await.contains("acct07"),
        "its senders are not rows of their own"
    );
    b.goto(&format!("{base}/admin/campaigns")).await;
    assert!(b.wait_for_text("your parcel is waiting").await);
    b.screenshot(&shot("campaigns")).await;
    b.click("a[href='/admin/campaigns/1']").await;
    assert!(b.wait_for_text("Decide for the whole campaign").await);
    b.screenshot(&shot("campaign")).await;
    b.fill("#campaign-note", "parcel scam, eight accounts")
        .await;
    b.click("button[value='ban_all']").await;
    assert!(b.wait_for_text("Confirm: Ban every sender").await);
    b.click("form button.danger").await;
    assert!(
        b.wait_for_text("Banned 8 sender(s)").await,
        "{}",
        b.source().await
    );
    let banned: i64 = sqlx::query_scalar("SELECT count(*) FROM senders WHERE state = 'banned'")
        .fetch_one(pool)
        .await
        .expect("banned");
    assert_eq!(banned, 8);
    b.close().await;
}

/// A moderator confirms a ban for a term picked on the sender page, then answers the sender's
/// appeal from the appeals page: granted, with a reply, the ban lifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moderator_confirms_a_ban_with_a_term_and_grants_its_appeal() {
    let stage = Stage::start(
        "browser_appeals",
        &["UPDATE rules SET limit_count = 3 WHERE name = 'sender-hourly'"],
    )
    .await;
    let pool = &stage.pool;
    sendguard::admin::accounts::add(pool, "mona", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    let base = stage.base();
    let api = Api::new(base.clone(), api_key(pool).await);
    for n in 0..4 {
        let invite = api.invite(
            json!({"sender_id": "sorry", "recipient": format!("team{n}@example.org"),
            "sender_name": "Ana", "message": "Here are the notes from today's stand-up"}),
        );
        assert_eq!(invite.await.status(), StatusCode::OK);
    }
    assert_eq!(stage.settle().await, 3);

    let b = Browser::start().await;
    b.goto(&format!("{base}/admin/login")).await;
    b.fill("#username", "mona").await;
    b.fill("#password", PASSWORD).await;
    b.click("form[action='/admin/login'] button").await;
    assert!(b.wait_for_url("/admin/queue").await, "{}", b.url().await);
    b.goto(&format!("{base}/admin/senders/default/sorry")).await;
    assert!(b.wait_for_text("Term of a ban").await);
    b.click("#term option[value='1d']").await;
    b.click("button[value='confirm_ban']").await;
    assert!(
        b.wait_for_text("The ban's term: <strong>1 day</strong>")
            .await
    );
    b.click("button.danger[type='submit']").await;
    assert!(b.wait_for_text("Done: confirm ban").await);
    let left: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM banned_until - now())::float8 FROM senders
         WHERE id = 'sorry' AND state = 'banned'",
    )
    .fetch_one(pool)
    .await
    .expect("banned");
    assert!(left > 23.0 * 3600.0 && left <= 24.0 * 3600.0, "{left}");

    let (status, appeal) = api
        .appeal("sorry", "These were my own colleagues; please look again.")
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{appeal}");
    let id = appeal["id"].as_str().expect("id").to_owned();
    b.goto(&format!("{base}/admin/appeals")).await;
    assert!(b.wait_for_text("my own colleagues").await);
    assert!(
        b.source().await.contains("sender-hourly"),
        "the flag beside it"
    );
    b.screenshot(&shot("appeals")).await;
    b.fill(
        &format!("#reply-{id}"),
        "Sorry for the trouble: your invitations are back on.",
    )
    .await;
    b.click("button[value='grant_discard']").await;
    assert!(b.wait_for_text("Appeal granted").await);
    assert!(b.wait_for_text("No appeal is open.").await);
    let (state, status, reply): (String, String, Option<String>) = sqlx::query_as(
        "SELECT s.state, a.status, a.reply FROM senders s
         JOIN appeals a ON a.app_id = s.app_id AND a.sender_id = s.id WHERE s.id = 'sorry'",
    )
    .fetch_one(pool)
    .await
    .expect("decided");
    assert_eq!(
        (state.as_str(), status.as_str(), reply.as_deref()),
        (
            "active",
            "granted",
            Some("Sorry for the trouble: your invitations are back on.")
        )
    );
    b.close().await;
}
