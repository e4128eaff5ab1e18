//! What a proposed rule would have done: the last 24 hours of recorded invites (and outcomes)
//! replayed through it with their own timestamps, as the live check would have counted them
//! (`contribution`), and, for a rule on senders, the threshold advisor's score ([`advisor`]).

use std::collections::{HashMap, HashSet};

use sqlx::PgPool;

use super::contribution::{InviteFacts, VOUCHING_DOMAINS, Vouches, is_new, vouches};
use super::edit::ValidRule;
use super::{Scope, Signal, Subjects};
use crate::campaigns::fingerprint::{self, Index};
use crate::campaigns::link_domains;
use crate::limiter::{Check, KeyPrefix, MemoryStore};
use crate::sender_key::SenderKey;
use crate::signals;

type Time = chrono::DateTime<chrono::Utc>;

/// Invites replayed at most, newest first: a bound on the page's cost.
const BACKTEST_MAX: i64 = 200_000;

/// The last 24 hours of invites that a backtest replays, newest first.
pub const BACKTEST_INVITES: &str =
    "SELECT id, app_id, sender_id, sender_ip, recipient, recipient_domain,
         resource, message, sender_name, created_at, campaign_keys FROM invites
     WHERE created_at > now() - interval '24 hours'
     ORDER BY created_at DESC LIMIT $1";

/// The last 24 hours of outcomes, with the subjects of their invites, newest first.
pub const BACKTEST_OUTCOMES: &str = "SELECT o.type, o.at, i.app_id, i.sender_id, i.sender_ip,
         i.recipient,
         i.recipient_domain FROM outcomes o JOIN invites i ON i.id = o.invite_id
     WHERE o.at > now() - interval '24 hours'
     ORDER BY o.at DESC LIMIT $1";

/// The result of a backtest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backtest {
    pub invites: usize,
    /// Subjects (senders, addresses, …) that would have gone over the limit at least once.
    pub tripped: usize,
    /// Invites that would have been over the limit.
    pub over: usize,
    /// The senders of those invites, in the order each was first over (at most
    /// [`CAUGHT_SHOWN`]), so that a reviewer can open them.
    pub caught: Vec<SenderKey>,
    /// Senders caught in all.
    pub caught_count: usize,
    pub truncated: bool,
}

/// A recorded invite as a backtest replays it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Replayed {
    pub id: uuid::Uuid,
    pub app_id: i64,
    pub sender_id: String,
    pub sender_ip: Option<String>,
    pub recipient: String,
    pub recipient_domain: String,
    pub resource: Option<String>,
    pub message: Option<String>,
    pub sender_name: Option<String>,
    pub created_at: Time,
    /// The campaign subjects it counted under live; `None` when no campaign rule was enabled
    /// then (a backtest works them out, [`offline_campaign_keys`]).
    pub campaign_keys: Option<Vec<String>>,
}

impl Replayed {
    fn has_links(&self) -> bool {
        signals::any_link([
            self.resource.as_deref(),
            self.message.as_deref(),
            self.sender_name.as_deref(),
        ])
    }

    pub(super) fn sender(&self) -> SenderKey {
        SenderKey::new(self.app_id, self.sender_id.as_str())
    }

    /// What the rules see of the invite, from a sender who is new or not.
    pub(super) fn facts<'a>(&'a self, sender: &'a SenderKey, new_sender: bool) -> InviteFacts<'a> {
        InviteFacts {
            of: Subjects {
                sender,
                sender_ip: self.sender_ip.as_deref().and_then(|ip| ip.parse().ok()),
                recipient: &self.recipient,
                recipient_domain: &self.recipient_domain,
                campaign: self.campaign_keys.as_deref().unwrap_or(&[]),
            },
            has_links: self.has_links(),
            new_sender,
        }
    }
}

#[derive(sqlx::FromRow)]
struct RecordedOutcome {
    r#type: String,
    at: Time,
    app_id: i64,
    sender_id: String,
    sender_ip: Option<String>,
    recipient: String,
    recipient_domain: String,
}

/// The outcome type a signal counts.
pub(super) fn outcome_of(signal: Signal) -> Option<&'static str> {
    match signal {
        Signal::Bounces => Some("bounce"),
        Signal::Complaints => Some("complaint"),
        _ => None,
    }
}

/// Senders a backtest names at most.
pub const CAUGHT_SHOWN: usize = 50;

/// What a rule would have told one recorded invite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub invite: uuid::Uuid,
    /// Its sender.
    pub sender: SenderKey,
    pub subject: String,
    /// The rule's count after the invite.
    pub count: u64,
    /// The rule would have acted on the invite.
    pub exceeded: bool,
}

/// The last 24 hours replayed through one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// One per invite the rule applies to, in time order.
    pub verdicts: Vec<Verdict>,
    /// Invites replayed.
    pub invites: usize,
    pub truncated: bool,
}

/// One event a rule counts, in time order: an invite, or an outcome for an outcome signal.
struct Event {
    at: Time,
    subject: String,
    cost: u64,
    member: Option<u32>,
    /// The invite and its sender, when the event is one (outcomes only add to the count).
    invite: Option<(uuid::Uuid, SenderKey)>,
}

/// Campaign subjects for the invites recorded while no campaign rule was enabled, worked out
/// as the live check would (in time order, `rows` oldest first): near-duplicate texts grouped
/// in process, and linked domains (an app's own link hosts are not known here and count).
/// Standard texts and benign marks are left out of the groups as live.
fn offline_campaign_keys(rows: &mut [Replayed]) {
    let mut groups: Index<String> = Index::new();
    for (n, r) in rows.iter_mut().enumerate() {
        if r.campaign_keys.is_some() {
            continue;
        }
        let mut keys = Vec::new();
        if let Some(f) = fingerprint::of_invite(r.message.as_deref(), r.sender_name.as_deref()) {
            let group = match groups.find(&f.signature) {
                Some(g) => g.clone(),
                None => {
                    let g = format!("replayed-{n}");
                    groups.insert(f.signature, g.clone());
                    g
                }
            };
            keys.push(Scope::Fingerprint.subject_of(&group));
        }
        let texts = [
            r.message.as_deref(),
            r.sender_name.as_deref(),
            r.resource.as_deref(),
        ];
        keys.extend(
            link_domains::link_domains(texts, &[])
                .iter()
                .map(|d| Scope::LinkDomain.subject_of(d)),
        );
        r.campaign_keys = Some(keys);
    }
}

/// Replays the last 24 hours through `rule` in the in-process limiter, with their own
/// timestamps: what the rule would have told each invite.
pub async fn replay(
    pool: &PgPool,
    rule: &ValidRule,
    new_sender_days: i64,
) -> Result<Replay, sqlx::Error> {
    let mut rows: Vec<Replayed> = sqlx::query_as(BACKTEST_INVITES)
        .bind(BACKTEST_MAX + 1)
        .fetch_all(pool)
        .await?;
    let truncated = rows.len() as i64 > BACKTEST_MAX;
    rows.truncate(BACKTEST_MAX as usize);
    rows.reverse();
    let newness = Newness::load(pool, rows.iter().map(Replayed::sender), new_sender_days).await?;
    if rule.scope.is_campaign() {
        offline_campaign_keys(&mut rows);
    }
    let counting = rule.counting();
    let members = signals::offline_members();

    let mut events: Vec<Event> = Vec::new();
    for r in &rows {
        let sender = r.sender();
        let facts = r.facts(&sender, newness.is_new(&sender, r.created_at));
        for adds in counting.of(&facts, members) {
            events.push(Event {
                at: r.created_at,
                subject: adds.subject,
                cost: adds.cost,
                member: adds.member,
                invite: Some((r.id, sender.clone())),
            });
        }
    }
    if let Some(kind) = outcome_of(rule.signal) {
        let outcomes: Vec<RecordedOutcome> = sqlx::query_as(BACKTEST_OUTCOMES)
            .bind(BACKTEST_MAX)
            .fetch_all(pool)
            .await?;
        for o in outcomes.iter().filter(|o| o.r#type == kind) {
            let sender = SenderKey::new(o.app_id, o.sender_id.as_str());
            let of = Subjects {
                sender: &sender,
                sender_ip: o.sender_ip.as_deref().and_then(|ip| ip.parse().ok()),
                recipient: &o.recipient,
                recipient_domain: &o.recipient_domain,
                campaign: &[],
            };
            if let Some(subject) = rule.scope.subject(&of) {
                events.push(Event {
                    at: o.at,
                    subject,
                    cost: 1,
                    member: None,
                    invite: None,
                });
            }
        }
    }
    events.sort_by_key(|e| e.at);

    let store = MemoryStore::new();
    let keys = KeyPrefix::default();
    let mut verdicts = Vec::new();
    for event in events {
        let key = keys.key(&event.subject, &rule.name, &rule.quota);
        let check = Check {
            member: event.member,
            ..Check::new(&key, &rule.quota, event.cost)
        };
        let at_ms = event.at.timestamp_millis().max(0) as u64;
        let Some(decision) = store.check_batch(&[check], Some(at_ms)).pop() else {
            continue;
        };
        if let Some((invite, sender)) = event.invite {
            // A rule acts on the invites that add to its count; the others only read it.
            verdicts.push(Verdict {
                invite,
                sender,
                subject: event.subject,
                count: decision.count,
                exceeded: event.cost > 0 && !decision.allowed,
            });
        }
    }
    Ok(Replay {
        verdicts,
        invites: rows.len(),
        truncated,
    })
}

/// Replays the last 24 hours through `rule` (see [`replay`]) and sums it up; the threshold
/// advisor (`advisor::score`) scores a rule on senders against past decisions.
pub async fn backtest(
    pool: &PgPool,
    rule: &ValidRule,
    new_sender_days: i64,
) -> Result<Backtest, sqlx::Error> {
    let replay = replay(pool, rule, new_sender_days).await?;
    let over: Vec<&Verdict> = replay.verdicts.iter().filter(|v| v.exceeded).collect();
    let tripped: HashSet<&str> = over.iter().map(|v| v.subject.as_str()).collect();
    let mut seen = HashSet::new();
    let caught: Vec<SenderKey> = over
        .iter()
        .filter(|v| seen.insert(&v.sender))
        .map(|v| v.sender.clone())
        .collect();
    Ok(Backtest {
        invites: replay.invites,
        tripped: tripped.len(),
        over: over.len(),
        caught_count: caught.len(),
        caught: caught.into_iter().take(CAUGHT_SHOWN).collect(),
        truncated: replay.truncated,
    })
}

/// Senders as two arrays (apps, ids), for `unnest($1::bigint[], $2::text[])`.
pub(super) fn arrays<'a>(senders: impl Iterator<Item = &'a SenderKey>) -> (Vec<i64>, Vec<&'a str>) {
    senders.map(|s| (s.app_id, s.id.as_str())).unzip()
}

/// What decides whether the replayed senders were new at each moment: when each started (as
/// the app said, else when first seen) and the acceptances that vouched for them.
pub(super) struct Newness {
    since: HashMap<SenderKey, Time>,
    /// Each sender's acceptances that vouch for it, oldest first, with their recipients'
    /// domains.
    vouching: HashMap<SenderKey, Vec<(Time, String)>>,
    days: i64,
}

impl Newness {
    pub(super) async fn load(
        pool: &PgPool,
        senders: impl Iterator<Item = SenderKey>,
        days: i64,
    ) -> Result<Newness, sqlx::Error> {
        let unique: HashSet<SenderKey> = senders.collect();
        let (apps, ids) = arrays(unique.iter());
        let rows: Vec<(i64, String, Time)> = sqlx::query_as(
            "SELECT s.app_id, s.id, COALESCE(s.created_in_app_at, s.first_seen_at) FROM senders s
             JOIN unnest($1::bigint[], $2::text[]) AS w (app_id, id)
                 ON s.app_id = w.app_id AND s.id = w.id",
        )
        .bind(&apps)
        .bind(&ids)
        .fetch_all(pool)
        .await?;
        let since = rows
            .into_iter()
            .map(|(app, id, since)| (SenderKey::new(app, id), since))
            .collect();
        type Acceptance = (i64, String, Time, Option<Time>, String);
        let rows: Vec<Acceptance> = sqlx::query_as(
            "SELECT o.app_id, o.sender_id, o.at, i.sent_at, i.recipient_domain
             FROM unnest($1::bigint[], $2::text[]) AS w (app_id, id)
             JOIN outcomes o ON o.app_id = w.app_id AND o.sender_id = w.id
             JOIN invites i ON i.id = o.invite_id
             WHERE o.type = 'accepted' ORDER BY o.at",
        )
        .bind(&apps)
        .bind(&ids)
        .fetch_all(pool)
        .await?;
        let mut vouching: HashMap<SenderKey, Vec<(Time, String)>> = HashMap::new();
        for (app, id, at, sent, domain) in rows {
            if vouches(sent, at) {
                let sender = SenderKey::new(app, id);
                vouching.entry(sender).or_default().push((at, domain));
            }
        }
        Ok(Newness {
            since,
            vouching,
            days,
        })
    }

    /// Whether `sender` counted as new at `at`, as the live decision saw it then.
    pub(super) fn is_new(&self, sender: &SenderKey, at: Time) -> bool {
        let before = self
            .vouching
            .get(sender)
            .map_or(&[][..], |all| &all[..all.partition_point(|(t, _)| *t < at)]);
        let domains: HashSet<&str> = before.iter().map(|(_, d)| d.as_str()).collect();
        let vouched = Vouches {
            count: before.len() as i64,
            domains: domains.len().min(VOUCHING_DOMAINS),
        };
        is_new(self.since.get(sender).copied(), vouched, self.days, at)
    }
}
