//! The ban's lifecycle against a running instance (docs/DESIGN.md §3e): terms from the ladder,
//! strikes, the end of a term with a clock the test controls, and the app's webhook.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::support::api::Api;
use crate::support::app::{self as app, app_key, flags_done, secret_box, sender_state};
use crate::support::rules;
use crate::support::webhook_receiver::WebhookReceiver;
use sendguard::apps::{AppChanges, store};
use sendguard::limiter::{Check, KeyPrefix, Limiter};
use sendguard::metrics::Metrics;
use sendguard::moderation::expiry::Expiry;
use sendguard::moderation::review::{Review, ReviewAction, apply};
use sendguard::moderation::terms::{self, Ladder, Term};
use sendguard::rules::RuleCache;
use sendguard::sender_key::SenderKey;

/// A running instance with `sender-hourly` at 3, an app `drawbox` whose webhook goes to a
/// receiver on 127.0.0.1, and what a reviewer needs to act on its senders.
pub(crate) struct Stage {
    pub inner: app::Stage,
    pub api: Api,
    pub app_id: i64,
    pub receiver: WebhookReceiver,
    pub limiter: Limiter,
    pub prefix: KeyPrefix,
    pub rules: RuleCache,
}

impl std::ops::Deref for Stage {
    type Target = app::Stage;
    fn deref(&self) -> &app::Stage {
        &self.inner
    }
}

impl Stage {
    pub async fn new(test: &str) -> Stage {
        let prefix = crate::support::unique_prefix("lifecycle");
        let inner = app::Stage::start_prepared(
            test,
            async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 3).await,
            |cfg| cfg.key_prefix = prefix.as_str().to_owned(),
        )
        .await;
        // The secret comes with the first URL; the receiver then takes the URL's place.
        let secrets = secret_box(&inner.pool).await;
        let first = AppChanges {
            webhook_url: Some("http://127.0.0.1:9/".into()),
            ..AppChanges::default()
        };
        let (_, secret) = store::create(&inner.pool, "drawbox", first, &secrets, true, "test")
            .await
            .expect("app");
        let receiver = WebhookReceiver::start(&secret.expect("secret"), 0).await;
        let url = AppChanges {
            webhook_url: Some(receiver.url()),
            ..AppChanges::default()
        };
        let (app, _) = store::update(&inner.pool, "drawbox", url, &secrets, true, "test")
            .await
            .expect("receiver");
        Stage {
            api: Api::new(inner.base(), app_key(&inner.pool, "drawbox").await),
            app_id: app.id,
            receiver,
            limiter: Limiter::Redis(crate::support::redis_store().await),
            rules: RuleCache::load(&inner.pool).await.expect("rules"),
            prefix,
            inner,
        }
    }

    pub fn key(&self, sender: &str) -> SenderKey {
        SenderKey::new(self.app_id, sender)
    }

    /// Sends `n` invites from `sender`, the fourth and later over `sender-hourly`.
    pub async fn burst(&self, sender: &str, from: usize, n: usize) {
        for i in from..from + n {
            self.api
                .accepted(
                    sender,
                    &format!("{}{i}@example.com", sender.replace('/', "-")),
                )
                .await;
        }
        flags_done(&self.pool).await;
    }

    pub async fn version(&self, sender: &str) -> i64 {
        sqlx::query_scalar("SELECT version FROM senders WHERE app_id = $1 AND id = $2")
            .bind(self.app_id)
            .bind(sender)
            .fetch_one(&self.pool)
            .await
            .expect("sender")
    }

    /// Applies `action` to `sender` as a reviewer who just loaded its page.
    pub async fn decide(
        &self,
        sender: &str,
        action: ReviewAction,
        term: Option<Term>,
        mistake: bool,
    ) -> sendguard::moderation::review::Reviewed {
        let key = self.key(sender);
        let seen_held =
            sqlx::query_scalar("SELECT held_stored FROM senders WHERE app_id = $1 AND id = $2")
                .bind(self.app_id)
                .bind(sender)
                .fetch_optional(&self.pool)
                .await
                .expect("held");
        let review = Review {
            sender: &key,
            action,
            seen_version: self.version(sender).await,
            seen_held,
            actor: "alice",
            admin_id: None,
            note: None,
            term,
            mistake,
            release_after: std::time::Duration::ZERO,
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
        .expect("review")
    }

    pub async fn banned_until(&self, sender: &str) -> Option<DateTime<Utc>> {
        sqlx::query_scalar("SELECT banned_until FROM senders WHERE app_id = $1 AND id = $2")
            .bind(self.app_id)
            .bind(sender)
            .fetch_one(&self.pool)
            .await
            .expect("sender")
    }

    /// An expiry task as an instance runs it, with its own connections.
    pub async fn expiry(&self) -> Expiry {
        Expiry {
            pool: self.db.pool().await,
            limiter: Limiter::Redis(crate::support::redis_store().await),
            keys: self.prefix.clone(),
            rules: self.rules.clone(),
            metrics: Metrics::default(),
        }
    }

    /// The sender's count in `sender-hourly`, read without counting.
    pub async fn hourly_count(&self, sender: &str) -> u64 {
        let rule = self
            .rules
            .all()
            .into_iter()
            .find(|r| r.name == "sender-hourly")
            .expect("rule");
        let subject = sendguard::rules::sender_subject(&self.key(sender));
        let key = self.prefix.key(&subject, &rule.name, &rule.quota);
        let checked = self
            .limiter
            .check_batch(&[Check::new(&key, &rule.quota, 0)], None)
            .await
            .expect("count");
        checked[0].count
    }

    /// The events of `kind` about `sender` the receiver verified.
    pub fn received(&self, kind: &str, sender: &str) -> Vec<serde_json::Value> {
        self.receiver
            .received()
            .into_iter()
            .filter(|r| r.kind == kind && r.body["data"]["sender_id"] == sender)
            .map(|r| r.body["data"].clone())
            .collect()
    }

    /// Waits until the receiver holds `n` events of `kind` about `sender`.
    pub async fn wait_for_events(&self, kind: &str, sender: &str, n: usize) -> bool {
        app::wait_for(Duration::from_secs(20), || async {
            self.received(kind, sender).len() >= n
        })
        .await
    }
}

fn days(n: i64) -> chrono::Duration {
    chrono::Duration::days(n)
}

/// Each confirmed ban is a strike and takes the ladder's term for the strikes before it (7
/// days, 30 days, then permanent); a lift keeps the strike, one marked a mistake removes it;
/// and a strike older than 90 days no longer counts, read with a clock the test moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ladder_steps_up_with_each_strike_and_forgets_one_older_than_90_days() {
    let stage = Stage::new("ladder").await;
    let mut expected = Vec::new();
    for (round, term) in [(0, Term::Week), (1, Term::Month), (2, Term::Permanent)] {
        stage.burst("again", round * 4, 4).await;
        assert_eq!(sender_state(&stage.pool, "again").await, "shadow_banned");
        let before = Utc::now();
        stage
            .decide("again", ReviewAction::ConfirmBan, None, false)
            .await;
        let until = stage.banned_until("again").await;
        match term.until(before) {
            None => assert_eq!(until, None, "round {round}: permanent"),
            Some(at_least) => {
                let until = until.expect("a term");
                assert!(
                    until >= at_least && until <= at_least + chrono::Duration::minutes(5),
                    "round {round}: {until} for {}",
                    term.as_str()
                );
            }
        }
        expected.push(term.as_str());
        // A lift keeps the strike.
        stage
            .decide("again", ReviewAction::LiftAndDiscard, None, false)
            .await;
    }
    let key = stage.key("again");
    let recorded: Vec<(String, Vec<String>)> = sqlx::query_as(
        "SELECT term, rules FROM strikes WHERE app_id = $1 AND sender_id = $2 ORDER BY id",
    )
    .bind(stage.app_id)
    .bind("again")
    .fetch_all(&stage.pool)
    .await
    .expect("strikes");
    assert_eq!(
        recorded,
        expected
            .iter()
            .map(|t| (t.to_string(), vec!["sender-hourly".to_string()]))
            .collect::<Vec<_>>()
    );
    let ladder = Ladder::default();
    let now = Utc::now();
    assert_eq!(terms::counting(&stage.pool, &key, now).await.expect("n"), 3);
    // Strikes 95, 60 and 10 days old: the oldest no longer counts now, the next one not
    // after 31 days more, and none after 81.
    sqlx::query(
        "UPDATE strikes SET at = $3 - make_interval(days => CASE id - (SELECT min(id)
             FROM strikes WHERE app_id = $1 AND sender_id = $2) WHEN 0 THEN 95 WHEN 1 THEN 60
             ELSE 10 END)
         WHERE app_id = $1 AND sender_id = $2",
    )
    .bind(stage.app_id)
    .bind("again")
    .bind(now)
    .execute(&stage.pool)
    .await
    .expect("age the strikes");
    let next = |at: DateTime<Utc>| {
        let (ladder, pool, key) = (&ladder, &stage.pool, &key);
        async move { ladder.next_term(pool, key, at).await.expect("term") }
    };
    assert_eq!(next(now).await, Term::Permanent, "two strikes count");
    assert_eq!(next(now + days(31)).await, Term::Month, "one strike counts");
    assert_eq!(next(now + days(81)).await, Term::Week, "none counts");

    // A ban lifted as a mistake loses its strike.
    stage.burst("again", 12, 4).await;
    stage
        .decide("again", ReviewAction::ConfirmBan, Some(Term::Day), false)
        .await;
    assert_eq!(
        terms::counting(&stage.pool, &key, now + days(1))
            .await
            .expect("n"),
        3
    );
    stage
        .decide("again", ReviewAction::LiftAndDiscard, None, true)
        .await;
    assert_eq!(
        terms::counting(&stage.pool, &key, now + days(1))
            .await
            .expect("n"),
        2
    );
}

/// The end of a term, run by two instances at once with a clock past it: one of them ends
/// the ban, once; the sender is active, audited as `system`, its own counters cleared, its
/// held invites discarded, and the app told once, with `"reason": "expired"`. The running
/// instance, which had the sender cached as banned, sends its next invite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_ends_once_on_two_instances_at_once() {
    let stage = Stage::new("expiry").await;
    stage.burst("brief", 0, 4).await;
    let banned = stage
        .decide("brief", ReviewAction::ConfirmBan, Some(Term::Day), false)
        .await;
    assert_eq!(banned.invites_changed, 1, "the held invite is discarded");
    assert!(stage.wait_for_events("sender.banned", "brief", 1).await);
    let statement = &stage.received("sender.banned", "brief")[0];
    assert_eq!(statement["rule"], "sender-hourly");
    assert_eq!(statement["observed"], 4);
    assert_eq!(statement["limit"], 3);
    assert_eq!(statement["term"], "1d");
    let until = stage.banned_until("brief").await.expect("a term");
    assert_eq!(
        statement["banned_until"]
            .as_str()
            .and_then(|t| t.parse::<DateTime<Utc>>().ok()),
        Some(until)
    );
    let (status, appeal) = stage.api.appeal("brief", "Please look again").await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{appeal}");
    // Held while banned, and still counted: over the limit, attempts keep counting.
    stage.burst("brief", 4, 2).await;
    assert_eq!(stage.hourly_count("brief").await, 6);

    let (a, b) = (stage.expiry().await, stage.expiry().await);
    // Not yet: the term runs for a day.
    assert_eq!(a.run_once(Utc::now()).await.expect("expiry"), 0);
    let later = until + chrono::Duration::seconds(1);
    let (ended_a, ended_b) = tokio::join!(a.run_once(later), b.run_once(later));
    let ended = ended_a.expect("a") + ended_b.expect("b");
    assert_eq!(ended, 1, "one instance ended the ban");
    let lag_counts: usize = [&a, &b]
        .iter()
        .map(|e| e.metrics.render(&[]).expect("metrics"))
        .filter(|text| text.contains("sendguard_ban_expiry_lag_seconds_count 1"))
        .count();
    assert_eq!(
        lag_counts, 1,
        "the ending instance measured how late it was"
    );
    assert_eq!(sender_state(&stage.pool, "brief").await, "active");
    assert_eq!(stage.banned_until("brief").await, None);
    assert_eq!(stage.hourly_count("brief").await, 0, "the counters cleared");
    let (audited, by): (i64, Option<String>) = sqlx::query_as(
        "SELECT count(*), min(actor) FROM audit_log WHERE sender_id = 'brief'
             AND action = 'ban_expired'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit");
    assert_eq!((audited, by.as_deref()), (1, Some("system")));
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites WHERE sender_id = 'brief' AND status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("held");
    assert_eq!(held, 0, "stale held invites are discarded");
    assert!(stage.wait_for_events("sender.lifted", "brief", 1).await);
    // A second event would have been delivered within the same moments.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lifted = stage.received("sender.lifted", "brief");
    assert_eq!(lifted.len(), 1, "{lifted:?}");
    assert_eq!(lifted[0]["reason"], "expired");
    assert_eq!(a.run_once(later).await.expect("again"), 0, "nothing left");
    let (_, standing) = stage.api.standing("brief").await;
    assert_eq!(
        standing["appeal"],
        json!({"id": appeal["id"], "status": "moot", "reply": null}),
        "the open appeal is moot"
    );

    // The instance forgets the ban it had cached: the next invite goes out.
    let sent = app::wait_for(Duration::from_secs(5), || async {
        stage
            .api
            .send(json!({"sender_id": "brief", "recipient": "after@example.com"}))
            .await;
        flags_done(&stage.pool).await;
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM invites WHERE sender_id = 'brief'
                 AND recipient = 'after@example.com' AND status IN ('queued', 'sent')",
        )
        .fetch_one(&stage.pool)
        .await
        .expect("after")
            > 0
    })
    .await;
    assert!(
        sent,
        "the instance still held the sender's invites as banned"
    );
}

/// A repeat offender confirmed automatically takes the ladder's term and is a strike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatically_confirmed_repeat_offender_takes_the_ladders_term() {
    let prefix = crate::support::unique_prefix("lifecycle");
    let stage = app::Stage::start_prepared(
        "autoconfirm",
        async |pool| rules::set(pool, "sender-hourly", |r| r.limit = 3).await,
        |cfg| {
            cfg.key_prefix = prefix.as_str().to_owned();
            cfg.repeat_auto_confirm = true;
        },
    )
    .await;
    let api = Api::new(stage.base(), app::api_key(&stage.pool).await);
    let limiter = Limiter::Redis(crate::support::redis_store().await);
    let rules = RuleCache::load(&stage.pool).await.expect("rules");
    let key = SenderKey::new(1, "twice");
    for round in 0..2 {
        for n in 0..4 {
            api.accepted("twice", &format!("t{round}{n}@example.com"))
                .await;
        }
        flags_done(&stage.pool).await;
        if round == 0 {
            let (version, held): (i64, i64) =
                sqlx::query_as("SELECT version, held_stored FROM senders WHERE id = 'twice'")
                    .fetch_one(&stage.pool)
                    .await
                    .expect("sender");
            let review = Review {
                sender: &key,
                action: ReviewAction::ConfirmBan,
                seen_version: version,
                seen_held: Some(held),
                actor: "alice",
                admin_id: None,
                note: None,
                term: None,
                mistake: false,
                release_after: std::time::Duration::ZERO,
            };
            let ladder = Ladder::default();
            apply(&stage.pool, &limiter, &prefix, &rules, &ladder, &review)
                .await
                .expect("confirm");
            let lift = Review {
                action: ReviewAction::LiftAndDiscard,
                seen_version: version + 1,
                ..review
            };
            apply(&stage.pool, &limiter, &prefix, &rules, &ladder, &lift)
                .await
                .expect("lift");
        }
    }
    let (state, until): (String, Option<DateTime<Utc>>) =
        sqlx::query_as("SELECT state, banned_until FROM senders WHERE id = 'twice'")
            .fetch_one(&stage.pool)
            .await
            .expect("sender");
    assert_eq!(state, "banned", "confirmed automatically");
    let until = until.expect("a term");
    let from_now = until - Utc::now();
    assert!(
        from_now > days(29) && from_now <= days(30),
        "the second strike's 30 days: {from_now}"
    );
    let strikes: Vec<(String, String)> =
        sqlx::query_as("SELECT term, by_actor FROM strikes WHERE sender_id = 'twice' ORDER BY id")
            .fetch_all(&stage.pool)
            .await
            .expect("strikes");
    assert_eq!(
        strikes,
        [
            ("7d".to_string(), "alice".to_string()),
            ("30d".to_string(), "system".to_string())
        ]
    );
}
