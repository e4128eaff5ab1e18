//! Appeals and the app's view of its senders (docs/DESIGN.md §3e, §4) against a running
//! instance, its webhook receiver, and a second app.

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::Stage;
use crate::support::api::Api;
use crate::support::app::{self as app, sender_state};
use sendguard::appeals::{self, AppealError, Decision, Lifting, Outcome};
use sendguard::moderation::review::ReviewAction;
use sendguard::moderation::terms::{self, Ladder, Term};

impl Stage {
    /// Decides appeal `id` as a moderator who just loaded the appeals page.
    async fn decide_appeal(
        &self,
        id: &str,
        outcome: Outcome,
        reply: &str,
    ) -> Result<(), AppealError> {
        let id: Uuid = id.parse().expect("appeal id");
        let seen = appeals::find(&self.pool, id)
            .await
            .expect("read")
            .expect("appeal");
        let ladder = Ladder::default();
        let lifting = Lifting {
            limiter: &self.limiter,
            keys: &self.prefix,
            rules: &self.rules,
            ladder: &ladder,
        };
        let decision = Decision {
            appeal: id,
            seen_version: seen.version,
            seen_sender_version: seen.sender_version,
            seen_held: seen.held_stored,
            outcome,
            reply,
            actor: "mona",
            admin_id: None,
        };
        appeals::decide(&self.pool, &lifting, &decision).await
    }

    /// Bans `sender` (tripping `sender-hourly`, then confirmed for `term`).
    async fn ban(&self, sender: &str, term: Term) {
        self.burst(sender, 0, 4).await;
        self.decide(sender, ReviewAction::ConfirmBan, Some(term), false)
            .await;
    }
}

/// Granted: the ban is lifted, its strike removed, the held invites released as the moderator
/// picked, and the app told with the reply. Denied: the ban and its term stand, the app is told
/// with the reply, and the same ban cannot be appealed again. 404 before a ban, 409 for a second
/// appeal, and a decision on an appeal that changed meanwhile is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appeal_granted_and_one_denied_each_reach_the_app_with_the_reply() {
    let stage = Stage::new("appeals").await;
    stage.burst("sorry", 0, 4).await;
    assert_eq!(
        stage.api.appeal("sorry", "It was my team").await.0,
        StatusCode::NOT_FOUND,
        "shadow-banned, not banned: nothing to appeal"
    );
    assert_eq!(
        stage.api.appeal("nobody", "Hello").await.0,
        StatusCode::NOT_FOUND
    );
    stage
        .decide("sorry", ReviewAction::ConfirmBan, Some(Term::Week), false)
        .await;
    // Held while banned: the grant below releases them.
    stage.burst("sorry", 4, 2).await;
    let (status, body) = stage
        .api
        .appeal("sorry", "I was inviting my own team.\nPlease look again.")
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "open");
    let first = body["id"].as_str().expect("id").to_owned();
    let (status, body) = stage.api.appeal("sorry", "Again").await;
    assert_eq!(status, StatusCode::CONFLICT, "one open appeal: {body}");
    let metrics = reqwest::get(format!("http://{}/metrics", stage.app.metrics_addr))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    assert_eq!(app::series(&metrics, "sendguard_appeals_open"), Some(1.0));
    assert!(app::series(&metrics, "sendguard_appeals_oldest_seconds").is_some_and(|s| s >= 0.0));
    assert!(
        metrics.contains("sendguard_ban_expiry_lag_seconds_count 0"),
        "no ban ended yet"
    );
    let (status, standing) = stage.api.standing("sorry").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(standing["state"], "banned");
    assert_eq!(standing["strikes"], 1);
    assert!(standing["banned_until"].is_string(), "{standing}");
    assert_eq!(
        standing["appeal"],
        json!({"id": first, "status": "open", "reply": null})
    );

    // A decision made on a page from before another moderator's note moved nothing: here,
    // an appeal whose version moved on (as a decision moves it) is refused.
    sqlx::query("UPDATE appeals SET version = version + 1 WHERE id = $1::uuid")
        .bind(&first)
        .execute(&stage.pool)
        .await
        .expect("move the version");
    let id: Uuid = first.parse().expect("uuid");
    let seen = appeals::find(&stage.pool, id)
        .await
        .expect("read")
        .expect("appeal");
    let ladder = Ladder::default();
    let lifting = Lifting {
        limiter: &stage.limiter,
        keys: &stage.prefix,
        rules: &stage.rules,
        ladder: &ladder,
    };
    let stale = Decision {
        appeal: id,
        seen_version: seen.version - 1,
        seen_sender_version: seen.sender_version,
        seen_held: seen.held_stored,
        outcome: Outcome::Deny,
        reply: "late",
        actor: "late",
        admin_id: None,
    };
    let refused = appeals::decide(&stage.pool, &lifting, &stale).await;
    assert!(
        matches!(refused, Err(AppealError::Stale { .. })),
        "{refused:?}"
    );

    let reply = "You're right: those were your colleagues. Sorry for the trouble.";
    stage
        .decide_appeal(&first, Outcome::Grant { release: true }, reply)
        .await
        .expect("grant");
    assert_eq!(sender_state(&stage.pool, "sorry").await, "active");
    assert_eq!(
        terms::counting(&stage.pool, &stage.key("sorry"), chrono::Utc::now())
            .await
            .expect("strikes"),
        0,
        "the strike is removed"
    );
    let released: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'sorry' AND status IN ('queued', 'sent')
             AND recipient IN ('sorry4@example.com', 'sorry5@example.com')",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("released");
    assert_eq!(released, 2, "the held invites are released");
    assert!(stage.wait_for_events("appeal.decided", "sorry", 1).await);
    let decided = &stage.received("appeal.decided", "sorry")[0];
    assert_eq!(decided["appeal_id"], first.as_str());
    assert_eq!(decided["outcome"], "granted");
    assert_eq!(decided["reply"], reply);
    assert_eq!(decided["state"], "active");
    let (_, standing) = stage.api.standing("sorry").await;
    assert_eq!(
        (
            &standing["state"],
            &standing["strikes"],
            &standing["banned_until"]
        ),
        (&json!("active"), &json!(0), &Value::Null)
    );
    assert_eq!(
        standing["appeal"],
        json!({"id": first, "status": "granted", "reply": reply})
    );

    stage.ban("stubborn", Term::Month).await;
    let until = stage.banned_until("stubborn").await;
    let (status, body) = stage.api.appeal("stubborn", "I did nothing").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = body["id"].as_str().expect("id").to_owned();
    let reply = "Your invites went to hundreds of strangers; the ban stands.";
    stage
        .decide_appeal(&second, Outcome::Deny, reply)
        .await
        .expect("deny");
    assert_eq!(sender_state(&stage.pool, "stubborn").await, "banned");
    assert_eq!(
        stage.banned_until("stubborn").await,
        until,
        "the term stands"
    );
    assert!(stage.wait_for_events("appeal.decided", "stubborn", 1).await);
    let decided = &stage.received("appeal.decided", "stubborn")[0];
    assert_eq!(decided["outcome"], "denied");
    assert_eq!(decided["reply"], reply);
    assert_eq!(
        stage.api.appeal("stubborn", "Please").await.0,
        StatusCode::CONFLICT,
        "this ban was appealed already"
    );
    let audited: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT sender_id, action, note FROM audit_log
         WHERE action IN ('grant_appeal', 'deny_appeal') ORDER BY id",
    )
    .fetch_all(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert_eq!(audited[1].2.as_deref(), Some(reply));
}

/// A text checked like `message`, and a body with a field the API does not know, are refused
/// with 422 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appeals_text_is_checked_like_a_message() {
    let stage = Stage::new("appealtext").await;
    stage.ban("checked", Term::Day).await;
    for text in ["", "   ", "bidi \u{202E} override", "bell \u{7}"] {
        let (status, body) = stage.api.appeal("checked", text).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text:?}: {body}");
        assert_eq!(body["field"], "text");
    }
    let long = "x".repeat(2001);
    assert_eq!(
        stage.api.appeal("checked", &long).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let resp = stage
        .api
        .http
        .post(format!("{}/api/v1/appeals", stage.api.base))
        .bearer_auth(&stage.api.key)
        .json(&json!({"sender_id": "checked", "text": "hi", "reason": "x"}))
        .send()
        .await
        .expect("appeal");
    assert_eq!(resp.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

/// Each app reads only its own senders: another app's sender, or one never seen, is a 404 by
/// the same single query; an id with a slash is one path segment; an id no sender can have (a
/// NUL, which the database refuses in text) is a 404 too, not an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_reads_only_its_own_senders() {
    let stage = Stage::new("standing").await;
    let other = Api::new(stage.base(), app::api_key(&stage.pool).await);
    stage.ban("team/ana", Term::Day).await;
    other.accepted("team/ana", "x@example.com").await;
    other.accepted("bo", "y@example.com").await;

    let (status, mine) = stage.api.standing("team/ana").await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    assert_eq!(mine["sender_id"], "team/ana");
    assert_eq!(mine["state"], "banned");
    assert_eq!(mine["strikes"], 1);
    assert_eq!(mine["appeal"], Value::Null);
    let (status, theirs) = other.standing("team/ana").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            &theirs["state"],
            &theirs["strikes"],
            &theirs["banned_until"]
        ),
        (&json!("active"), &json!(0), &Value::Null),
        "the same id in another app is another sender"
    );
    for (api, id) in [
        (&stage.api, "bo"),
        (&stage.api, "nobody"),
        (&other, "nobody"),
        (&stage.api, "no\u{0}body"),
    ] {
        let (status, body) = api.standing(id).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {body}");
        assert_eq!(body["status"], 404);
    }
    // Another app's banned sender cannot be appealed either.
    assert_eq!(
        other.appeal("team/ana", "not mine").await.0,
        StatusCode::NOT_FOUND
    );
}
