//! The threshold advisor: a rule on senders scored against the reviewers' own past decisions.
//! Of the senders whose bans were confirmed, how many it catches and how early; of those whose
//! bans were lifted, how many it would have caught wrongly; and the limit that catches the most
//! confirmed senders and no lifted one. Each reviewed sender's invites are replayed exactly (a
//! sliding log of the rule's window), counted as the live check counts them (`contribution`).

use std::collections::{HashMap, VecDeque};

use sqlx::PgPool;

use super::Scope;
use super::backtest::{Newness, Replayed, arrays, outcome_of};
use super::edit::ValidRule;
use crate::sender_key::SenderKey;
use crate::signals;

type Time = chrono::DateTime<chrono::Utc>;

/// The latest review decisions on senders, newest first.
pub const DECISIONS: &str = "SELECT app_id, sender_id, action FROM audit_log
     WHERE action IN ('confirm_ban', 'lift_and_release', 'lift_and_discard')
       AND sender_id IS NOT NULL AND at > now() - interval '90 days'
     ORDER BY at DESC LIMIT 5000";

/// How a rule's limit fares against the reviewers' decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Score {
    pub confirmed: usize,
    pub lifted: usize,
    /// The limit that catches the most confirmed senders while catching no lifted one.
    pub suggested: Option<u64>,
    /// Limits and what each catches, ascending.
    pub rows: Vec<ScoreRow>,
    /// The reviewed senders the proposed limit catches, each with whether its ban was
    /// confirmed (a lifted one caught is a mistake the rule would make).
    pub caught: Vec<(SenderKey, bool)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreRow {
    pub limit: u64,
    pub confirmed_caught: usize,
    /// Of the confirmed senders caught, the median invite at which they were first over.
    pub median_invites_to_catch: Option<usize>,
    pub lifted_caught: usize,
}

/// The rule's count at each of a sender's invites, in order: what it would have been told.
/// `None` for an invite the rule would not act on (one adding nothing to a signal invites
/// carry, like an invite without links); outcomes count at every invite after them.
fn counts_at_invites(
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
            .first()
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

/// Scores a rule on senders (`None` for another scope) against the latest review decision on
/// each sender: each reviewed sender's invites of the 30 days before now replayed exactly (a
/// sliding log of the rule's window).
pub async fn score(
    pool: &PgPool,
    rule: &ValidRule,
    new_sender_days: i64,
) -> Result<Option<Score>, sqlx::Error> {
    if rule.scope != Scope::Sender {
        return Ok(None);
    }
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
             i.message, i.sender_name, i.created_at, i.campaign_keys
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
    let reviewed: Vec<(&SenderKey, bool, Vec<Option<u64>>)> = latest
        .iter()
        .map(|(sender, &confirmed)| {
            let theirs = by_sender.get(sender).map_or(&[][..], Vec::as_slice);
            let times: Vec<Time> = outcomes
                .iter()
                .filter(|(app, id, _)| *app == sender.app_id && *id == sender.id)
                .map(|(_, _, at)| *at)
                .collect();
            (sender, confirmed, counts_at_invites(rule, theirs, &times))
        })
        .collect();
    let series: Vec<(bool, Vec<Option<u64>>)> = reviewed
        .iter()
        .map(|(_, confirmed, counts)| (*confirmed, counts.clone()))
        .collect();
    let mut score = score_series(&series, rule.quota.limit);
    // The reviewed senders the rule as proposed would catch, confirmed ones first.
    let mut caught: Vec<(SenderKey, bool)> = reviewed
        .into_iter()
        .filter(|(_, _, counts)| counts.iter().flatten().any(|&n| n > rule.quota.limit))
        .map(|(sender, confirmed, _)| (sender.clone(), confirmed))
        .collect();
    caught.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
    score.caught = caught;
    Ok(Some(score))
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
        // Named by the caller, which knows who each series is.
        caught: Vec::new(),
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
