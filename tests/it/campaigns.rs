//! Campaigns (docs/DESIGN.md §3d) against the real Postgres, Redis and SMTP sink: many
//! accounts, each under every limit, sending one payload, held from the sender past the
//! limit; with a settle time, held before anything is delivered; decided as one.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;

use sendguard::admin::accounts::Role;

use crate::support::api::Api;
use crate::support::app::{Stage, api_key, flags_done};
use crate::support::html::{self, Page};
use crate::support::{dashboard, rules};

/// Senders and invites of the campaign the issue describes: fifty year-old accounts, eight
/// invites each to strangers.
const SENDERS: usize = 50;
const EACH: usize = 8;

/// The pitch, with the recipient's name and the numbers changed in each.
pub(crate) fn pitch(sender: usize, n: usize) -> String {
    let names = ["Ana", "Bo", "Chidi", "Dana", "Eli", "Farah", "Gus", "Hana"];
    format!(
        "Hi {}, your parcel is waiting at our depot and could not be delivered because the \
         address was incomplete. Call +1 555 01{sender:02} today to claim it before it is \
         returned to the sender, quoting ref 44{n}{sender}. Office hours are nine to five.",
        names[n % names.len()]
    )
}

pub(crate) fn year_ago() -> String {
    (chrono::Utc::now() - chrono::Duration::days(365)).to_rfc3339()
}

/// Sends the campaign: sender after sender, each with its invites; answers how many were
/// answered 200.
async fn send_campaign(api: &Api, senders: usize) -> usize {
    let mut ok = 0;
    for s in 0..senders {
        for n in 0..EACH {
            ok += usize::from(send_pitch(api, s, n).await == StatusCode::OK);
        }
    }
    ok
}

/// Sends invite `n` of the campaign's sender `s`.
async fn send_pitch(api: &Api, s: usize, n: usize) -> StatusCode {
    let (status, _) = api
        .send(json!({
            "sender_id": format!("acct{s:02}"),
            "recipient": format!("stranger{s}x{n}@mail{}.example", n % 3),
            "message": pitch(s, n),
            "sender_created_at": year_ago(),
        }))
        .await;
    status
}

async fn by_status(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT status, count(*) FROM invites GROUP BY 1 ORDER BY 1")
        .fetch_all(pool)
        .await
        .expect("statuses")
}

/// The senders with at least one held invite, in order.
async fn senders_held(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT DISTINCT sender_id FROM invites WHERE status = 'held' ORDER BY sender_id",
    )
    .fetch_all(pool)
    .await
    .expect("held senders")
}

/// With the default rules, the first five accounts' invites go out and every invite from the
/// sixth account on is held; each account past the fifth is flagged once, under one campaign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifty_account_campaign_is_held_from_the_sixth_sender() {
    let prefix = crate::support::unique_prefix("campaign");
    let keys = prefix.clone();
    let stage = Stage::start_with("campaign_sixth", &[], move |cfg| {
        cfg.key_prefix = keys.as_str().to_owned()
    })
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    assert_eq!(send_campaign(&api, SENDERS).await, SENDERS * EACH);
    let delivered = stage.settle().await;
    assert_eq!(delivered, 5 * EACH, "the first five senders' invites");
    assert_eq!(
        by_status(&stage.pool).await,
        [
            ("held".into(), (45 * EACH) as i64),
            ("sent".into(), (5 * EACH) as i64)
        ]
    );
    let held = senders_held(&stage.pool).await;
    assert_eq!(held.first().map(String::as_str), Some("acct05"));
    assert_eq!(held.len(), 45);
    let (campaigns, flagged): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM campaigns),
             (SELECT count(DISTINCT sender_id) FROM flags WHERE campaign_id IS NOT NULL)",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("campaigns");
    assert_eq!((campaigns, flagged), (1, 45));
    // The campaign's count keeps at most its limit and one more sender, whatever the campaign's
    // size: well under a kilobyte.
    let subject: String = sqlx::query_scalar("SELECT subject FROM campaigns")
        .fetch_one(&stage.pool)
        .await
        .expect("subject");
    let rule = sendguard::rules::load_all(&stage.pool)
        .await
        .expect("rules")
        .into_iter()
        .find(|r| r.name == "campaign-text")
        .expect("the default rule");
    let key = prefix.key(&subject, &rule.name, &rule.quota);
    let store = crate::support::redis_store().await;
    let bytes: i64 =
        crate::support::query(&store, redis::cmd("MEMORY").arg("USAGE").arg(key.as_str())).await;
    assert!((1..=1024).contains(&bytes), "{bytes} bytes");
    println!("campaign-text key of a 50-sender campaign: {bytes} bytes");
}

/// With a settle time of a minute, the sixth sender's breach sweeps the five before it out of
/// the queue: the campaign delivers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_settle_time_the_campaign_delivers_nothing() {
    let stage = Stage::start_with("campaign_settle", &[], |cfg| cfg.settle_secs = 60).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    assert_eq!(send_campaign(&api, SENDERS).await, SENDERS * EACH);
    flags_done(&stage.pool).await;
    assert_eq!(
        by_status(&stage.pool).await,
        [("held".into(), (SENDERS * EACH) as i64)],
        "every invite held, none left waiting"
    );
    // Nothing is on its way either: give the outbox a few rounds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(stage.sink.messages().is_empty());
    let flagged: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT sender_id) FROM flags WHERE campaign_id IS NOT NULL",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("flagged");
    assert_eq!(flagged, SENDERS as i64, "the swept senders are flagged too");
}

/// A stage with a settle time of a minute where six senders have sent the pitch once each: the
/// sixth crossed `campaign-text`, and the sweep of its follow-up held the five before it.
async fn six_senders_settling(test: &str) -> (Stage, Api) {
    let stage = Stage::start_with(test, &[], |cfg| cfg.settle_secs = 60).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for s in 0..6 {
        assert_eq!(send_pitch(&api, s, 0).await, StatusCode::OK);
    }
    flags_done(&stage.pool).await;
    (stage, api)
}

/// After its first seconds a campaign's queue is swept at most once a second (every invite past
/// the limit is held by its own decision). A straggler, an invite counted before the crossing
/// whose commit came after a sweep, is caught by the next breach's sweep, long before a settle
/// time of a minute runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_straggler_is_swept_by_the_next_sweep() {
    let (stage, api) = six_senders_settling("campaign_straggler").await;
    // Past the campaign's first seconds, when every breach sweeps.
    tokio::time::sleep(Duration::from_millis(5200)).await;
    let straggle = async || -> uuid::Uuid {
        sqlx::query_scalar(
            "WITH back AS (
                 UPDATE invites SET status = 'queued'
                 WHERE id = (SELECT id FROM invites WHERE status = 'held' LIMIT 1)
                 RETURNING id, created_at, campaign_keys),
             queued AS (
                 INSERT INTO outbox (invite_id, created_at, next_attempt_at,
                     campaign_buckets)
                 SELECT id, created_at, now() + interval '60 seconds',
                     ARRAY(SELECT sendguard_campaign_bucket(k) FROM unnest(campaign_keys) k)
                 FROM back)
             SELECT id FROM back",
        )
        .fetch_one(&stage.pool)
        .await
        .expect("a straggler")
    };
    let status = async |id: uuid::Uuid| -> String {
        sqlx::query_scalar("SELECT status FROM invites WHERE id = $1")
            .bind(id)
            .fetch_one(&stage.pool)
            .await
            .expect("status")
    };
    // A breach sweeps; the straggler commits after it; a breach a second later sweeps again.
    assert_eq!(send_pitch(&api, 6, 0).await, StatusCode::OK);
    flags_done(&stage.pool).await;
    let straggler = straggle().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(send_pitch(&api, 7, 0).await, StatusCode::OK);
    flags_done(&stage.pool).await;
    assert_eq!(status(straggler).await, "held");
    assert!(stage.sink.messages().is_empty(), "nothing delivered");
}

/// A held invite a moderator released waits out the settle time in the outbox like any other,
/// but the campaign's next sweep leaves it there: the release was a decision on that invite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_invite_is_not_swept_back() {
    let (stage, api) = six_senders_settling("campaign_release").await;
    let (invite, app_id, version): (uuid::Uuid, i64, i64) = sqlx::query_as(
        "SELECT i.id, i.app_id, s.version FROM invites i
         JOIN senders s ON s.app_id = i.app_id AND s.id = i.sender_id
         WHERE i.sender_id = 'acct00' AND i.status = 'held'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("the first sender's swept invite");
    let released = sendguard::moderation::held::decide_invite(
        &stage.pool,
        &sendguard::sender_key::SenderKey::new(app_id, "acct00"),
        version,
        invite,
        sendguard::moderation::held::InviteDecision::Release {
            after: Duration::from_secs(60),
        },
        "moderator",
        None,
    )
    .await
    .expect("release");
    assert!(released);
    let before = swept_at(&stage.pool).await;
    // Past the campaign's first seconds, a breach sweeps again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(send_pitch(&api, 6, 0).await, StatusCode::OK);
    flags_done(&stage.pool).await;
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id = $1")
        .bind(invite)
        .fetch_one(&stage.pool)
        .await
        .expect("status");
    assert_eq!(
        status, "queued",
        "the released invite still waits to go out"
    );
    assert!(
        swept_at(&stage.pool).await > before,
        "the breach swept the campaign again"
    );
}

async fn swept_at(pool: &PgPool) -> chrono::DateTime<chrono::Utc> {
    sqlx::query_scalar("SELECT swept_at FROM campaigns")
        .fetch_one(pool)
        .await
        .expect("the campaign's last sweep")
}

/// A trusted sender's invites never wait for the settle time, and the sweep leaves them be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_senders_never_wait() {
    let trusted = "INSERT INTO senders (app_id, id, state)
         SELECT id, 'partner', 'trusted' FROM apps WHERE name = 'default'";
    let stage = Stage::start_with("campaign_trusted", &[trusted], |cfg| cfg.settle_secs = 60).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    api.accepted("partner", "second@example.com").await;
    api.accepted("stranger", "third@example.com").await;
    let sent = crate::support::app::wait_for(Duration::from_secs(10), || async {
        !stage.sink.messages().is_empty()
    })
    .await;
    assert!(sent);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let to: Vec<String> = stage
        .sink
        .messages()
        .iter()
        .flat_map(|m| m.to.clone())
        .collect();
    assert_eq!(
        to,
        ["second@example.com"],
        "only the trusted sender's invite went out"
    );
}

/// A domain many honest senders link to is recorded by the monitor-only default rule and never
/// held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_popular_domain_is_monitored_and_never_held() {
    let stage = Stage::start("campaign_popular_domain", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let created = year_ago();
    // Each sender writes in their own words: the texts share no fingerprint, only the domain.
    let words = [
        "budget",
        "review",
        "garden",
        "launch",
        "recipe",
        "travel",
        "hockey",
        "poster",
        "thesis",
        "invoice",
        "roadmap",
        "concert",
        "lecture",
        "survey",
        "wedding",
        "podcast",
        "harvest",
        "merger",
        "sprint",
        "festival",
        "workshop",
        "quarterly",
        "brochure",
        "pottery",
        "marathon",
    ];
    for s in 0..25 {
        let own: Vec<&str> = (0..6)
            .map(|k| words[(s * 7 + k * 11 + k * k) % 25])
            .collect();
        let message = format!("{} https://docs.bigcloud.com/d/{s}", own.join(" "));
        let (status, _) = api
            .send(json!({
                "sender_id": format!("fan{s}"),
                "recipient": format!("friend{s}@example.org"),
                "message": message,
                "sender_created_at": created,
            }))
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(stage.settle().await, 25, "all delivered");
    let exceeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM invites, jsonb_array_elements(decision -> 'rules') r
         WHERE r ->> 0 = 'campaign-link-domain' AND r ->> 4 = 'exceeded'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("monitored");
    assert_eq!(
        exceeded, 5,
        "the 21st to the 25th sender are over the monitor's limit"
    );
    let flags: i64 = sqlx::query_scalar("SELECT count(*) FROM flags")
        .fetch_one(&stage.pool)
        .await
        .expect("flags");
    assert_eq!(flags, 0, "a monitor puts nothing in the review queue");
}

/// One address invited by many different senders, under a `recipient` rule of distinct
/// senders: the sender past the limit is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipient_invited_by_many_senders_is_protected() {
    let stage = Stage::start_prepared(
        "campaign_recipient",
        async |pool| {
            // The recipient rule counts senders instead of invites.
            rules::set(pool, "recipient-daily", |r| {
                r.signal = "distinct_senders".into();
                r.limit = 3;
                r.action = "hold".into();
            })
            .await
        },
        |_| {},
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    for s in 0..5 {
        let id = format!("bomber{s}");
        api.accepted(&id, "target@example.com").await;
    }
    flags_done(&stage.pool).await;
    assert_eq!(
        senders_held(&stage.pool).await,
        ["bomber3", "bomber4"],
        "the fourth and fifth sender"
    );
}

const PASSWORD: &str = "correct horse battery";

/// A moderator logged in to `stage`'s dashboard.
async fn moderator(stage: &Stage) -> reqwest::Client {
    sendguard::admin::accounts::add(&stage.pool, "mona", PASSWORD, Role::Moderator, "test")
        .await
        .expect("moderator");
    let client = dashboard::client();
    let resp = dashboard::log_in(&client, &stage.base(), "mona", PASSWORD).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    client
}

async fn page(client: &reqwest::Client, url: String) -> (StatusCode, Page) {
    let resp = client.get(url).send().await.expect("get");
    let status = resp.status();
    (status, html::parse(&resp.text().await.expect("body")))
}

/// Posts a decision on campaign `id` from its page, confirmed or not.
async fn decide(
    client: &reqwest::Client,
    stage: &Stage,
    id: i64,
    action: &str,
    confirmed: bool,
) -> reqwest::Response {
    let (_, campaign) = page(client, format!("{}/admin/campaigns/{id}", stage.base())).await;
    let mut form = vec![
        ("csrf", campaign.field("csrf")),
        ("version", campaign.field("version")),
        ("action", action.to_owned()),
        ("note", "one payload, fifty accounts".to_owned()),
    ];
    if confirmed {
        form.push(("confirmed", "yes".to_owned()));
    }
    client
        .post(format!("{}/admin/campaigns/{id}/decide", stage.base()))
        .form(&form)
        .send()
        .await
        .expect("decide")
}

async fn the_campaign(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT id FROM campaigns")
        .fetch_one(pool)
        .await
        .expect("one campaign")
}

/// The review queue shows the campaign as one row with its sender count; from its page one
/// confirmed decision bans every sender, discards their held invites and is audited once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_bans_a_whole_campaign_at_once() {
    let stage = Stage::start("campaign_ban_all", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    send_campaign(&api, 10).await;
    assert_eq!(stage.settle().await, 5 * EACH);
    let client = moderator(&stage).await;
    let (status, queue) = page(&client, format!("{}/admin/queue", stage.base())).await;
    assert_eq!(status, StatusCode::OK);
    let row = queue.row("#1, text").expect("the campaign's row");
    let cells: Vec<String> = row.select("td").map(|td| td.text()).collect();
    assert_eq!(cells[1], "campaign-text");
    assert_eq!(cells[2], "5", "five senders flagged");
    assert!(
        queue.row("acct05").is_none(),
        "its senders are not rows of their own"
    );
    let id = the_campaign(&stage.pool).await;
    let asked = decide(&client, &stage, id, "ban_all", false).await;
    assert_eq!(asked.status(), StatusCode::OK);
    let asked = html::parse(&asked.text().await.expect("body"));
    assert!(asked.text().contains("discarded for good"), "{asked}");
    assert_eq!(
        by_status(&stage.pool).await,
        [
            ("held".into(), (5 * EACH) as i64),
            ("sent".into(), (5 * EACH) as i64)
        ],
        "nothing changes before the confirmation"
    );
    let done = decide(&client, &stage, id, "ban_all", true).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        by_status(&stage.pool).await,
        [
            ("discarded".into(), (5 * EACH) as i64),
            ("sent".into(), (5 * EACH) as i64)
        ]
    );
    let banned: i64 = sqlx::query_scalar("SELECT count(*) FROM senders WHERE state = 'banned'")
        .fetch_one(&stage.pool)
        .await
        .expect("banned");
    assert_eq!(
        banned, 10,
        "every sender of the campaign, the first five too"
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE action = 'ban_all' AND actor = 'mona'
             AND note = 'one payload, fifty accounts'",
    )
    .fetch_one(&stage.pool)
    .await
    .expect("audit");
    assert_eq!(audited, 1);
    let (_, queue) = page(&client, format!("{}/admin/queue", stage.base())).await;
    assert!(queue.row("#1, text").is_none(), "decided: out of the queue");
}

/// Marked benign, a campaign's held invites go out and its text never counts again: a new
/// account sending it later is not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_benign_mark_releases_everything_and_stops_the_counting() {
    let stage = Stage::start("campaign_benign", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    send_campaign(&api, 8).await;
    assert_eq!(stage.settle().await, 5 * EACH);
    let client = moderator(&stage).await;
    let id = the_campaign(&stage.pool).await;
    let done = decide(&client, &stage, id, "mark_benign", true).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(stage.settle().await, 8 * EACH, "the held invites went out");
    // Every instance reloads the marks within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, _) = api
        .send(json!({
            "sender_id": "latecomer",
            "recipient": "late@example.net",
            "message": pitch(77, 3),
            "sender_created_at": year_ago(),
        }))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        stage.settle().await,
        8 * EACH + 1,
        "the latecomer's invite went out"
    );
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM flags WHERE closed_at IS NULL")
        .fetch_one(&stage.pool)
        .await
        .expect("flags");
    assert_eq!(open, 0, "nothing left to review");
}

/// Posts the review form of the default app's `sender` as its page shows it now, with `action`
/// confirmed.
async fn review_sender(client: &reqwest::Client, stage: &Stage, sender: &str, action: &str) {
    let path = format!("{}/admin/senders/default/{sender}", stage.base());
    let (_, page) = page(client, path.clone()).await;
    let form = [
        ("csrf", page.field("csrf")),
        ("version", page.field("version")),
        ("held", page.field("held")),
        ("sender", format!("default/{sender}")),
        ("action", action.to_owned()),
        ("confirmed", "yes".to_owned()),
    ];
    let resp = client
        .post(format!("{path}/review"))
        .form(&form)
        .send()
        .await
        .expect("review");
    assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{action} {sender}");
}

/// The held invites of each sender, by sender.
async fn held_by_sender(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT sender_id, count(*) FROM invites WHERE status = 'held'
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("held")
}

/// A benign mark releases the campaign's invites of senders free to send, never those of a
/// sender shadow-banned or banned on its own account: a campaign's decision is no way around a
/// sender's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_benign_mark_sends_nothing_of_a_banned_sender() {
    let stage = Stage::start("campaign_benign_banned", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    send_campaign(&api, 8).await;
    assert_eq!(stage.settle().await, 5 * EACH);
    let client = moderator(&stage).await;
    review_sender(&client, &stage, "acct06", "shadow_ban").await;
    review_sender(&client, &stage, "acct07", "ban").await;
    assert_eq!(send_pitch(&api, 7, EACH).await, StatusCode::OK);
    flags_done(&stage.pool).await;
    assert_eq!(
        held_by_sender(&stage.pool).await,
        [
            ("acct05".into(), EACH as i64),
            ("acct06".into(), EACH as i64),
            ("acct07".into(), 1)
        ]
    );
    let id = the_campaign(&stage.pool).await;
    let done = decide(&client, &stage, id, "mark_benign", true).await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        stage.settle().await,
        6 * EACH,
        "the active sender's invites went out, no one else's"
    );
    assert_eq!(
        held_by_sender(&stage.pool).await,
        [("acct06".into(), EACH as i64), ("acct07".into(), 1)]
    );
}

/// A campaign decision posted from a page older than the campaign (a sender joined since) is
/// refused before its confirmation page, which would otherwise ask about the campaign as it is
/// now under the reviewer's older reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_decision_from_an_older_page_is_refused_before_it_asks() {
    let stage = Stage::start("campaign_stale_ask", &[]).await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    send_campaign(&api, 7).await;
    let client = moderator(&stage).await;
    let id = the_campaign(&stage.pool).await;
    let (_, older) = page(&client, format!("{}/admin/campaigns/{id}", stage.base())).await;
    assert_eq!(send_pitch(&api, 7, 0).await, StatusCode::OK);
    flags_done(&stage.pool).await;
    let resp = client
        .post(format!("{}/admin/campaigns/{id}/decide", stage.base()))
        .form(&[
            ("csrf", older.field("csrf")),
            ("version", older.field("version")),
            ("action", "ban_all".to_owned()),
        ])
        .send()
        .await
        .expect("decide");
    assert_eq!(resp.status(), StatusCode::CONFLICT);
}

/// A signature of the minima `values` gives, built as the service reads one back.
fn signature(values: impl Fn(usize) -> u32) -> sendguard::campaigns::fingerprint::Signature {
    use sendguard::campaigns::fingerprint::{Signature, VALUES, VERSION};
    let mut bytes = vec![VERSION];
    for n in 0..VALUES {
        bytes.extend_from_slice(&values(n).to_le_bytes());
    }
    Signature::from_bytes(&bytes).expect("a signature")
}

/// How a test looks a text's group up: in the group script's own call, or riding in the
/// limiter's call that counts the rules (a single server's way, here with no rule).
#[derive(Clone, Copy)]
enum LookUp {
    OwnCall,
    Folded,
}

/// The groups of a text, looked up as `how` says.
struct GroupsBy {
    groups: sendguard::campaigns::groups::Groups,
    limiter: sendguard::limiter::Limiter,
    how: LookUp,
}

impl GroupsBy {
    async fn group_of(
        &self,
        signature: &sendguard::campaigns::fingerprint::Signature,
        window_secs: u64,
    ) -> Result<String, sendguard::limiter::LimiterError> {
        match self.how {
            LookUp::OwnCall => self.groups.group_of(signature, window_secs).await,
            LookUp::Folded => {
                let lookup = self.groups.fold(signature, window_secs);
                let folded = sendguard::limiter::FoldedGroup {
                    lookup: &lookup,
                    checks: Vec::new(),
                };
                let (decisions, id) = self.limiter.check_folded(&[], None, &folded).await?;
                assert!(decisions.is_empty());
                Ok(id)
            }
        }
    }
}

/// Whether the test Redis is a cluster, where a look-up cannot ride in the rules' call (each
/// subject's keys live on their own node): then the limiter refuses one.
async fn a_cluster_refuses_a_folded_look_up(
    groups: &sendguard::campaigns::groups::Groups,
    limiter: &sendguard::limiter::Limiter,
) -> bool {
    if groups.folds() {
        return false;
    }
    let lookup = groups.fold(&signature(|n| n as u32), 60);
    let folded = sendguard::limiter::FoldedGroup {
        lookup: &lookup,
        checks: Vec::new(),
    };
    let refused = limiter.check_folded(&[], None, &folded).await;
    assert!(refused.is_err(), "{refused:?}");
    true
}

/// The shared test Redis, a limiter on it and the campaign groups under a prefix of the test's
/// own, for a test of look-ups riding in the rules' call; `None` on a cluster, once it has
/// refused one.
struct Folding {
    store: sendguard::limiter::RedisStore,
    limiter: sendguard::limiter::Limiter,
    prefix: sendguard::limiter::KeyPrefix,
    groups: sendguard::campaigns::groups::Groups,
}

async fn folding(test: &str) -> Option<Folding> {
    let store = crate::support::redis_store().await;
    let limiter = sendguard::limiter::Limiter::Redis(store.clone());
    let prefix = crate::support::unique_prefix(test);
    let groups = sendguard::campaigns::groups::Groups::new(&limiter, &prefix);
    if a_cluster_refuses_a_folded_look_up(&groups, &limiter).await {
        return None;
    }
    Some(Folding {
        store,
        limiter,
        prefix,
        groups,
    })
}

/// The groups in Redis: the same text and a near-duplicate join the group of the text they
/// match; a text that shares a band with a group but not its signature starts its own and takes
/// no band from it; every hash written has a lifetime; and a group of the last generation is
/// found and carried into this one, where the generation after finds it in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_duplicates_share_a_group_in_redis_and_a_shared_band_alone_does_not() {
    groups_in_redis(LookUp::OwnCall).await;
}

/// The same, each look-up riding in the limiter's call: the one function in both scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_in_the_rules_call_groups_texts_as_its_own_call_does() {
    groups_in_redis(LookUp::Folded).await;
}

async fn groups_in_redis(how: LookUp) {
    use sendguard::campaigns::fingerprint::{BANDS, ROWS};
    use sendguard::campaigns::groups::{Groups, generation, store_key};
    use sendguard::limiter::Limiter;
    let store = crate::support::redis_store().await;
    let limiter = Limiter::Redis(store.clone());
    let prefix = crate::support::unique_prefix("groups");
    let groups = GroupsBy {
        groups: Groups::new(&limiter, &prefix),
        limiter,
        how,
    };
    if matches!(how, LookUp::Folded)
        && a_cluster_refuses_a_folded_look_up(&groups.groups, &groups.limiter).await
    {
        return;
    }
    let day = 86_400;
    let text = |n: usize| n as u32 * 7 + 1;
    let first = groups.group_of(&signature(text), day).await.expect("group");
    let again = groups.group_of(&signature(text), day).await.expect("group");
    assert_eq!(again, first, "the same text joins its group");
    // One value changed in every band: no band in common with the first, 54 of 64 agree.
    let banded = BANDS * ROWS;
    let one_per_band = |n: usize| {
        if n < banded && n.is_multiple_of(ROWS) {
            9_000_000 + n as u32
        } else {
            text(n)
        }
    };
    // The first band alone in common, every other value different.
    let first_band_only = |n: usize| {
        if n < ROWS {
            text(n)
        } else {
            5_000_000 + n as u32
        }
    };
    // The first band in common and one value changed in every other: it matches the first
    // text only through the first band.
    let through_first_band = |n: usize| {
        if n >= ROWS && n < banded && n % ROWS == 1 {
            7_000_000 + n as u32
        } else {
            text(n)
        }
    };
    let other = groups
        .group_of(&signature(first_band_only), day)
        .await
        .expect("group");
    assert_ne!(
        other, first,
        "a shared band without the signature is no match"
    );
    let near = groups
        .group_of(&signature(through_first_band), day)
        .await
        .expect("group");
    assert_eq!(near, first, "the first band still names the first group");
    let apart = groups
        .group_of(&signature(one_per_band), day)
        .await
        .expect("group");
    assert_ne!(apart, first, "no band in common, no candidate");
    // Every hash written expires once the next generation is over, a minute's slack for clocks.
    let expires = async |key: String, window: u64| {
        let ttl: i64 = crate::support::query(&store, redis::cmd("TTL").arg(&key)).await;
        assert!(
            (1..=2 * window as i64 + 60).contains(&ttl),
            "{key} lives two generations at most, and not for ever: TTL {ttl}"
        );
    };
    expires(store_key(prefix.as_str(), generation(day)), day).await;

    // Generations of one second: the first text comes early in one, the next in the one after
    // (waiting for a fresh second first, so that the first call cannot straddle a boundary).
    let second = || sendguard::limiter::now_ms() / 1000;
    let next_second = async |after: u64| {
        while second() == after {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    next_second(second()).await;
    let start = second();
    // The group's first text; the next two agree with it on exactly 43 of 64 values, the least
    // that matches, and with each other on 22: the third can join only through the first
    // text's signature.
    let first_text = |n: usize| n as u32 * 11 + 3;
    let old = groups
        .group_of(&signature(first_text), 1)
        .await
        .expect("group");
    next_second(start).await;
    // Values 0-20 changed: it shares bands 7-9 (values 21-29) with the first text.
    let carried = groups
        .group_of(
            &signature(|n| {
                if n < 21 {
                    500_000 + n as u32
                } else {
                    first_text(n)
                }
            }),
            1,
        )
        .await
        .expect("group");
    assert_eq!(carried, old, "the last generation's group is found");
    expires(store_key(prefix.as_str(), start + 1), 1).await;
    // Values 43-63 changed: it shares every band with the first text, of which 7-9 are in the
    // generation the carry wrote; the first text's own generation is no longer read.
    next_second(start + 1).await;
    let later = groups
        .group_of(
            &signature(|n| {
                if n >= 43 {
                    600_000 + n as u32
                } else {
                    first_text(n)
                }
            }),
            1,
        )
        .await
        .expect("group");
    assert_eq!(
        later, old,
        "the carried group, with its first text's signature, is found a generation later"
    );
}

/// A look-up riding in the rules' call counts the text under the group it finds: a
/// near-duplicate of a text grouped by a call of its own (a cluster's way) is counted on that
/// group's keys, a sliding log's sequence key with them, and nothing is left under the id that
/// stood in for the group; the sender's rule in the same call keeps its own key; a text of its
/// own is counted under its new group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_in_the_rules_call_counts_the_text_under_the_group_it_finds() {
    use sendguard::limiter::{Algorithm, Check, EdgeMode, FoldedGroup, Quota, group_id};
    let Some(Folding {
        store,
        limiter,
        prefix,
        groups,
    }) = folding("folded").await
    else {
        return;
    };
    let day = 86_400;
    let text = |n: usize| n as u32 * 13 + 5;
    let first = groups.group_of(&signature(text), day).await.expect("group");
    let counts = Quota::new(5, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let log = Quota::new(5, 3600, Algorithm::SlidingLog);
    let subject = |group: &str| format!("fingerprint:{group}");
    let counted = limiter
        .check(
            &prefix.key(&subject(&first), "campaign-text", &counts),
            &counts,
            1,
            None,
        )
        .await
        .expect("count");
    assert_eq!(counted.count, 1, "the group's count holds one invite");

    // The sender's rule, then two of the text's group, one a sliding log (two keys).
    let call = async |signature| {
        let lookup = groups.fold(&signature, day);
        let fresh = group_id(lookup.fresh);
        let keys = [
            prefix.key("sender:u_1", "sender-hourly", &counts),
            prefix.key(&subject(&fresh), "campaign-text", &counts),
            prefix.key(&subject(&fresh), "campaign-log", &log),
        ];
        let checks = [
            Check::new(&keys[0], &counts, 1),
            Check::new(&keys[1], &counts, 1),
            Check::new(&keys[2], &log, 1),
        ];
        let folded = FoldedGroup {
            lookup: &lookup,
            checks: vec![1, 2],
        };
        let (decisions, group) = limiter
            .check_folded(&checks, None, &folded)
            .await
            .expect("decide");
        let seen: Vec<u64> = decisions.iter().map(|d| d.count).collect();
        (fresh, group, seen)
    };
    let keys_of = async |group: &str| -> Vec<String> {
        let tag = format!("{}:{{{}}}:", prefix.as_str(), subject(group));
        let mut keys: Vec<String> = crate::support::keys_under(&store, &prefix)
            .await
            .into_iter()
            .filter(|k| k.starts_with(&tag))
            .collect();
        keys.sort();
        keys
    };

    // 60 of 64 values agree.
    let near = signature(|n| {
        if n.is_multiple_of(16) {
            8_000_000 + n as u32
        } else {
            text(n)
        }
    });
    let (fresh, group, seen) = call(near).await;
    assert_eq!(
        group, first,
        "the near-duplicate joins the first text's group"
    );
    assert_eq!(
        seen,
        vec![1, 2, 1],
        "the sender counted on its own key, the text on its group's"
    );
    assert!(
        keys_of(&fresh).await.is_empty(),
        "nothing under the stand-in"
    );
    let log_key = prefix.key(&subject(&first), "campaign-log", &log);
    let expected = {
        let mut k = vec![
            prefix
                .key(&subject(&first), "campaign-text", &counts)
                .as_str()
                .to_owned(),
            log_key.as_str().to_owned(),
            format!("{}:seq", log_key.as_str()),
        ];
        k.sort();
        k
    };
    assert_eq!(keys_of(&first).await, expected, "the group's three keys");

    let (fresh, group, seen) = call(signature(|n| 3_000_000 + n as u32 * 17)).await;
    assert_eq!(group, fresh, "a text of its own starts a group");
    assert_ne!(group, first);
    assert_eq!(seen, vec![2, 1, 1], "counted under its new group");
    assert_eq!(keys_of(&fresh).await.len(), 3);
}

/// A folded call that meets a server without the script (NOSCRIPT) is sent again as EVAL with
/// the same look-up: the near-duplicate joins the group it finds once, and every rule of the
/// call, the group's count among them, is counted once. A Redis server of the test's own, whose
/// script cache the test empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folded_call_sent_again_after_noscript_counts_once() {
    use sendguard::campaigns::groups::Groups;
    use sendguard::limiter::{
        Algorithm, Check, EdgeMode, FoldedGroup, Limiter, Quota, RedisSettings, RedisStore,
        group_id,
    };
    let redis = crate::support::redis_server::RedisServer::start().await;
    let store = RedisStore::connect(&RedisSettings::new(redis.url()))
        .await
        .expect("own redis");
    let limiter = Limiter::Redis(store.clone());
    let prefix = crate::support::unique_prefix("fold-noscript");
    let groups = Groups::new(&limiter, &prefix);
    assert!(groups.folds(), "a single server folds");
    let day = 86_400;
    let text = |n: usize| n as u32 * 11 + 2;
    let first = groups.group_of(&signature(text), day).await.expect("group");
    let counts = Quota::new(5, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let subject = |group: &str| format!("fingerprint:{group}");

    let () = crate::support::query(&store, redis::cmd("SCRIPT").arg("FLUSH")).await;
    let () = crate::support::query(&store, redis::cmd("CONFIG").arg("RESETSTAT")).await;
    let near = signature(|n| {
        if n.is_multiple_of(16) {
            9_000_000 + n as u32
        } else {
            text(n)
        }
    });
    // The sender's rule and the text's group's, in one folded call.
    let call = async || {
        let lookup = groups.fold(&near, day);
        let fresh = group_id(lookup.fresh);
        let keys = [
            prefix.key("sender:u_1", "sender-hourly", &counts),
            prefix.key(&subject(&fresh), "campaign-text", &counts),
        ];
        let checks = [
            Check::new(&keys[0], &counts, 1),
            Check::new(&keys[1], &counts, 1),
        ];
        let folded = FoldedGroup {
            lookup: &lookup,
            checks: vec![1],
        };
        let (decisions, group) = limiter
            .check_folded(&checks, None, &folded)
            .await
            .expect("decided");
        let seen: Vec<u64> = decisions.iter().map(|d| d.count).collect();
        (group, seen)
    };

    let (group, seen) = call().await;
    assert_eq!(
        group, first,
        "the near-duplicate joins the first text's group"
    );
    assert_eq!(seen, vec![1, 1], "each rule counted once");
    let stats: String = crate::support::query(&store, redis::cmd("INFO").arg("commandstats")).await;
    assert!(
        stats.contains("cmdstat_eval:calls=1,"),
        "sent again once, as EVAL: {stats}"
    );

    // The next call, by EVALSHA again, finds one count before its own on each key.
    let (group, seen) = call().await;
    assert_eq!(group, first);
    assert_eq!(seen, vec![2, 2], "one count before this one");
}

/// A check said to count the text's group whose key lacks the id standing in for it is refused
/// before anything is counted: its count would land on a key of no group, and the group's own
/// stay short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folded_check_whose_key_lacks_the_stand_in_is_refused() {
    use sendguard::limiter::{Algorithm, Check, EdgeMode, FoldedGroup, LimiterError, Quota};
    let Some(Folding {
        store,
        limiter,
        prefix,
        groups,
    }) = folding("fold-key").await
    else {
        return;
    };
    let counts = Quota::new(5, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
    let lookup = groups.fold(&signature(|n| n as u32 * 7 + 3), 86_400);
    // Named after the sender, not the group.
    let key = prefix.key("sender:u_1", "campaign-text", &counts);
    let checks = [Check::new(&key, &counts, 1)];
    let folded = FoldedGroup {
        lookup: &lookup,
        checks: vec![0],
    };
    let refused = limiter.check_folded(&checks, None, &folded).await;
    assert!(
        matches!(refused, Err(LimiterError::Fold(_))),
        "refused: {refused:?}"
    );
    assert!(
        crate::support::keys_under(&store, &prefix).await.is_empty(),
        "nothing counted, no group stored"
    );
}

/// On a single server an invite's text is grouped in the call that counts its rules: one
/// script call an invite, not one for the group and one for the rules. Near-duplicates sent
/// through the API are recorded under one group, the group the first of them started. A Redis
/// server of the test's own, so that no other test's calls are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invite_with_a_text_is_one_script_call_on_a_single_server() {
    let redis = crate::support::redis_server::RedisServer::start().await;
    let url = redis.url();
    let stage = Stage::start_prepared(
        "campaign_one_call",
        async |_| {},
        |cfg| {
            cfg.redis_url = url.clone();
        },
    )
    .await;
    let api = Api::new(stage.base(), api_key(&stage.pool).await);
    let store = sendguard::limiter::RedisStore::connect(&sendguard::limiter::RedisSettings::new(
        redis.url(),
    ))
    .await
    .expect("connect");
    // What the service's start ran is not counted.
    crate::support::query::<()>(&store, redis::cmd("CONFIG").arg("RESETSTAT")).await;
    let invites = 4;
    for s in 0..invites {
        assert_eq!(send_pitch(&api, s, 0).await, StatusCode::OK);
    }
    let calls: u64 = crate::limiter_redis::command_calls(&store)
        .await
        .iter()
        .filter(|(name, _)| name == "evalsha" || name == "eval")
        .map(|(_, calls)| calls)
        .sum();
    assert_eq!(calls, invites as u64, "script calls for {invites} invites");
    let groups: Vec<Vec<String>> = sqlx::query_scalar("SELECT DISTINCT campaign_keys FROM invites")
        .fetch_all(&stage.pool)
        .await
        .expect("keys");
    assert_eq!(groups.len(), 1, "one group for near-duplicates: {groups:?}");
    assert!(
        groups[0].len() == 1 && groups[0][0].starts_with("fingerprint:"),
        "{groups:?}"
    );
}
