//! What a proposed rule would have done: the last 24 hours of recorded invites (and outcomes)
//! replayed through it, and, for a rule on senders, a score against the reviewers' own past
//! decisions — of the senders whose bans were confirmed, how many it catches and how early; of
//! those whose bans were lifted, how many it would have caught wrongly — with the limit that
//! catches the most confirmed senders and no lifted one.

use std::collections::{HashMap, HashSet, VecDeque};

use sqlx::PgPool;

use super::contribution::{InviteFacts, VOUCHING_DOMAINS, Vouches, is_new, vouches};
use super::edit::ValidRule;
use super::{Scope, Signal, Subjects};
use crate::limiter::{Check, KeyPrefix, MemoryStore};
use crate::sender_key::SenderKey;
use crate::signals;

type Time = chrono::DateTime<chrono::Utc>;

/// Invites replayed at most, newest first: a bound on the page's cost.
const BACKTEST_MAX: i64 = 200_000;

/// The last 24 hours of invites that a backtest replays, newest first.
pub const BACKTEST_INVITES: &str =
    "SELECT id, app_id, sender_id, sender_ip, recipient, recipient_domain,
         resource, message, sender_name, created_at FROM invites
     WHERE created_at > now() - interval '24 hours'
     ORDER BY created_at DESC LIMIT $1";

/// The last 24 hours of outcomes, with the subjects of their invites, newest first.
pub const BACKTEST_OUTCOMES: &str = "SELECT o.type, o.at, i.app_id, i.sender_id, i.sender_ip,
         i.recipient,
         i.recipient_domain FROM outcomes o JOIN invites i ON i.id = o.invite_id
     WHERE o.at > now() - interval '24 hours'
     ORDER BY o.at DESC LIMIT $1";

/// The latest review decisions on senders, newest first.
pub const DECISIONS: &str = "SELECT app_id, sender_id, action FROM audit_log
     WHERE action IN ('confirm_ban', 'lift_and_release', 'lift_and_discard')
       AND sender_id IS NOT NULL AND at > now() - interval '90 days'
     ORDER BY at DESC LIMIT 5000";

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
    /// The score against past decisions (rules on senders only).
    pub score: Option<Score>,
}

/// How a rule's limit fares against the reviewers' decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    pub confirmed: usize,
    pub lifted: usize,
    /// The limit that catches the most confirmed senders while catching no lifted one.
    pub suggested: Option<u64>,
    /// Limits and what each catches, ascending.
    pub rows: Vec<ScoreRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreRow {
    pub limit: u64,
    pub confirmed_caught: usize,
    /// Of the confirmed senders caught, the median invite at which they were first over.
    pub median_invites_to_catch: Option<usize>,
    pub lifted_caught: usize,
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
}

impl Replayed {
    fn has_links(&self) -> bool {
        signals::any_link([
            self.resource.as_deref(),
            self.message.as_deref(),
            self.sender_name.as_deref(),
        ])
    }

    fn sender(&self) -> SenderKey {
        SenderKey::new(self.app_id, self.sender_id.as_str())
    }

    /// What the rules see of the invite, from a sender who is new or not.
    fn facts<'a>(&'a self, sender: &'a SenderKey, new_sender: bool) -> InviteFacts<'a> {
        InviteFacts {
            of: Subjects {
                sender,
                sender_ip: self.sender_ip.as_deref().and_then(|ip| ip.parse().ok()),
                recipient: &self.recipient,
                recipient_domain: &self.recipient_domain,
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
fn outcome_of(signal: Signal) -> Option<&'static str> {
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
    let counting = rule.counting();
    let members = signals::offline_members();

    let mut events: Vec<Event> = Vec::new();
    for r in &rows {
        let sender = r.sender();
        let facts = r.facts(&sender, newness.is_new(&sender, r.created_at));
        let Some(adds) = counting.of(&facts, members) else {
            continue;
        };
        events.push(Event {
            at: r.created_at,
            subject: adds.subject,
            cost: adds.cost,
            member: adds.member,
            invite: Some((r.id, sender.clone())),
        });
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

/// Replays the last 24 hours through `rule` (see [`replay`]), and scores a rule on senders
/// against past decisions.
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
    let score = if rule.scope == Scope::Sender {
        Some(score(pool, rule, new_sender_days).await?)
    } else {
        None
    };
    Ok(Backtest {
        invites: replay.invites,
        tripped: tripped.len(),
        over: over.len(),
        caught_count: caught.len(),
        caught: caught.into_iter().take(CAUGHT_SHOWN).collect(),
        truncated: replay.truncated,
        score,
    })
}

/// Senders as two arrays (apps, ids), for `unnest($1::bigint[], $2::text[])`.
fn arrays<'a>(senders: impl Iterator<Item = &'a SenderKey>) -> (Vec<i64>, Vec<&'a str>) {
    senders.map(|s| (s.app_id, s.id.as_str())).unzip()
}

/// What decides whether the replayed senders were new at each moment: when each started (as
/// the app said, else when first seen) and the acceptances that vouched for them.
struct Newness {
    since: HashMap<SenderKey, Time>,
    /// Each sender's acceptances that vouch for it, oldest first, with their recipients'
    /// domains.
    vouching: HashMap<SenderKey, Vec<(Time, String)>>,
    days: i64,
}

impl Newness {
    async fn load(
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
    fn is_new(&self, sender: &SenderKey, at: Time) -> bool {
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

/// The rule's count at each of a sender's invites, in order: what it would have been told.
/// `None` for an invite the rule would not act on (one adding nothing to a signal invites
/// carry, like an invite without links); outcomes count at every invite after them.
pub fn counts_at_invites(
    rule: &ValidRule,
    invites: &[Replayed],
    outcomes: &[Time],
) -> Vec<Option<u64>> {
    let window = chrono::Duration::milliseconds(rule.quota.window_ms as i64);
    // Every counted event (time, member): invites by the rule's signal, or outcomes.
    let mut timeline: Vec<(Time, Option<u32>, bool, bool)> = Vec::new();
    let outcome = rule.signal.is_outcome();
    let counting = rule.counting();
    let members = signals::offline_members();
    for r in invites {
        let sender = r.sender();
        // The caller has kept only the invites the rule applies to.
        let facts = r.facts(&sender, true);
        let (cost, member) = counting
            .of(&facts, members)
            .map_or((0, None), |adds| (adds.cost, adds.member));
        // An invite is always on the timeline, counted when it costs; the rule acts on it when
        // it costs, or when the rule counts outcomes.
        let counted = member.or(Some(0)).filter(|_| cost > 0);
        timeline.push((r.created_at, counted, true, cost > 0 || outcome));
    }
    for at in outcomes {
        timeline.push((*at, Some(0), false, false));
    }
    timeline.sort_by_key(|e| (e.0, !e.2));
    let distinct = rule.signal.is_distinct();
    let mut live: VecDeque<(Time, u32)> = VecDeque::new();
    let mut members: HashMap<u32, usize> = HashMap::new();
    let mut counts = Vec::with_capacity(invites.len());
    for (at, counted, is_invite, acts) in timeline {
        while let Some(&(t, m)) = live.front() {
            if t + window > at {
                break;
            }
            live.pop_front();
            if let Some(n) = members.get_mut(&m) {
                *n -= 1;
                if *n == 0 {
                    members.remove(&m);
                }
            }
        }
        if let Some(member) = counted {
            live.push_back((at, member));
            *members.entry(member).or_default() += 1;
        }
        if is_invite {
            let count = if distinct {
                members.len() as u64
            } else {
                live.len() as u64
            };
            counts.push(acts.then_some(count));
        }
    }
    counts
}

/// Scores `rule` against the latest review decision on each sender: each reviewed sender's
/// invites of the 30 days before now replayed exactly (a sliding log of the rule's window).
async fn score(
    pool: &PgPool,
    rule: &ValidRule,
    new_sender_days: i64,
) -> Result<Score, sqlx::Error> {
    let decisions: Vec<(i64, String, String)> = sqlx::query_as(DECISIONS).fetch_all(pool).await?;
    let mut latest: HashMap<SenderKey, bool> = HashMap::new();
    for (app, sender, action) in decisions {
        latest
            .entry(SenderKey::new(app, sender))
            .or_insert(action == "confirm_ban");
    }
    let (apps, ids) = arrays(latest.keys());
    let invites: Vec<Replayed> = sqlx::query_as(
        "SELECT i.id, i.app_id, i.sender_id, i.sender_ip, i.recipient, i.recipient_domain, i.resource,
             i.message, i.sender_name, i.created_at
         FROM unnest($1::bigint[], $2::text[]) AS w (app_id, id)
         JOIN invites i ON i.app_id = w.app_id AND i.sender_id = w.id
         WHERE i.created_at > now() - interval '30 days'
         ORDER BY i.created_at LIMIT 200000",
    )
    .bind(&apps)
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    let outcomes: Vec<(i64, String, Time)> = match outcome_of(rule.signal) {
        Some(kind) => {
            sqlx::query_as(
                "SELECT o.app_id, o.sender_id, o.at
                 FROM unnest($1::bigint[], $2::text[]) AS w (app_id, id)
                 JOIN outcomes o ON o.app_id = w.app_id AND o.sender_id = w.id
                 WHERE o.type = $3 AND o.at > now() - interval '30 days'",
            )
            .bind(&apps)
            .bind(&ids)
            .bind(kind)
            .fetch_all(pool)
            .await?
        }
        None => Vec::new(),
    };
    let newness = Newness::load(pool, latest.keys().cloned(), new_sender_days).await?;
    let mut by_sender: HashMap<SenderKey, Vec<Replayed>> = HashMap::new();
    for r in invites {
        let sender = r.sender();
        if rule.new_senders_only && !newness.is_new(&sender, r.created_at) {
            continue;
        }
        by_sender.entry(sender).or_default().push(r);
    }
    // Per reviewed sender: confirmed or not, and its count at each of its invites.
    let series: Vec<(bool, Vec<Option<u64>>)> = latest
        .iter()
        .map(|(sender, &confirmed)| {
            let theirs = by_sender.get(sender).map_or(&[][..], Vec::as_slice);
            let times: Vec<Time> = outcomes
                .iter()
                .filter(|(app, id, _)| *app == sender.app_id && *id == sender.id)
                .map(|(_, _, at)| *at)
                .collect();
            (confirmed, counts_at_invites(rule, theirs, &times))
        })
        .collect();
    Ok(score_series(&series, rule.quota.limit))
}

/// The score of each limit, given each reviewed sender's counts at its invites.
pub fn score_series(series: &[(bool, Vec<Option<u64>>)], proposed: u64) -> Score {
    let peak = |counts: &Vec<Option<u64>>| counts.iter().flatten().copied().max().unwrap_or(0);
    let confirmed: Vec<&Vec<Option<u64>>> = series.iter().filter(|s| s.0).map(|s| &s.1).collect();
    let lifted: Vec<&Vec<Option<u64>>> = series.iter().filter(|s| !s.0).map(|s| &s.1).collect();
    // A limit catches a sender whose count ever goes above it.
    let suggested = match (confirmed.is_empty(), lifted.iter().map(|c| peak(c)).max()) {
        (true, _) => None,
        (false, Some(highest_lifted)) => Some(highest_lifted),
        (false, None) => confirmed
            .iter()
            .map(|c| peak(c))
            .min()
            .map(|p| p.saturating_sub(1)),
    };
    // Each sender's peak less one is where a limit starts to catch it: the rows of the trade-off.
    let mut limits: Vec<u64> = series
        .iter()
        .map(|s| peak(&s.1).saturating_sub(1))
        .collect();
    limits.extend(suggested);
    limits.push(proposed);
    limits.sort_unstable();
    limits.dedup();
    let rows = limits
        .into_iter()
        .map(|limit| {
            let mut first_over: Vec<usize> = confirmed
                .iter()
                .filter_map(|c| {
                    c.iter()
                        .position(|n| n.is_some_and(|n| n > limit))
                        .map(|k| k + 1)
                })
                .collect();
            first_over.sort_unstable();
            ScoreRow {
                limit,
                confirmed_caught: first_over.len(),
                median_invites_to_catch: first_over
                    .get(first_over.len().saturating_sub(1) / 2)
                    .copied(),
                lifted_caught: lifted.iter().filter(|c| peak(c) > limit).count(),
            }
        })
        .collect();
    Score {
        confirmed: confirmed.len(),
        lifted: lifted.len(),
        suggested,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_limit_catches_every_confirmed_sender_above_the_lifted_ones() {
        let some = |v: &[u64]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
        let series = vec![
            (true, some(&[1, 2, 3, 4, 5, 6, 7, 8])),
            (true, some(&[1, 2, 3, 4, 5])),
            (true, some(&[1, 1, 2])),
            (false, some(&[1, 2, 3])),
            (false, some(&[1, 2])),
        ];
        let score = score_series(&series, 6);
        assert_eq!((score.confirmed, score.lifted), (3, 2));
        assert_eq!(score.suggested, Some(3), "above the busiest lifted sender");
        let at = |limit| score.rows.iter().find(|r| r.limit == limit).expect("row");
        assert_eq!(at(3).confirmed_caught, 2);
        assert_eq!(at(3).lifted_caught, 0);
        assert_eq!(at(3).median_invites_to_catch, Some(4));
        assert_eq!(
            at(1).lifted_caught,
            2,
            "a tighter limit catches the lifted ones too"
        );
        assert_eq!(at(6).confirmed_caught, 1, "the proposed limit has its row");
    }

    #[test]
    fn without_lifted_senders_every_confirmed_one_is_caught() {
        let score = score_series(
            &[
                (true, vec![Some(1), None, Some(3)]),
                (true, vec![Some(1), Some(2), Some(3), Some(4)]),
            ],
            10,
        );
        assert_eq!(score.suggested, Some(2));
        let at = |limit| score.rows.iter().find(|r| r.limit == limit).expect("row");
        assert_eq!(
            at(2).median_invites_to_catch,
            Some(3),
            "the invite it would act on"
        );
        assert!(
            score_series(&[(false, vec![Some(1)])], 10)
                .suggested
                .is_none()
        );
    }
}
