//! Bans by hand (docs/DESIGN.md §3e): from the sender page, with a term and a note, a term an
//! admin changes and a moderator may not; and `sendguard sender ban|lift`, audited under the
//! operator's name.

use std::process::{Command, Stdio};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use sendguard::admin::accounts::Role;

use crate::lifecycle::Stage;
use crate::support::app::sender_state;
use crate::support::dashboard;
use crate::support::html;

const PASSWORD: &str = "correct horse battery";

async fn state_and_term(stage: &Stage, sender: &str) -> (String, Option<DateTime<Utc>>) {
    let state = sender_state(&stage.pool, sender).await;
    (state, stage.banned_until(sender).await)
}

fn days_from_now(until: Option<DateTime<Utc>>) -> i64 {
    until.map_or(-1, |u| {
        (u - Utc::now() + chrono::Duration::minutes(5)).num_days()
    })
}

/// An admin bans an active sender from its page for 30 days with a note; changes the term to 1
/// day; a moderator is refused the change (403). Each step is audited under the admin's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_banned_by_hand_from_its_page_takes_the_picked_term() {
    let stage = Stage::new("handban").await;
    for (name, role) in [("alice", Role::Admin), ("mona", Role::Moderator)] {
        sendguard::admin::accounts::add(&stage.pool, name, PASSWORD, role, "test")
            .await
            .expect("admin");
    }
    stage.burst("reported", 0, 1).await;
    let base = stage.base();
    let alice = dashboard::client();
    dashboard::log_in(&alice, &base, "alice", PASSWORD).await;
    let path = format!("{base}/admin/senders/drawbox/reported");
    let page = html::parse(
        &alice
            .get(&path)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("body"),
    );
    assert!(page.actions().contains(&"ban"), "{page}");
    assert!(
        page.select("option[selected]")
            .any(|o| o.attr("value") == Some("7d")),
        "the ladder's first term is offered: {page}"
    );
    let (csrf, version) = (page.field("csrf"), page.field("version"));
    let done = alice
        .post(format!("{path}/review"))
        .form(&[
            ("csrf", csrf.as_str()),
            ("sender", "drawbox/reported"),
            ("version", version.as_str()),
            ("held", "0"),
            ("action", "ban"),
            ("term", "30d"),
            ("note", "reported by three users to support"),
        ])
        .send()
        .await
        .expect("ban");
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let (state, until) = state_and_term(&stage, "reported").await;
    assert_eq!((state.as_str(), days_from_now(until)), ("banned", 30));

    let page = html::parse(
        &alice
            .get(&path)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("body"),
    );
    assert!(
        page.text().contains("30 days"),
        "the strike is listed: {page}"
    );
    let term_form = [
        ("csrf", csrf.clone()),
        ("sender", "drawbox/reported".into()),
        ("version", page.field("version")),
        ("term", "1d".into()),
        ("note", "first offence after all".into()),
    ];
    let mona = dashboard::client();
    dashboard::log_in(&mona, &base, "mona", PASSWORD).await;
    let mona_csrf = html::parse(
        &mona
            .get(&path)
            .send()
            .await
            .expect("page")
            .text()
            .await
            .expect("body"),
    )
    .field("csrf");
    let mut refused = term_form.clone();
    refused[0].1 = mona_csrf;
    let resp = mona
        .post(format!("{path}/term"))
        .form(&refused)
        .send()
        .await
        .expect("term");
    assert_eq!(
        resp.status(),
        StatusCode::FORBIDDEN,
        "a moderator changes no term"
    );
    let resp = alice
        .post(format!("{path}/term"))
        .form(&term_form)
        .send()
        .await
        .expect("term");
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let (_, until) = state_and_term(&stage, "reported").await;
    assert_eq!(days_from_now(until), 1);
    let audited: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT actor, action, note FROM audit_log WHERE sender_id = 'reported'
             AND action IN ('ban', 'change_term') ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(
        audited,
        [
            (
                "alice".to_string(),
                "ban".to_string(),
                Some("reported by three users to support".to_string())
            ),
            (
                "alice".to_string(),
                "change_term".to_string(),
                Some("first offence after all".to_string())
            ),
        ]
    );
}

/// `sendguard sender ban APP SENDER_ID --for 7d --note TEXT` and `sender lift … --mistake`:
/// audited under SENDGUARD_OPERATOR, the strike kept by a plain lift and removed by a mistaken
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_bans_and_lifts_under_the_operators_name() {
    let stage = Stage::new("cliban").await;
    stage.burst("noisy", 0, 1).await;
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sendguard"))
            .args(args)
            .env("DATABASE_URL", &stage.db.url)
            .env("REDIS_URL", crate::support::redis_url())
            .env("SENDGUARD_KEY_PREFIX", stage.prefix.as_str())
            .env("SENDGUARD_OPERATOR", "ops-oncall")
            .stdin(Stdio::null())
            .output()
            .expect("run sendguard");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, said) = cli(&[
        "sender",
        "ban",
        "drawbox",
        "noisy",
        "--for",
        "7d",
        "--note",
        "abuse desk ticket 42",
    ]);
    assert!(ok, "{said}");
    assert!(said.contains("banned until"), "{said}");
    let (state, until) = state_and_term(&stage, "noisy").await;
    assert_eq!((state.as_str(), days_from_now(until)), ("banned", 7));
    let (ok, said) = cli(&["sender", "ban", "drawbox", "noisy"]);
    assert!(!ok && said.contains("banned already"), "{said}");
    let (ok, said) = cli(&["sender", "lift", "drawbox", "noisy"]);
    assert!(ok, "{said}");
    assert_eq!(sender_state(&stage.pool, "noisy").await, "active");
    let (ok, said) = cli(&["sender", "ban", "drawbox", "noisy", "--for", "permanent"]);
    assert!(ok && said.contains("permanently"), "{said}");
    let (ok, said) = cli(&[
        "sender",
        "lift",
        "drawbox",
        "noisy",
        "--mistake",
        "--note",
        "wrong account",
    ]);
    assert!(ok, "{said}");
    let strikes: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT term, by_actor, removed_at IS NOT NULL FROM strikes WHERE sender_id = 'noisy'
         ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("strikes");
    assert_eq!(
        strikes,
        [
            ("7d".to_string(), "ops-oncall".to_string(), false),
            ("permanent".to_string(), "ops-oncall".to_string(), true),
        ]
    );
    let audited: Vec<(String, String)> = sqlx::query_as(
        "SELECT actor, action FROM audit_log WHERE sender_id = 'noisy'
             AND actor = 'ops-oncall' ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    let actions: Vec<&str> = audited.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(
        actions,
        ["ban", "lift_and_discard", "ban", "lift_and_discard"]
    );
    let (ok, said) = cli(&["sender", "ban", "drawbox", "never-seen"]);
    assert!(!ok && said.contains("has sent an invite"), "{said}");
}
