//! Review actions against a running instance: its Postgres, its Redis counters, and mail that
//! reaches (or never reaches) an SMTP server on 127.0.0.1.

use crate::support::api::Api;
use crate::support::app::{self as app, api_key, flags_done, orphans, sender_state};
use crate::support::rules::{self, RuleEntry};
use sendguard::limiter::{KeyPrefix, Limiter};
use sendguard::moderation::SenderState;
use sendguard::moderation::review::{Review, ReviewAction, ReviewError, apply};
use sendguard::moderation::terms::Ladder;
use sendguard::rules::RuleCache;
use sendguard::sender_key::SenderKey;

/// A running instance with `sender-hourly` at 3, and what a reviewer needs to act on it.
struct Stage {
    inner: app::Stage,
    api: Api,
    limiter: Limiter,
    prefix: KeyPrefix,
    rules: RuleCache,
}

impl std::ops::Deref for Stage {
    type Target = app::Stage;
    fn deref(&self) -> &app::Stage {
        &self.inner
    }
}

impl Stage {
    async fn new(test: &str) -> Stage {
        Stage::with_rule(test, "sender-hourly", |r| r.limit = 3).await
    }

    /// A stage whose rule `name` is edited by `change` before the instance starts.
    async fn with_rule(test: &str, name: &str, change: impl FnOnce(&mut RuleEntry)) -> Stage {
        let prefix = crate::support::unique_prefix("moderation");
        let inner = app::Stage::start_prepared(
            test,
            async |pool| rules::set(pool, name, change).await,
            |cfg| cfg.key_prefix = prefix.as_str().to_owned(),
        )
        .await;
        Stage {
            api: Api::new(inner.base(), api_key(&inner.pool).await),
            limiter: Limiter::Redis(crate::support::redis_store().await),
            rules: RuleCache::load(&inner.pool).await.expect("rules"),
            prefix,
            inner,
        }
    }

    /// Sends an invite, and waits for the flag it may leave.
    async fn invite(&self, sender: &str, recipient: &str) {
        self.api.accepted(sender, recipient).await;
        flags_done(&self.pool).await;
    }

    /// Drives the outbox until it has nothing left to send; returns the recipients the sink got.
    async fn delivered(&self) -> Vec<String> {
        self.inner.settle().await;
        let mut to: Vec<String> = self
            .sink
            .messages()
            .iter()
            .flat_map(|m| m.to.clone())
            .collect();
        to.sort();
        to
    }

    async fn version(&self, sender: &str) -> i64 {
        sqlx::query_scalar("SELECT version FROM senders WHERE id = $1")
            .bind(sender)
            .fetch_one(&self.pool)
            .await
            .expect("sender")
    }

    async fn review(
        &self,
        sender: &str,
        action: ReviewAction,
        seen_version: i64,
    ) -> Result<sendguard::moderation::review::Reviewed, ReviewError> {
        // The held invites as a page loaded now would count them.
        let seen_held = sqlx::query_scalar("SELECT held_stored FROM senders WHERE id = $1")
            .bind(sender)
            .fetch_optional(&self.pool)
            .await
            .expect("held");
        let sender = SenderKey::new(1, sender);
        let review = Review {
            sender: &sender,
            action,
            seen_version,
            seen_held,
            actor: "alice",
            admin_id: None,
            note: Some("checked the account"),
            release_after: std::time::Duration::ZERO,
            term: None,
            mistake: false,
        };
        apply(
            &self.pool,
            &self.limiter,
            &self.prefix,
            &self.rules,
            &Ladder::default(),
            &review,
        )
        .await
    }

    async fn statuses(&self, sender: &str) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT status, count(*) FROM invites WHERE sender_id = $1 GROUP BY 1 ORDER BY 1",
        )
        .bind(sender)
        .fetch_all(&self.pool)
        .await
        .expect("statuses")
    }
}

fn counts(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(s, n)| (s.to_string(), *n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifting_a_ban_releases_held_invites_and_clears_the_counters() {
    let stage = Stage::new("lift").await;
    for n in 0..5 {
        stage.invite("busy", &format!("b{n}@example.com")).await;
    }
    assert_eq!(stage.delivered().await.len(), 3);
    assert_eq!(
        stage.statuses("busy").await,
        counts(&[("held", 2), ("sent", 3)])
    );
    let seen = stage.version("busy").await;
    let done = stage
        .review("busy", ReviewAction::LiftAndRelease, seen)
        .await
        .expect("lift");
    assert_eq!(done.state, SenderState::Active);
    assert_eq!(done.invites_changed, 2);
    assert_eq!(
        stage.delivered().await.len(),
        5,
        "the two held invites are sent"
    );
    // The counters were cleared: the next invite is not held at once.
    stage.invite("busy", "b5@example.com").await;
    assert_eq!(stage.delivered().await.len(), 6);
    assert_eq!(stage.statuses("busy").await, counts(&[("sent", 6)]));
    let (actor, action, note): (String, String, Option<String>) = sqlx::query_as(
        "SELECT actor, action, note FROM audit_log WHERE sender_id = 'busy' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(
        (actor.as_str(), action.as_str(), note.as_deref()),
        ("alice", "lift_and_release", Some("checked the account"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_ban_discards_held_invites_and_holds_later_ones() {
    let stage = Stage::new("confirm").await;
    for n in 0..5 {
        stage.invite("spam", &format!("s{n}@example.com")).await;
    }
    assert_eq!(stage.delivered().await.len(), 3);
    let seen = stage.version("spam").await;
    let done = stage
        .review("spam", ReviewAction::ConfirmBan, seen)
        .await
        .expect("confirm");
    assert_eq!(done.state, SenderState::Banned);
    for n in 5..8 {
        stage.invite("spam", &format!("s{n}@example.com")).await;
    }
    assert_eq!(
        stage.delivered().await.len(),
        3,
        "nothing more reaches anyone"
    );
    assert_eq!(
        stage.statuses("spam").await,
        counts(&[("discarded", 2), ("held", 3), ("sent", 3)])
    );
    assert_eq!(
        orphans(&stage.pool).await,
        0,
        "the flagging, held and discarded invites have their sender and key, their senders their app"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_a_sender_that_changed_meanwhile_is_refused() {
    let stage = Stage::new("stale").await;
    for n in 0..4 {
        stage.invite("twice", &format!("t{n}@example.com")).await;
    }
    let seen = stage.version("twice").await;
    // A second admin decides first.
    stage
        .review("twice", ReviewAction::ConfirmBan, seen)
        .await
        .expect("first decision");
    let late = stage
        .review("twice", ReviewAction::LiftAndRelease, seen)
        .await;
    assert!(
        matches!(&late, Err(ReviewError::Stale { state, .. }) if state == "banned"),
        "{late:?}"
    );
    assert_eq!(stage.delivered().await.len(), 3);
    assert_eq!(
        stage.statuses("twice").await,
        counts(&[("discarded", 1), ("sent", 3)]),
        "the refused lift changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_senders_skip_the_rules_and_manual_bans_hold() {
    let stage = Stage::new("trust").await;
    stage.invite("vip", "v0@example.com").await;
    let seen = stage.version("vip").await;
    stage
        .review("vip", ReviewAction::MarkTrusted, seen)
        .await
        .expect("trust");
    for n in 1..6 {
        stage.invite("vip", &format!("v{n}@example.com")).await;
    }
    assert_eq!(
        stage.delivered().await.len(),
        6,
        "over the limit, and all sent"
    );

    stage.invite("quiet", "q0@example.com").await;
    let seen = stage.version("quiet").await;
    stage
        .review("quiet", ReviewAction::ShadowBan, seen)
        .await
        .expect("manual ban");
    stage.invite("quiet", "q1@example.com").await;
    let delivered = stage.delivered().await;
    assert!(delivered.contains(&"q0@example.com".to_owned()));
    assert!(!delivered.contains(&"q1@example.com".to_owned()));
    assert_eq!(
        stage.statuses("quiet").await,
        counts(&[("held", 1), ("sent", 1)])
    );
}

/// An invite counted before a lift and written after it (its write waited, assuming the ban)
/// is not a new breach: the lift cleared the sender's counters, so the invite is counted
/// afresh in them instead of flagging the sender again, as a repeat offender, from the count
/// the admin just lifted (docs/DESIGN.md §3b).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_counted_before_a_lift_does_not_flag_the_sender_again() {
    let stage = Stage::new("liftinflight").await;
    for n in 0..4 {
        stage.invite("inflight", &format!("i{n}@example.com")).await;
    }
    assert_eq!(stage.delivered().await.len(), 3, "the fourth is held");
    let lock = app::hold_batch_statements(&stage.pool).await;
    let api = stage.api.clone();
    let late = tokio::spawn(async move { api.accepted("inflight", "late@example.com").await });
    assert!(
        app::waiting_on_locks(&stage.db.name, 1).await,
        "the fifth invite's write waits"
    );
    let seen = stage.version("inflight").await;
    stage
        .review("inflight", ReviewAction::LiftAndRelease, seen)
        .await
        .expect("lift");
    lock.rollback().await.expect("release");
    late.await.expect("late invite");
    flags_done(&stage.pool).await;
    let (state, repeat): (String, bool) =
        sqlx::query_as("SELECT state, repeat_offender FROM senders WHERE id = 'inflight'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!(
        (state.as_str(), repeat),
        ("active", false),
        "flagged again by the lifted count"
    );
    let flags: i64 = sqlx::query_scalar("SELECT count(*) FROM flags WHERE sender_id = 'inflight'")
        .fetch_one(&stage.pool)
        .await
        .expect("flags");
    assert_eq!(flags, 1, "only the breach that was lifted");
    assert_eq!(
        stage.delivered().await.len(),
        5,
        "the released invite and the late one are sent"
    );
}

/// A lift clears the sender's counters before it commits: when Redis cannot clear them, the
/// lift is refused and nothing changes, instead of an active sender whose next invite trips
/// the same counters and is banned again as a repeat offender.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lift_whose_counters_cannot_be_cleared_changes_nothing() {
    let stage = Stage::new("liftnoredis").await;
    for n in 0..4 {
        stage.invite("stuck", &format!("k{n}@example.com")).await;
    }
    assert_eq!(stage.delivered().await.len(), 3, "the fourth is held");
    let mut redis = crate::support::redis_server::RedisServer::start().await;
    let gone = Limiter::Redis(
        sendguard::limiter::RedisStore::connect(&sendguard::limiter::RedisSettings::new(
            redis.url(),
        ))
        .await
        .expect("connect"),
    );
    redis.kill();
    let sender = SenderKey::new(1, "stuck");
    let lift = Review {
        sender: &sender,
        action: ReviewAction::LiftAndRelease,
        seen_version: stage.version("stuck").await,
        seen_held: Some(1),
        actor: "alice",
        admin_id: None,
        note: None,
        release_after: std::time::Duration::ZERO,
        term: None,
        mistake: false,
    };
    let refused = apply(
        &stage.pool,
        &gone,
        &stage.prefix,
        &stage.rules,
        &Ladder::default(),
        &lift,
    )
    .await;
    assert!(
        matches!(refused, Err(ReviewError::Limiter(_))),
        "{refused:?}"
    );
    assert_eq!(
        stage.statuses("stuck").await,
        counts(&[("held", 1), ("sent", 3)]),
        "nothing released"
    );
    let state = sender_state(&stage.pool, "stuck").await;
    assert_eq!(state, "shadow_banned", "the lift is not applied");
}

/// A trusted sender returned to `active` (the page offers the lift for any state but active)
/// was never banned: it is not remembered as lifted, so its first breach after is a first
/// offence, not a repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_sender_made_active_again_is_no_repeat_offender_at_its_first_breach() {
    let stage = Stage::new("untrust").await;
    stage.invite("vouched", "v0@example.com").await;
    for action in [ReviewAction::MarkTrusted, ReviewAction::LiftAndRelease] {
        let seen = stage.version("vouched").await;
        let done = stage.review("vouched", action, seen).await;
        assert!(done.is_ok(), "{}: {done:?}", action.as_str());
    }
    for n in 1..5 {
        stage.invite("vouched", &format!("v{n}@example.com")).await;
    }
    let (state, repeat): (String, bool) =
        sqlx::query_as("SELECT state, repeat_offender FROM senders WHERE id = 'vouched'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!((state.as_str(), repeat), ("shadow_banned", false));
}

/// An address rule that shadow-banned one of two senders of an app behind one address: the
/// lift clears the lifted sender's own counters but never the address's, which the other
/// sender shares (docs/DESIGN.md §3b): the other sender's next invite still counts on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifting_an_address_rules_ban_keeps_the_shared_addresss_counter() {
    let stage = Stage::with_rule("liftip", "ip-hourly", |r| {
        r.action = "shadow_ban".into();
        r.limit = 2;
    })
    .await;
    let from = |sender: &'static str, n: u32| {
        stage.api.send(
            serde_json::json!({"sender_id": sender, "sender_ip": "198.51.100.7",
            "recipient": format!("{sender}{n}@example.com")}),
        )
    };
    for n in 0..2 {
        assert_eq!(from("neighbour", n).await.0, reqwest::StatusCode::OK);
    }
    assert_eq!(from("tripper", 0).await.0, reqwest::StatusCode::OK);
    assert_eq!(sender_state(&stage.pool, "tripper").await, "shadow_banned");
    let seen = stage.version("tripper").await;
    stage
        .review("tripper", ReviewAction::LiftAndRelease, seen)
        .await
        .expect("lift");
    assert_eq!(sender_state(&stage.pool, "tripper").await, "active");
    // The address's count (3) survived the lift: the neighbour's next invite makes it 4.
    assert_eq!(from("neighbour", 2).await.0, reqwest::StatusCode::OK);
    assert_eq!(
        sender_state(&stage.pool, "neighbour").await,
        "shadow_banned",
        "the shared address's counter was cleared by another sender's lift"
    );
}

/// A lift clears the counters before it takes the sender's row: while Redis is slow to
/// answer, the writers' batches that include the sender do not wait behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lift_waiting_on_a_slow_redis_holds_no_lock_on_the_sender() {
    let stage = Stage::new("liftslow").await;
    for n in 0..4 {
        stage.invite("patient", &format!("p{n}@example.com")).await;
    }
    assert_eq!(stage.delivered().await.len(), 3, "the fourth is held");
    let redis = crate::support::redis_server::RedisServer::start().await;
    let slow = Limiter::Redis(
        sendguard::limiter::RedisStore::connect(&sendguard::limiter::RedisSettings::new(
            redis.url(),
        ))
        .await
        .expect("connect"),
    );
    redis.pause(3_000).await;
    let sender = SenderKey::new(1, "patient");
    let lift = Review {
        sender: &sender,
        action: ReviewAction::LiftAndRelease,
        seen_version: stage.version("patient").await,
        seen_held: Some(1),
        actor: "alice",
        admin_id: None,
        note: None,
        release_after: std::time::Duration::ZERO,
        term: None,
        mistake: false,
    };
    let (pool, prefix, rules) = (&stage.pool, &stage.prefix, &stage.rules);
    let ladder = Ladder::default();
    let lifting = apply(pool, &slow, prefix, rules, &ladder, &lift);
    let probe = async {
        // The lift is waiting on Redis (its timeout is half a second).
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut tx = pool.begin().await.expect("begin");
        let free = sqlx::query("SELECT 1 FROM senders WHERE id = 'patient' FOR UPDATE NOWAIT")
            .execute(&mut *tx)
            .await;
        tx.rollback().await.expect("rollback");
        free.is_ok()
    };
    let (lifted, free) = tokio::join!(lifting, probe);
    assert!(free, "the sender's row was locked while Redis was asked");
    assert!(matches!(lifted, Err(ReviewError::Limiter(_))), "{lifted:?}");
}
