//! The third table of `sendguard simulate`: many accounts sending one payload, each under
//! every per-sender limit, against the default rules (campaign rules included), and after how
//! many senders each rule catches the campaign. Texts are grouped in process, as the Redis
//! script groups them (docs/DESIGN.md §3d).

use super::START_MS;
use crate::campaigns::fingerprint::{self, Index};
use crate::campaigns::link_domains::link_domains;
use crate::limiter::{Algorithm, Check, EdgeMode, KeyPrefix, MemoryStore, Quota};
use crate::rules::contribution::{Counting, InviteFacts};
use crate::rules::{Action, Scope, Signal, Subjects};
use crate::sender_key::SenderKey;
use crate::signals::{any_link, offline_members};

/// A default rule a campaign meets.
struct CampaignRule {
    name: &'static str,
    scope: Scope,
    signal: Signal,
    limit: u64,
    window_secs: u64,
    action: Action,
}

const RULES: [CampaignRule; 4] = [
    CampaignRule {
        name: "sender-hourly",
        scope: Scope::Sender,
        signal: Signal::Invites,
        limit: 60,
        window_secs: 3600,
        action: Action::ShadowBan,
    },
    CampaignRule {
        name: "sender-distinct-recipients-daily",
        scope: Scope::Sender,
        signal: Signal::DistinctRecipients,
        limit: 100,
        window_secs: 86_400,
        action: Action::ShadowBan,
    },
    CampaignRule {
        name: "campaign-text",
        scope: Scope::Fingerprint,
        signal: Signal::DistinctSenders,
        limit: 5,
        window_secs: 86_400,
        action: Action::Hold,
    },
    CampaignRule {
        name: "campaign-link-domain",
        scope: Scope::LinkDomain,
        signal: Signal::DistinctSenders,
        limit: 20,
        window_secs: 3600,
        action: Action::Monitor,
    },
];

/// Many accounts over an hour, each sending `each` invites of its own text.
pub struct CampaignTrace {
    pub name: &'static str,
    pub accounts: usize,
    pub each: usize,
    /// The text of account `a`'s invite `n`.
    text: fn(usize, usize) -> String,
}

pub fn traces() -> Vec<CampaignTrace> {
    vec![
        CampaignTrace {
            name: "50 year-old accounts, 8 each, one pitch, names and numbers changed",
            accounts: 50,
            each: 8,
            text: |a, n| {
                let names = ["Ana", "Bo", "Chidi", "Dana", "Eli", "Farah", "Gus", "Hana"];
                format!(
                    "Hi {}, your parcel is waiting at our depot and could not be delivered \
                     because the address was incomplete. Call +1 555 01{a:02} today to claim \
                     it, quoting ref 44{n}{a}.",
                    names[n % names.len()]
                )
            },
        },
        CampaignTrace {
            name: "30 year-old accounts, 5 each, own words, one linked domain",
            accounts: 30,
            each: 5,
            text: |a, n| {
                let words = [
                    "deal", "offer", "bonus", "gift", "prize", "reward", "voucher",
                ];
                format!(
                    "{} {} {a}{n} at https://win-cheap.example/c/{a}",
                    words[a % 7],
                    words[(a / 7 + n) % 7]
                )
            },
        },
    ]
}

/// When each rule first acts on the campaign: the number of the sender whose invite it was
/// (1 for the first account), or `None`.
pub fn caught(trace: &CampaignTrace) -> Vec<(&'static str, Option<usize>)> {
    let store = MemoryStore::new();
    let keys = KeyPrefix::default();
    let members = offline_members();
    let mut groups: Index<String> = Index::new();
    let mut first: Vec<Option<usize>> = vec![None; RULES.len()];
    let total = (trace.accounts * trace.each) as u64;
    for a in 0..trace.accounts {
        let sender = SenderKey::new(0, format!("account{a}").as_str());
        for n in 0..trace.each {
            let k = (a * trace.each + n) as u64;
            let at_ms = START_MS + k * 3_600_000 / total;
            let text = (trace.text)(a, n);
            let mut campaign = Vec::new();
            if let Some(f) = fingerprint::of_invite(Some(&text), None) {
                let group = match groups.find(&f.signature) {
                    Some(g) => g.clone(),
                    None => {
                        let g = format!("g{k}");
                        groups.insert(f.signature, g.clone());
                        g
                    }
                };
                campaign.push(Scope::Fingerprint.subject_of(&group));
            }
            campaign.extend(
                link_domains([Some(text.as_str())], &[])
                    .iter()
                    .map(|d| Scope::LinkDomain.subject_of(d)),
            );
            let recipient = format!("stranger{a}x{n}@mail.example");
            let facts = InviteFacts {
                of: Subjects {
                    sender: &sender,
                    sender_ip: None,
                    recipient: &recipient,
                    recipient_domain: "mail.example",
                    campaign: &campaign,
                },
                has_links: any_link([Some(text.as_str())]),
                new_sender: false,
            };
            for (rule, first) in RULES.iter().zip(first.iter_mut()) {
                let algorithm = if rule.signal.is_distinct() {
                    Algorithm::Distinct
                } else {
                    Algorithm::HashCounters(EdgeMode::Harsh)
                };
                let mut quota = Quota::new(rule.limit, rule.window_secs, algorithm);
                quota.count_over_limit = rule.action.counts_over_limit();
                let counting = Counting {
                    scope: rule.scope,
                    signal: rule.signal,
                    new_senders_only: false,
                };
                for adds in counting.of(&facts, members) {
                    let key = keys.key(&adds.subject, rule.name, &quota);
                    let check = Check {
                        member: adds.member,
                        ..Check::new(&key, &quota, adds.cost)
                    };
                    let over = store
                        .check_batch(&[check], Some(at_ms))
                        .iter()
                        .any(|d| !d.allowed);
                    if over && first.is_none() {
                        *first = Some(a + 1);
                    }
                }
            }
        }
    }
    RULES.iter().map(|r| r.name).zip(first).collect()
}

/// The table: one row per campaign, one column per rule.
pub fn to_text() -> String {
    let mut header = vec!["campaign (one hour)"];
    header.extend(RULES.iter().map(|r| r.name));
    let rows: Vec<Vec<String>> = traces()
        .iter()
        .map(|trace| {
            let mut row = vec![trace.name.to_owned()];
            row.extend(caught(trace).into_iter().map(|(name, at)| {
                let watching = RULES
                    .iter()
                    .any(|r| r.name == name && r.action == Action::Monitor);
                match (at, watching) {
                    (Some(n), false) => format!("sender {n}"),
                    (Some(n), true) => format!("sender {n} (recorded)"),
                    (None, _) => "never".into(),
                }
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
        caught(&traces()[trace])
            .into_iter()
            .find(|(name, _)| *name == rule)
            .and_then(|(_, at)| at)
    }

    #[test]
    fn the_campaign_rules_catch_what_per_sender_limits_miss() {
        assert_eq!(at(0, "sender-hourly"), None);
        assert_eq!(at(0, "sender-distinct-recipients-daily"), None);
        assert_eq!(at(0, "campaign-text"), Some(6), "from the sixth sender");
        assert_eq!(
            at(1, "campaign-link-domain"),
            Some(21),
            "recorded from the 21st"
        );
        assert_eq!(at(1, "sender-hourly"), None);
    }
}
