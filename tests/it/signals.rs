//! Signals beyond volume against the real Postgres, Redis and SMTP sink: links from new
//! senders held, distinct recipients counted, outcomes reported through the API and by the mail
//! server, the hold action and its review, ban evasion, repeat offenders and acceptance.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, app_key, execute, flags_done, sender_state, wait_for};
use crate::support::rules;
use crate::support::smtp::SmtpSink;

async fn statuses(pool: &PgPool, sender: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT status, count(*) FROM invites WHERE sender_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(sender)
    .fetch_all(pool)
    .await
    .expect("statuses")
}

fn counts(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

/// A new sender's invite with a link is held for review (the sender flagged, its state
/// unchanged) and never delivered; its next clean invite is delivered, and an old sender's link
/// goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_from_new_senders_are_held_and_the_next_clean_invite_goes_out() {
    let stage = Stage::start("links", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let spam = "Claim your prize at http://scam.example";
    let (status, _) = api
        .send(json!({"sender_id": "newbie", "recipient": "a@example.com", "message": spam}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api
        .send(
            json!({"sender_id": "newbie", "recipient": "b@example.com", "message": "Join my doc"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let month_ago = (chrono::Utc::now() - chrono::Duration::days(30)).to_rfc3339();
    let (status, _) = api
        .send(json!({"sender_id": "veteran", "recipient": "c@example.com",
                     "message": "Notes at docs.example.com/q3", "sender_created_at": month_ago}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let settled = stage.settle().await;
    assert_eq!(settled, 2, "the clean invite and the veteran's");
    let delivered: Vec<String> = stage
        .sink
        .messages()
        .iter()
        .flat_map(|m| m.to.clone())
        .collect();
    assert!(
        !delivered.contains(&"a@example.com".to_owned()),
        "{delivered:?}"
    );
    assert_eq!(
        statuses(&stage.pool, "newbie").await,
        counts(&[("held", 1), ("sent", 1)])
    );
    flags_done(&stage.pool).await;
    assert_eq!(
        sender_state(&stage.pool, "newbie").await,
        "active",
        "a hold changes no state"
    );
    let (rule, action): (String, String) =
        sqlx::query_as("SELECT rule_name, action FROM flags WHERE sender_id = 'newbie'")
            .fetch_one(&stage.pool)
            .await
            .expect("flag");
    assert_eq!(
        (rule.as_str(), action.as_str()),
        ("new-sender-links", "hold")
    );
}

/// A link broken by a character that draws nothing (a zero-width space, a soft hyphen) or
/// joined by a look-alike dot reads as the link to the recipient, and is held as one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_disguised_by_invisible_characters_is_held() {
    let stage = Stage::start("links_invisible", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let disguised = [
        "visit evil-site.\u{200b}com today",
        "visit evil-site.c\u{ad}om today",
        "visit evil-site\u{2024}com today",
        "visit https://evil-\u{2060}site.com today",
    ];
    for (n, message) in disguised.iter().enumerate() {
        let (status, _) = api
            .send(
                json!({"sender_id": format!("new{n}"), "recipient": format!("r{n}@example.com"),
                         "message": message}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(stage.settle().await, 0, "none delivered");
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE status = 'held'")
        .fetch_one(&stage.pool)
        .await
        .expect("held");
    assert_eq!(held, disguised.len() as i64);
}

/// Distinct recipients, not invites: 50 invites to the same 3 people stay within a limit of 3,
/// the fourth person trips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fourth_distinct_recipient_trips_a_limit_of_three() {
    let stage = Stage::start_prepared(
        "distinct",
        async |pool| {
            rules::set(pool, "sender-distinct-recipients-daily", |r| r.limit = 3).await;
            rules::set(pool, "sender-hourly", |r| r.enabled = false).await;
            rules::set(pool, "recipient-daily", |r| r.enabled = false).await;
        },
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for n in 0..50 {
        api.accepted("team-lead", &format!("colleague{}@example.com", n % 3))
            .await;
    }
    assert_eq!(sender_state(&stage.pool, "team-lead").await, "active");
    api.accepted("team-lead", "stranger@example.com").await;
    flags_done(&stage.pool).await;
    assert_eq!(
        sender_state(&stage.pool, "team-lead").await,
        "shadow_banned"
    );
    let observed: i64 = sqlx::query_scalar(
        "SELECT observed FROM flags WHERE rule_name = 'sender-distinct-recipients-daily'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("flag");
    assert_eq!(observed, 4);
}

/// Two recipients picked offline because 4 bytes of their plain SHA-256 are the same count as
/// two: what a distinct count keeps is keyed with the deployment's secret, so a spammer cannot
/// search a list of addresses for pairs that would count once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipients_that_collide_in_a_public_hash_count_as_two() {
    let (first, second) = colliding_recipients();
    let stage = Stage::start_prepared(
        "collide",
        async |pool| {
            rules::set(pool, "sender-distinct-recipients-daily", |r| r.limit = 1).await;
            rules::set(pool, "sender-hourly", |r| r.enabled = false).await;
            rules::set(pool, "recipient-daily", |r| r.enabled = false).await;
        },
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    api.accepted("picker", &first).await;
    assert_eq!(sender_state(&stage.pool, "picker").await, "active");
    api.accepted("picker", &second).await;
    flags_done(&stage.pool).await;
    assert_eq!(sender_state(&stage.pool, "picker").await, "shadow_banned");
}

/// Two addresses whose SHA-256 starts with the same 4 bytes: a birthday search, about 80,000
/// hashes.
fn colliding_recipients() -> (String, String) {
    use sha2::{Digest, Sha256};
    let mut seen = std::collections::HashMap::new();
    for n in 0..2_000_000u32 {
        let address = format!("c{n}@example.com");
        let digest = Sha256::digest(address.as_bytes());
        if let Some(earlier) = seen.insert([digest[0], digest[1], digest[2], digest[3]], n) {
            return (format!("c{earlier}@example.com"), address);
        }
    }
    panic!("no collision among two million addresses");
}

/// Three complaints reported through the API trip `sender-complaints-daily` (limit 2): the
/// sender's next invite is held. A repeated event counts once; another app's invite is 404,
/// while another key of the same app may report it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complaints_reported_through_the_api_ban_the_sender() {
    let stage = Stage::start("complaints", &[]).await;
    sendguard::apps::store::create(
        &stage.pool,
        "other",
        Default::default(),
        &crate::support::app::secret_box(&stage.pool).await,
        false,
        "test",
    )
    .await
    .expect("app");
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let other = Api::new(stage.base(), app_key(&stage.pool, "other").await);
    let colleague = Api::new(stage.base(), api_key(&stage.pool).await);
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(api.accepted("annoying", &format!("p{n}@example.com")).await);
    }
    assert_eq!(
        other.event(&ids[0], "complaint").await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.event(&uuid::Uuid::new_v4().to_string(), "complaint")
            .await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.event(&ids[0], "spam").await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    for id in &ids[..2] {
        assert_eq!(api.event(id, "complaint").await, StatusCode::ACCEPTED);
        assert_eq!(
            colleague.event(id, "complaint").await,
            StatusCode::ACCEPTED,
            "again, from another key of the app"
        );
    }
    assert_eq!(
        sender_state(&stage.pool, "annoying").await,
        "active",
        "two complaints, limit 2"
    );
    assert_eq!(api.event(&ids[2], "complaint").await, StatusCode::ACCEPTED);
    assert_eq!(sender_state(&stage.pool, "annoying").await, "shadow_banned");
    let (status, next) = api
        .send(json!({"sender_id": "annoying", "recipient": "p9@example.com"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let held: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1::uuid")
        .bind(next.expect("id"))
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(held, "held");
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM outcomes")
        .fetch_one(&stage.pool)
        .await
        .expect("outcomes");
    assert_eq!(recorded, 3, "each (invite, type) once");
}

/// A permanent refusal by the mail server is a bounce of that invite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_smtp_refusal_counts_as_a_bounce() {
    let sink = SmtpSink::start_refusing(0, &["nobody@example.com"]).await;
    let stage = Stage::start_sending_to("bounce", &[], sink, |_| {}).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let (_, id) = api
        .send(json!({"sender_id": "guesser", "recipient": "nobody@example.com"}))
        .await;
    let id: uuid::Uuid = id.expect("id").parse().expect("uuid");
    let bounced = wait_for(Duration::from_secs(15), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM outcomes WHERE invite_id = $1 AND type = 'bounce'",
        )
        .bind(id)
        .fetch_one(&stage.pool)
        .await
        .expect("outcomes")
            == 1
    })
    .await;
    assert!(bounced, "the refusal was not recorded as a bounce");
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1")
        .bind(id)
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(status, "failed");
}

/// A sender first seen from the address a banned sender used is linked to it, and its invites
/// with links are held; without links they go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banned_senders_new_account_from_the_same_address_is_linked() {
    let stage = Stage::start_prepared(
        "evasion",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 1).await,
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let from = |sender: &str, n: u32, ip: &str, message: &str| {
        json!({"sender_id": sender, "recipient": format!("x{n}@example.com"),
               "sender_ip": ip, "message": message,
               "sender_created_at": "2020-01-01T00:00:00Z"})
    };
    for n in 0..2 {
        api.send(from("spammer", n, "2001:db8:7:7::1", "hi")).await;
    }
    flags_done(&stage.pool).await;
    assert_eq!(sender_state(&stage.pool, "spammer").await, "shadow_banned");
    // Another address in the same /64, an old account (so not caught as a new sender).
    let (status, _) = api
        .send(from(
            "spammer-2",
            10,
            "2001:db8:7:7::99",
            "win at prize dot com",
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    let linked: Option<String> =
        sqlx::query_scalar("SELECT linked_to FROM senders WHERE id = 'spammer-2'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!(linked.as_deref(), Some("spammer"));
    let decision: Value = sqlx::query_scalar(
        "SELECT decision FROM invites WHERE sender_id = 'spammer-2' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held invite");
    assert_eq!(decision["linked_to"], "spammer");
    let elsewhere = api
        .send(from(
            "bystander",
            20,
            "2001:db8:8:8::1",
            "see prize dot com",
        ))
        .await;
    assert_eq!(elsewhere.0, StatusCode::OK);
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'bystander' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held");
    assert_eq!(held, 0, "another address is not linked");
}

/// Marks `sender`'s invites as sent `minutes` ago, as if the outbox had sent them then.
async fn sent_ago(pool: &PgPool, sender: &str, minutes: i32) {
    sqlx::query(
        "UPDATE invites SET status = 'sent', sent_at = now() - make_interval(mins => $2)
         WHERE sender_id = $1",
    )
    .bind(sender)
    .bind(minutes)
    .execute(pool)
    .await
    .expect("sent");
}

/// Whether `sender`'s invite with a link (sent now) is held as a new sender's would be.
async fn link_held(stage: &Stage, api: &Api, sender: &str) -> bool {
    let (_, id) = api
        .send(json!({"sender_id": sender, "recipient": "g@example.com",
                     "message": "the plan is at plans.example.com/q3"}))
        .await;
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1::uuid")
        .bind(id.expect("id"))
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    status == "held"
}

/// Sends five invites from `sender` to `recipients` and has each accepted.
async fn five_accepted(stage: &Stage, api: &Api, sender: &str, recipients: [&str; 5], ago: i32) {
    let mut ids = Vec::new();
    for to in recipients {
        ids.push(api.accepted(sender, to).await);
    }
    stage.settle().await;
    sent_ago(&stage.pool, sender, ago).await;
    for id in &ids {
        assert_eq!(api.event(id, "accepted").await, StatusCode::ACCEPTED);
    }
}

/// Five invites accepted by people at three or more domains, each at least ten minutes after
/// it was sent, make a sender trusted enough: it is no longer new, whatever its age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_invites_end_a_senders_newness() {
    let stage = Stage::start("accepted", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let people = [
        "f0@a.example",
        "f1@b.example",
        "f2@c.example",
        "f3@a.example",
        "f4@b.example",
    ];
    five_accepted(&stage, &api, "welcome", people, 20).await;
    assert!(
        !link_held(&stage, &api, "welcome").await,
        "a sender with five accepted invites is not new"
    );
}

/// A spammer cannot vouch for themselves: acceptances at once after sending, or all from one
/// domain (their own mailboxes), earn no trust.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptances_at_once_or_from_one_domain_earn_no_trust() {
    let stage = Stage::start("self_vouch", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let spread = [
        "s0@a.example",
        "s1@b.example",
        "s2@c.example",
        "s3@d.example",
        "s4@e.example",
    ];
    five_accepted(&stage, &api, "hasty", spread, 0).await;
    assert!(
        link_held(&stage, &api, "hasty").await,
        "accepted the moment they were sent"
    );
    let own = [
        "m0@own.example",
        "m1@own.example",
        "m2@own.example",
        "m3@own.example",
        "m4@own.example",
    ];
    five_accepted(&stage, &api, "mailboxes", own, 20).await;
    assert!(
        link_held(&stage, &api, "mailboxes").await,
        "all from one domain"
    );
}

/// A sender banned again by a rule within 30 days of a lift is a repeat offender; with
/// SENDGUARD_REPEAT_AUTO_CONFIRM its ban is confirmed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_offenders_are_marked_and_can_be_confirmed_at_once() {
    let stage = Stage::start_prepared(
        "repeat",
        async |pool| {
            rules::set(pool, "sender-hourly", |r| r.limit = 1).await;
            execute(
                pool,
                &["INSERT INTO senders (app_id, id, lifted_at) VALUES (1, 'again', now() - interval '3 days')"],
            )
            .await;
        },
        |cfg| cfg.repeat_auto_confirm = true,
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for n in 0..2 {
        api.accepted("again", &format!("r{n}@example.com")).await;
    }
    flags_done(&stage.pool).await;
    let (state, repeat): (String, bool) =
        sqlx::query_as("SELECT state, repeat_offender FROM senders WHERE id = 'again'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!((state.as_str(), repeat), ("banned", true));
    let confirmed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE sender_id = 'again' AND action = 'confirm_ban'
           AND actor = 'system'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(confirmed, 1);
}

/// A backtest scores a proposed rule against the reviewers' decisions: how many confirmed
/// senders it catches and after how many invites, how many lifted ones it would catch, and the
/// limit that catches the most confirmed senders and no lifted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtest_scores_a_rule_against_past_decisions() {
    // Three confirmed spammers and two lifted busy senders, each with n invites in one hour.
    let senders = [
        ("c1", 30, true),
        ("c2", 20, true),
        ("c3", 12, true),
        ("l1", 8, false),
        ("l2", 5, false),
    ];
    let mut sql = vec![
        "INSERT INTO api_keys (name, key_hash, app_id) VALUES ('seed', '\\x00', 1)".to_owned(),
    ];
    for (id, n, confirmed) in senders {
        sql.push(format!(
            "INSERT INTO senders (app_id, id) VALUES (1, '{id}')"
        ));
        sql.push(format!(
            "INSERT INTO invites (id, api_key_id, app_id, sender_id, recipient, recipient_domain,
                 status, decision, created_at)
             SELECT gen_random_uuid(), (SELECT id FROM api_keys), 1, '{id}', 'r' || k || '@example.com',
                 'example.com', 'sent', '{{}}', now() - interval '2 hours' + k * interval '1 minute'
             FROM generate_series(1, {n}) k"
        ));
        let action = if confirmed {
            "confirm_ban"
        } else {
            "lift_and_release"
        };
        sql.push(format!(
            "INSERT INTO audit_log (actor, action, app_id, sender_id)
             VALUES ('alice', '{action}', 1, '{id}')"
        ));
    }
    let statements: Vec<&str> = sql.iter().map(String::as_str).collect();
    let (_db, pool) = crate::support::app::migrated("score", &statements).await;
    let input = sendguard::rules::edit::RuleInput {
        name: "proposed".into(),
        scope: "sender".into(),
        signal: "invites".into(),
        limit: "60".into(),
        window: "1h".into(),
        algorithm: "hash_counters".into(),
        action: "shadow_ban".into(),
        new_senders_only: false,
        enabled: true,
    };
    let rule = sendguard::rules::edit::validate(&input).expect("rule");
    let score = sendguard::rules::advisor::score(&pool, &rule, 7)
        .await
        .expect("the advisor's score")
        .expect("a rule on senders is scored");
    assert_eq!((score.confirmed, score.lifted), (3, 2));
    assert_eq!(score.suggested, Some(8), "above the busiest lifted sender");
    let row = |limit| score.rows.iter().find(|r| r.limit == limit).expect("row");
    assert_eq!(row(8).confirmed_caught, 3);
    assert_eq!(row(8).lifted_caught, 0);
    assert_eq!(row(8).median_invites_to_catch, Some(9));
    assert_eq!(
        row(60).confirmed_caught,
        0,
        "the proposed limit catches nobody"
    );
    assert_eq!(
        row(4).lifted_caught,
        2,
        "a tighter one catches the lifted too"
    );
    assert!(score.caught.is_empty(), "the proposed limit names nobody");

    // Proposed at 6, it names whom it catches: the three confirmed, and l1, a lifted one.
    let tight = sendguard::rules::edit::validate(&sendguard::rules::edit::RuleInput {
        limit: "6".into(),
        ..input
    })
    .expect("rule");
    let score = sendguard::rules::advisor::score(&pool, &tight, 7)
        .await
        .expect("the advisor's score")
        .expect("a rule on senders is scored");
    let caught: Vec<(&str, bool)> = score
        .caught
        .iter()
        .map(|(sender, confirmed)| (sender.id.as_str(), *confirmed))
        .collect();
    assert_eq!(
        caught,
        [("c1", true), ("c2", true), ("c3", true), ("l1", false)]
    );
}

/// A rule whose Redis keys would be another's is refused, created or edited: a key ends in a
/// code of its rule's name, algorithm and window, and a birthday search finds two names with one
/// code (about 2^18 names hold such a pair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_whose_keys_would_be_another_rules_is_refused() {
    use sendguard::rules::edit::{self, RuleInput, SaveError};
    let rule = |name: &str, window: &str| {
        edit::validate(&RuleInput {
            name: name.into(),
            scope: "sender".into(),
            signal: "invites".into(),
            limit: "60".into(),
            window: window.into(),
            algorithm: "hash_counters".into(),
            action: "shadow_ban".into(),
            new_senders_only: false,
            enabled: true,
        })
        .expect("a valid rule")
    };
    let hourly = rule("probe", "1h").quota;
    let mut seen = std::collections::HashMap::new();
    let (first, second) = (0..4_000_000u32)
        .find_map(|n| {
            let name = format!("k{n}");
            let code = sendguard::limiter::rule_code(&name, &hourly);
            seen.insert(code, name.clone())
                .map(|earlier| (earlier, name))
        })
        .expect("two names with one code");
    let (_db, pool) = crate::support::app::migrated("sharedkeys", &[]).await;
    edit::create(&pool, &rule(&first, "1h"), "alice", None)
        .await
        .expect("the first is created");
    let refused = edit::create(&pool, &rule(&second, "1h"), "alice", None).await;
    assert!(
        matches!(&refused, Err(SaveError::SharedKeys { other, .. }) if *other == first),
        "{refused:?}"
    );
    // With another window the code differs: created; edited to the first's window: refused.
    let id = edit::create(&pool, &rule(&second, "2h"), "alice", None)
        .await
        .expect("another window, another code");
    let version: i64 = sqlx::query_scalar("SELECT version FROM rules WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .expect("its version");
    let edited = edit::update(&pool, id, version, &rule(&second, "1h"), "alice", None).await;
    assert!(
        matches!(&edited, Err(SaveError::SharedKeys { .. })),
        "{edited:?}"
    );
}

/// `sendguard rules export` then `apply` changes nothing; a file with one bad rule changes
/// nothing either and names the rule and the key; a good change is applied and audited under
/// the operator's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_as_code_apply_all_or_nothing() {
    let (db, pool) = crate::support::app::migrated("rulesfile", &[]).await;
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sendguard"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("SENDGUARD_OPERATOR", "ops-test")
            .output()
            .expect("run sendguard")
    };
    let exported = cli(&["rules", "export"]);
    assert!(exported.status.success());
    let text = String::from_utf8(exported.stdout).expect("utf-8");
    assert!(text.contains("name = \"new-sender-links\""), "{text}");
    let dir = tempdir("rulesfile");
    let file = dir.join("rules.toml");
    std::fs::write(&file, &text).expect("write");
    let again = cli(&["rules", "apply", file.to_str().expect("path")]);
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "no change");

    let before: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT name, limit_count, version FROM rules ORDER BY name")
            .fetch_all(&pool)
            .await
            .expect("rules");
    let bad = text.replacen("limit = 60", "limit = 61", 1).replacen(
        "scope = \"ip\"",
        "scope = \"planet\"",
        1,
    );
    std::fs::write(&file, &bad).expect("write");
    let refused = cli(&["rules", "apply", file.to_str().expect("path")]);
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(error.contains("rule `ip-hourly`: key `scope`"), "{error}");
    let after: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT name, limit_count, version FROM rules ORDER BY name")
            .fetch_all(&pool)
            .await
            .expect("rules");
    assert_eq!(before, after, "one bad rule: nothing changed");

    let good = text.replacen("limit = 60", "limit = 61", 1);
    std::fs::write(&file, &good).expect("write");
    let applied = cli(&["rules", "apply", file.to_str().expect("path")]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(
        String::from_utf8_lossy(&applied.stdout).contains("update sender-hourly: limit 60 -> 61")
    );
    let (limit, actor): (i64, String) = sqlx::query_as(
        "SELECT r.limit_count, a.actor FROM rules r JOIN audit_log a ON a.rule_id = r.id
         WHERE r.name = 'sender-hourly' AND a.action = 'rule_update'",
    )
    .fetch_one(&pool)
    .await
    .expect("rule");
    assert_eq!((limit, actor.as_str()), (61, "ops-test"));
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sendguard-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A relay that refuses the sending address (its credentials or the sender's domain not set up)
/// says nothing about the recipient: no bounce is counted against the sender, and the invite
/// waits for the relay instead of failing, then goes out once it is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_refusing_the_sender_counts_no_bounce_and_loses_nothing() {
    let sink = SmtpSink::start_refusing_the_sender().await;
    let stage = Stage::start_sending_to("relayrefusal", &[], sink, |cfg| {
        cfg.mail_retry_base_ms = 200;
    })
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let (_, id) = api
        .send(json!({"sender_id": "innocent", "recipient": "friend@example.com"}))
        .await;
    let id: uuid::Uuid = id.expect("id").parse().expect("uuid");
    let tried = wait_for(Duration::from_secs(15), || async {
        sqlx::query_scalar::<_, i32>("SELECT attempts FROM invites WHERE id = $1")
            .bind(id)
            .fetch_one(&stage.pool)
            .await
            .expect("invite")
            >= 1
    })
    .await;
    assert!(tried, "the relay was never tried");
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1")
        .bind(id)
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(status, "queued", "given up on over the relay's refusal");
    let bounces: i64 = sqlx::query_scalar("SELECT count(*) FROM outcomes")
        .fetch_one(&stage.pool)
        .await
        .expect("outcomes");
    assert_eq!(bounces, 0, "the relay's refusal was counted as a bounce");
    // The relay is fixed: the invite goes out.
    stage.sink.accept_the_sender();
    let sent = wait_for(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM invites WHERE id = $1")
            .bind(id)
            .fetch_one(&stage.pool)
            .await
            .expect("invite")
            == "sent"
    })
    .await;
    assert!(sent, "the invite was not sent once the relay was fixed");
    assert_eq!(stage.sink.messages().len(), 1);
}

/// A `hold` rule of complaints flags an active sender for review, announcing no held invite
/// (the invite went out before its complaint came), and rules do not apply to a trusted
/// sender: its complaint over the limit flags nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_over_a_hold_rule_flags_an_active_sender_and_not_a_trusted_one() {
    let stage = Stage::start_prepared(
        "complainthold",
        async |pool| {
            rules::set(pool, "sender-complaints-daily", |r| {
                r.action = "hold".into();
                r.limit = 0;
            })
            .await
        },
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let mut ids = Vec::new();
    for sender in ["ordinary", "vouched"] {
        ids.push(api.accepted(sender, &format!("{sender}@example.com")).await);
    }
    sqlx::query("UPDATE senders SET state = 'trusted' WHERE id = 'vouched'")
        .execute(&stage.pool)
        .await
        .expect("trust");
    for id in &ids {
        assert_eq!(api.event(id, "complaint").await, StatusCode::ACCEPTED);
    }
    let flags: Vec<(String, String)> =
        sqlx::query_as("SELECT sender_id, action FROM flags ORDER BY sender_id")
            .fetch_all(&stage.pool)
            .await
            .expect("flags");
    assert_eq!(flags, [("ordinary".to_owned(), "hold".to_owned())]);
    assert_eq!(sender_state(&stage.pool, "ordinary").await, "active");
    assert_eq!(sender_state(&stage.pool, "vouched").await, "trusted");
}

/// An invite checked while its sender was active, whose write waits, and a complaint that bans
/// the sender meanwhile: the invite is held, not sent. (An invite of the sender's own burst,
/// checked under the limit before the burst's ban, is still written as sent: its count was
/// decided first. A complaint's ban is not a count this invite took part in.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_in_flight_when_a_complaint_bans_its_sender_is_held() {
    let stage = Stage::start_prepared(
        "complaintinflight",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 0).await,
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let (status, first) = api
        .send(json!({"sender_id": "moody", "recipient": "one@example.com"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let lock = crate::support::app::hold_batch_statements(&stage.pool).await;
    let sender = api.clone();
    let second = tokio::spawn(async move {
        sender
            .send(json!({"sender_id": "moody", "recipient": "two@example.com"}))
            .await
    });
    assert!(
        crate::support::app::waiting_on_locks(&stage.db.name, 1).await,
        "the second invite's write waits"
    );
    assert_eq!(
        api.event(&first.expect("id"), "complaint").await,
        StatusCode::ACCEPTED
    );
    assert_eq!(sender_state(&stage.pool, "moody").await, "shadow_banned");
    lock.rollback().await.expect("release");
    let (status, second) = second.await.expect("second");
    assert_eq!(status, StatusCode::OK, "answered as any invite");
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id::text = $1")
        .bind(second.expect("id"))
        .fetch_one(&stage.pool)
        .await
        .expect("invite");
    assert_eq!(status, "held", "written after the ban");
}

/// A complaint counted just before a lift is no new breach: the decision about the sender came
/// while Redis counted (and a lift clears the counts it was added to), so it flags nothing, and
/// the sender is not banned again as a repeat offender (docs/DESIGN.md §3b).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complaint_counted_before_a_lift_does_not_ban_the_sender_again() {
    let stage = Stage::start_prepared(
        "complaintlift",
        async |pool| rules::set(pool, "sender-complaints-daily", |r| r.limit = 0).await,
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(api.accepted("forgiven", &format!("f{n}@example.com")).await);
    }
    assert_eq!(api.event(&ids[0], "complaint").await, StatusCode::ACCEPTED);
    assert_eq!(sender_state(&stage.pool, "forgiven").await, "shadow_banned");
    // The admin's lift holds the sender while the second complaint is counted.
    let mut lift = stage.pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM senders WHERE id = 'forgiven' FOR UPDATE")
        .execute(&mut *lift)
        .await
        .expect("lock");
    let reporter = api.clone();
    let second = ids[1].clone();
    let report = tokio::spawn(async move { reporter.event(&second, "complaint").await });
    assert!(
        crate::support::app::waiting_on_locks(&stage.db.name, 1).await,
        "the complaint's flag waits for the sender"
    );
    sqlx::query(
        "UPDATE senders SET state = 'active', version = version + 1, lifted_at = now(),
             state_changed_by = 'alice' WHERE id = 'forgiven'",
    )
    .execute(&mut *lift)
    .await
    .expect("lift");
    lift.commit().await.expect("commit");
    assert_eq!(report.await.expect("report"), StatusCode::ACCEPTED);
    assert_eq!(sender_state(&stage.pool, "forgiven").await, "active");
    let flags: i64 = sqlx::query_scalar("SELECT count(*) FROM flags WHERE sender_id = 'forgiven'")
        .fetch_one(&stage.pool)
        .await
        .expect("flags");
    assert_eq!(flags, 1, "only the breach that was lifted");
}
