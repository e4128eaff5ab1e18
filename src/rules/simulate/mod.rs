//! The second table of `sendguard simulate`: senders' behaviour against the default rules, and
//! which rule catches each sender after how many invites. The rules run in the in-process
//! limiter, which gives the answers the Redis scripts give.

pub mod campaign;

use super::contribution::{Counting, InviteFacts};
use super::{Action, Scope, Signal, Subjects};
use crate::limiter::{Algorithm, Check, EdgeMode, KeyPrefix, MemoryStore, Quota};
use crate::sender_key::SenderKey;
use crate::signals::{any_link, offline_members};

/// The domain part of an address.
fn domain_of(address: &str) -> &str {
    address
        .rsplit_once('@')
        .map_or(address, |(_, domain)| domain)
}

/// One invite of a trace.
struct Sent {
    at_ms: u64,
    recipient: String,
    message: &'static str,
}

/// A sender's behaviour over a day.
pub struct SenderTrace {
    pub name: &'static str,
    /// Whether the sender is new (for `new_senders_only` rules).
    pub new: bool,
    sent: Vec<Sent>,
}

/// A default rule, as the migrations create it.
struct DefaultRule {
    name: &'static str,
    signal: Signal,
    limit: u64,
    window_secs: u64,
    action: Action,
    new_senders_only: bool,
}

const RULES: [DefaultRule; 4] = [
    DefaultRule {
        name: "sender-hourly",
        signal: Signal::Invites,
        limit: 60,
        window_secs: 3600,
        action: Action::ShadowBan,
        new_senders_only: false,
    },
    DefaultRule {
        name: "sender-daily",
        signal: Signal::Invites,
        limit: 500,
        window_secs: 86_400,
        action: Action::ShadowBan,
        new_senders_only: false,
    },
    DefaultRule {
        name: "sender-distinct-recipients-daily",
        signal: Signal::DistinctRecipients,
        limit: 100,
        window_secs: 86_400,
        action: Action::ShadowBan,
        new_senders_only: false,
    },
    DefaultRule {
        name: "new-sender-links",
        signal: Signal::Links,
        limit: 0,
        window_secs: 86_400,
        action: Action::Hold,
        new_senders_only: true,
    },
];

pub(super) const START_MS: u64 = 1_700_006_400_000;
const SPAM: &str = "Claim your prize at http://scam.example before it expires";
const PLAIN: &str = "Join my doc, I added the figures we talked about";

/// `per_hour` invites an hour for `hours`, evenly spaced, to recipients chosen by `to`.
fn steady(
    per_hour: u64,
    hours: u64,
    message: &'static str,
    to: impl Fn(u64) -> String,
) -> Vec<Sent> {
    let n = per_hour * hours;
    (0..n)
        .map(|k| Sent {
            at_ms: START_MS + k * 3_600_000 / per_hour,
            recipient: to(k),
            message,
        })
        .collect()
}

pub fn traces() -> Vec<SenderTrace> {
    vec![
        SenderTrace {
            name: "new account, 50 an hour to strangers, a link in each",
            new: true,
            sent: steady(50, 24, SPAM, |k| format!("stranger{k}@mail.example")),
        },
        SenderTrace {
            name: "new account, 50 an hour to strangers, no link",
            new: true,
            sent: steady(50, 24, PLAIN, |k| format!("stranger{k}@mail.example")),
        },
        SenderTrace {
            name: "old account, 5 an hour to strangers, slowly rotated",
            new: false,
            sent: steady(5, 24, PLAIN, |k| format!("stranger{k}@mail.example")),
        },
        SenderTrace {
            name: "team lead, 40 an hour to the same 12 colleagues",
            new: false,
            sent: steady(40, 24, PLAIN, |k| {
                format!("colleague{}@team.example", k % 12)
            }),
        },
    ]
}

/// When each rule first catches a trace: the invite number, or `None`.
pub fn caught(trace: &SenderTrace) -> Vec<(&'static str, Option<usize>)> {
    let store = MemoryStore::new();
    let keys = KeyPrefix::default();
    let members = offline_members();
    let sender = SenderKey::new(0, trace.name);
    RULES
        .iter()
        .map(|rule| {
            let algorithm = if rule.signal.is_distinct() {
                Algorithm::Distinct
            } else {
                Algorithm::HashCounters(EdgeMode::Harsh)
            };
            let mut quota = Quota::new(rule.limit, rule.window_secs, algorithm);
            quota.count_over_limit = rule.action.counts_over_limit();
            let counting = Counting {
                scope: Scope::Sender,
                signal: rule.signal,
                new_senders_only: rule.new_senders_only,
            };
            let first = trace.sent.iter().position(|sent| {
                let facts = InviteFacts {
                    of: Subjects {
                        sender: &sender,
                        sender_ip: None,
                        recipient: &sent.recipient,
                        recipient_domain: domain_of(&sent.recipient),
                        campaign: &[],
                    },
                    has_links: any_link([Some(sent.message)]),
                    new_sender: trace.new,
                };
                let Some(adds) = counting.of(&facts, members).into_iter().next() else {
                    return false;
                };
                let key = keys.key(&adds.subject, rule.name, &quota);
                let (cost, member) = (adds.cost, adds.member);
                let check = Check {
                    member,
                    ..Check::new(&key, &quota, cost)
                };
                // A rule acts on the invites that add to its count.
                cost > 0
                    && store
                        .check_batch(&[check], Some(sent.at_ms))
                        .iter()
                        .any(|d| !d.allowed)
            });
            (rule.name, first.map(|k| k + 1))
        })
        .collect()
}

/// The table: one row per trace, one column per rule.
pub fn to_text() -> String {
    let mut header = vec!["sender (24 hours)"];
    header.extend(RULES.iter().map(|r| r.name));
    let rows: Vec<Vec<String>> = traces()
        .iter()
        .map(|trace| {
            let mut row = vec![trace.name.to_owned()];
            row.extend(caught(trace).into_iter().map(|(_, at)| match at {
                Some(n) => format!("invite {n}"),
                None => "never".into(),
            }));
            row
        })
        .collect();
    crate::limiter::simulate::to_table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(trace: usize, rule: &str) -> Option<usize> {
        let traces = traces();
        caught(&traces[trace])
            .into_iter()
            .find(|(name, _)| *name == rule)
            .and_then(|(_, at)| at)
    }

    #[test]
    fn quiet_signals_catch_the_spammer_that_volume_misses() {
        assert_eq!(at(0, "sender-hourly"), None, "50 an hour stays under 60");
        assert_eq!(
            at(0, "new-sender-links"),
            Some(1),
            "the first link of a new account"
        );
        assert_eq!(at(1, "sender-distinct-recipients-daily"), Some(101));
        assert_eq!(
            at(2, "sender-distinct-recipients-daily"),
            Some(101),
            "after 20 hours"
        );
        assert_eq!(
            at(3, "sender-distinct-recipients-daily"),
            None,
            "12 colleagues"
        );
        assert_eq!(at(3, "sender-daily"), Some(501), "but volume still counts");
    }
}
