//! The decision policy (docs/DESIGN.md §3a): what the checked rules make of one invite. Pure: no
//! I/O, so every verdict is tested below.

use std::sync::Arc;

use super::decision::{DecisionRecord, RuleOutcome};
use crate::config::RedisPolicy;
use crate::limiter::Decision;
use crate::moderation::SenderState;
use crate::rules::{Action, Rule, Signal};

/// The status an invite is recorded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Queued,
    Held,
    Suppressed,
    /// Redis could not be asked; checked later with the invite's own timestamp.
    Deferred,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Held => "held",
            Status::Suppressed => "suppressed",
            Status::Deferred => "deferred",
        }
    }
}

/// A rule checked for one invite, with the limiter's answer.
#[derive(Debug, Clone)]
pub struct Checked {
    pub rule: Arc<Rule>,
    /// The subject the rule counted the invite under.
    pub subject: String,
    pub decision: Decision,
}

/// The answer to a `reject` breach: what the 429 tells the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub rule: String,
    pub limit: u64,
    pub remaining: u64,
    pub window_secs: u64,
    pub retry_after_secs: u64,
    pub reset_secs: u64,
}

/// Why an invite is held for review and its sender flagged: a `shadow_ban` or `hold` rule it
/// broke, or links from a sender linked to a banned one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    pub rule_id: Option<i64>,
    pub rule_name: String,
    pub signal: Signal,
    pub action: Action,
    pub observed: u64,
    pub limit: u64,
    pub window_secs: u64,
    /// The campaign subject a rule of a campaign scope counted (`fingerprint:…`,
    /// `link_domain:…`): its follow-up records the campaign and sweeps its queued invites.
    pub campaign: Option<String>,
}

/// The name a flag carries for links from a sender linked to a banned one.
pub const LINKED_SENDER: &str = "linked-to-banned-sender";

impl Breach {
    fn of(c: &Checked) -> Breach {
        Breach {
            rule_id: Some(c.rule.id),
            rule_name: c.rule.name.clone(),
            signal: c.rule.signal,
            action: c.rule.action,
            observed: c.decision.count,
            limit: c.rule.quota.limit,
            window_secs: c.rule.quota.window_ms / 1000,
            campaign: c.rule.scope.is_campaign().then(|| c.subject.clone()),
        }
    }

    fn linked() -> Breach {
        Breach {
            rule_id: None,
            rule_name: LINKED_SENDER.into(),
            signal: Signal::Links,
            action: Action::Hold,
            observed: 1,
            limit: 0,
            window_secs: 30 * 86_400,
            campaign: None,
        }
    }
}

/// What the rules say about one invite.
#[derive(Debug, Clone)]
pub struct Decided {
    pub status: Status,
    /// The decision record kept with the invite.
    pub decision: DecisionRecord,
    /// Why the sender is flagged, when it is.
    pub breach: Option<Breach>,
    pub rejection: Option<Rejection>,
}

/// A trusted sender's invite: no rule is checked.
pub fn trusted() -> Decided {
    Decided {
        status: Status::Queued,
        decision: DecisionRecord::reason("trusted"),
        breach: None,
        rejection: None,
    }
}

/// The verdict of the checked rules on an invite from a sender in `state` (not trusted);
/// `linked_to` names the banned sender this one is linked to when the invite carries links.
/// Held senders go through the same checks as everyone: their answers must not come sooner
/// (that would tell them they are banned), and their attempts keep counting.
pub fn verdict(checked: &[Checked], state: SenderState, linked_to: Option<&str>) -> Decided {
    let linked_hold = linked_to.map(|_| Action::Hold);
    let strongest = checked
        .iter()
        .filter(|c| !c.decision.allowed)
        .map(|c| c.rule.action)
        .chain(linked_hold)
        .max();
    let mut decision = decision_record(checked, strongest);
    decision.linked_to = linked_to.map(str::to_owned);
    if strongest == Some(Action::Reject)
        && let Some(r) = rejection(checked)
    {
        return Decided {
            status: Status::Suppressed,
            decision,
            breach: None,
            rejection: Some(r),
        };
    }
    if state.holds_invites() {
        decision.reason = match state {
            SenderState::Banned => "sender_banned",
            _ => "sender_shadow_banned",
        };
        return Decided {
            status: Status::Held,
            decision,
            breach: None,
            rejection: None,
        };
    }
    let broken = |action| {
        checked
            .iter()
            .find(|c| !c.decision.allowed && c.rule.action == action)
            .map(Breach::of)
    };
    let (status, breach) = match strongest {
        Some(Action::ShadowBan) => (Status::Held, broken(Action::ShadowBan)),
        Some(Action::Hold) => (
            Status::Held,
            broken(Action::Hold).or_else(|| linked_to.map(|_| Breach::linked())),
        ),
        Some(Action::Suppress) => (Status::Suppressed, None),
        _ => (Status::Queued, None),
    };
    Decided {
        status,
        decision,
        breach,
        rejection: None,
    }
}

/// The record of the checked rules, with the strongest breached action.
fn decision_record(checked: &[Checked], action: Option<Action>) -> DecisionRecord {
    let rules = checked
        .iter()
        .map(|c| RuleOutcome {
            rule: c.rule.name.clone(),
            count: c.decision.count,
            limit: c.rule.quota.limit,
            window_secs: c.rule.quota.window_ms / 1000,
            outcome: if c.decision.allowed { "ok" } else { "exceeded" },
        })
        .collect();
    DecisionRecord {
        action: Some(action.map(Action::as_str)),
        rules: Some(rules),
        ..DecisionRecord::reason("rules")
    }
}

/// The exceeded `reject` rule that frees up last, as the caller's answer.
pub fn rejection(checked: &[Checked]) -> Option<Rejection> {
    checked
        .iter()
        .filter(|c| !c.decision.allowed && c.rule.action == Action::Reject)
        .max_by_key(|c| c.decision.retry_after_ms)
        .map(|c| Rejection {
            rule: c.rule.name.clone(),
            limit: c.rule.quota.limit,
            remaining: c.decision.remaining,
            window_secs: c.rule.quota.window_ms / 1000,
            retry_after_secs: c.decision.retry_after_ms.div_ceil(1000).max(1),
            reset_secs: c.decision.reset_after_ms.div_ceil(1000),
        })
}

/// The reason a deferred invite is recorded with, until it is checked: the deferred invites
/// are found by it (the index `invites_deferred`), since an index on their status would keep a
/// delivery's update of `invites` from staying on its page.
pub const DEFERRED_REASON: &str = "redis_unavailable_deferred";

/// What an invite from a sender in `state` becomes while Redis cannot be asked; `None` when
/// the policy refuses it. Sent unchecked skips the rules, not what needs no counting: a banned
/// sender's invites, and those linked to a banned sender, are held as with Redis (a deferred
/// invite meets the same verdict when it is checked).
pub fn without_redis(
    policy: RedisPolicy,
    state: SenderState,
    linked_to: Option<&str>,
) -> Option<Decided> {
    match policy {
        RedisPolicy::Closed => None,
        RedisPolicy::Defer => Some(Decided {
            status: Status::Deferred,
            decision: DecisionRecord::reason(DEFERRED_REASON),
            breach: None,
            rejection: None,
        }),
        RedisPolicy::Open => {
            let mut decided = verdict(&[], state, linked_to);
            if decided.status == Status::Queued {
                decided.decision = DecisionRecord::reason("redis_unavailable_sent_unchecked");
            }
            // No rule was checked, which the record must not show as an empty list.
            decided.decision.rules = None;
            Some(decided)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::limiter::{Algorithm, EdgeMode, Quota};
    use crate::rules::Scope;

    fn rule(name: &str, action: Action, limit: u64) -> Rule {
        let algorithm = Algorithm::HashCounters(EdgeMode::Harsh);
        Rule {
            id: 1,
            name: name.into(),
            scope: Scope::Sender,
            signal: Signal::Invites,
            algorithm,
            quota: Quota::new(limit, 3600, algorithm),
            action,
            new_senders_only: false,
            enabled: true,
            version: 1,
        }
    }

    /// A rule checked with `count` attempts in its window.
    fn checked(name: &str, action: Action, limit: u64, count: u64) -> Checked {
        let allowed = count <= limit;
        Checked {
            rule: Arc::new(rule(name, action, limit)),
            subject: "sender:1:u_1".into(),
            decision: Decision {
                allowed,
                count,
                limit,
                remaining: limit.saturating_sub(count),
                retry_after_ms: if allowed { 0 } else { 1500 * count },
                reset_after_ms: 3_600_000,
            },
        }
    }

    /// The record as it is stored.
    fn json_of(record: &DecisionRecord) -> Value {
        serde_json::to_value(record).expect("a record serializes")
    }

    #[test]
    fn an_invite_within_every_limit_is_queued() {
        let d = verdict(
            &[checked("a", Action::ShadowBan, 5, 5)],
            SenderState::Active,
            None,
        );
        assert_eq!(d.status, Status::Queued);
        assert!(d.breach.is_none() && d.rejection.is_none());
        assert_eq!(json_of(&d.decision)["reason"], "rules");
        assert_eq!(json_of(&d.decision)["action"], Value::Null);
    }

    #[test]
    fn a_shadow_ban_breach_holds_the_invite_and_names_the_rule() {
        let d = verdict(
            &[
                checked("quiet", Action::Monitor, 1, 9),
                checked("loud", Action::ShadowBan, 5, 6),
            ],
            SenderState::Active,
            None,
        );
        assert_eq!(d.status, Status::Held);
        assert_eq!(d.breach.expect("breach").rule_name, "loud");
        assert_eq!(json_of(&d.decision)["action"], "shadow_ban");
    }

    #[test]
    fn the_strongest_breached_action_wins() {
        let suppress = checked("s", Action::Suppress, 1, 2);
        let monitor = checked("m", Action::Monitor, 1, 2);
        let d = verdict(
            &[monitor.clone(), suppress.clone()],
            SenderState::Active,
            None,
        );
        assert_eq!(d.status, Status::Suppressed);
        assert!(d.breach.is_none());
        let d = verdict(&[monitor], SenderState::Active, None);
        assert_eq!(d.status, Status::Queued);
        assert_eq!(json_of(&d.decision)["action"], "monitor");
        let reject = checked("r", Action::Reject, 1, 2);
        let d = verdict(&[suppress, reject], SenderState::Active, None);
        assert!(d.rejection.is_some(), "reject outranks suppress");
    }

    #[test]
    fn a_reject_breach_answers_with_the_rule_that_frees_up_last() {
        let d = verdict(
            &[
                checked("early", Action::Reject, 2, 3),
                checked("late", Action::Reject, 2, 9),
            ],
            SenderState::Active,
            None,
        );
        let r = d.rejection.expect("rejected");
        assert_eq!(r.rule, "late");
        assert_eq!((r.limit, r.remaining, r.window_secs), (2, 0, 3600));
        assert_eq!(r.retry_after_secs, 14, "13.5 s rounded up");
        assert_eq!(r.reset_secs, 3600);
    }

    #[test]
    fn a_reject_breach_outranks_a_held_sender_so_answers_do_not_differ() {
        let d = verdict(
            &[checked("r", Action::Reject, 1, 2)],
            SenderState::ShadowBanned,
            None,
        );
        assert!(
            d.rejection.is_some(),
            "a banned sender gets the same 429 as anyone"
        );
    }

    #[test]
    fn a_held_sender_is_held_with_its_state_as_reason_and_no_new_flag() {
        for state in [SenderState::ShadowBanned, SenderState::Banned] {
            let d = verdict(&[checked("a", Action::ShadowBan, 5, 9)], state, None);
            assert_eq!(d.status, Status::Held);
            assert!(d.breach.is_none(), "{state:?}: already flagged");
            assert_eq!(
                json_of(&d.decision)["reason"],
                format!("sender_{}", state.as_str())
            );
            assert_eq!(json_of(&d.decision)["rules"][0][1], 9, "the count is kept");
        }
    }

    #[test]
    fn the_decision_record_lists_every_rule_with_its_outcome() {
        let record = decision_record(
            &[
                checked("a", Action::Suppress, 3, 4),
                checked("b", Action::Monitor, 10, 1),
            ],
            Some(Action::Suppress),
        );
        assert_eq!(
            json_of(&record),
            json!({"reason": "rules", "action": "suppress", "rules": [
                ["a", 4, 3, 3600, "exceeded"],
                ["b", 1, 10, 3600, "ok"],
            ]})
        );
    }

    #[test]
    fn a_hold_breach_holds_this_invite_and_flags_without_a_ban() {
        let d = verdict(
            &[
                checked("links", Action::Hold, 0, 1),
                checked("calm", Action::Suppress, 5, 1),
            ],
            SenderState::Active,
            None,
        );
        assert_eq!(d.status, Status::Held);
        let breach = d.breach.expect("flagged");
        assert_eq!(
            (breach.action, breach.rule_name.as_str()),
            (Action::Hold, "links")
        );
        let d = verdict(
            &[
                checked("links", Action::Hold, 0, 1),
                checked("loud", Action::ShadowBan, 5, 6),
            ],
            SenderState::Active,
            None,
        );
        assert_eq!(
            d.breach.expect("flagged").action,
            Action::ShadowBan,
            "shadow_ban > hold"
        );
    }

    #[test]
    fn links_from_a_sender_linked_to_a_banned_one_are_held() {
        let d = verdict(
            &[checked("a", Action::Monitor, 5, 1)],
            SenderState::Active,
            Some("spammer"),
        );
        assert_eq!(d.status, Status::Held);
        assert_eq!(d.breach.expect("flagged").rule_name, LINKED_SENDER);
        assert_eq!(json_of(&d.decision)["linked_to"], "spammer");
        let d = verdict(
            &[checked("r", Action::Reject, 1, 2)],
            SenderState::Active,
            Some("spammer"),
        );
        assert!(d.rejection.is_some(), "reject outranks hold");
    }

    #[test]
    fn trusted_senders_and_redis_outages_have_their_own_reasons() {
        let t = trusted();
        assert_eq!(
            (t.status, json_of(&t.decision)["reason"].as_str()),
            (Status::Queued, Some("trusted"))
        );
        let active = SenderState::Active;
        let d = without_redis(RedisPolicy::Defer, active, None).expect("defer");
        assert_eq!(d.status, Status::Deferred);
        let o = without_redis(RedisPolicy::Open, active, None).expect("open");
        assert_eq!(o.status, Status::Queued);
        assert_eq!(
            json_of(&o.decision)["reason"],
            "redis_unavailable_sent_unchecked"
        );
        assert!(without_redis(RedisPolicy::Closed, active, None).is_none());
    }

    #[test]
    fn sent_unchecked_still_holds_what_needs_no_counting() {
        let banned =
            without_redis(RedisPolicy::Open, SenderState::ShadowBanned, None).expect("open");
        assert_eq!(banned.status, Status::Held);
        assert_eq!(json_of(&banned.decision)["reason"], "sender_shadow_banned");
        assert!(json_of(&banned.decision).get("rules").is_none());
        let linked =
            without_redis(RedisPolicy::Open, SenderState::Active, Some("ghost")).expect("open");
        assert_eq!(linked.status, Status::Held);
        assert!(
            linked.breach.is_some(),
            "a link flags the sender as with Redis"
        );
    }
}
