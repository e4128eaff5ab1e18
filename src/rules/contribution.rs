//! What one invite adds to one rule: the subject it counts under, its cost and, for a distinct
//! count, the member it counts. The live decision, the backtest, the threshold advisor and
//! `sendguard simulate` all ask here, so a replay of recorded traffic gives each invite the
//! answer the live check gave it. So is whether a sender counts as new ([`is_new`]).

use super::{Rule, Scope, Signal, Subjects, edit::ValidRule, sender_subject};
use crate::signals::MemberKey;

type Time = chrono::DateTime<chrono::Utc>;

/// What the rules see of one invite.
pub struct InviteFacts<'a> {
    pub of: Subjects<'a>,
    /// Its text carries a link (`signals::any_link`).
    pub has_links: bool,
    /// Its sender counts as new (`moderation::is_new`), for `new_senders_only` rules.
    pub new_sender: bool,
}

/// The part of a rule's definition that says what it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counting {
    pub scope: Scope,
    pub signal: Signal,
    pub new_senders_only: bool,
}

/// What one invite adds to one rule's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribution {
    /// The subject the rule counts the invite under (`Scope::subject`).
    pub subject: String,
    /// What it adds: 0 for an invite the rule only reads (one without links for a `links`
    /// rule; outcome signals, counted as the outcomes arrive).
    pub cost: u64,
    /// The member a distinct count counts.
    pub member: Option<u32>,
}

impl Counting {
    /// What `invite` adds to the rule, once per subject it counts under: none when the rule
    /// does not apply to it (a rule for new senders, an `ip` rule on an invite without an
    /// address, a campaign rule on a text without a fingerprint or links); several for a text
    /// linking to several domains.
    pub fn of(&self, invite: &InviteFacts<'_>, members: &MemberKey) -> Vec<Contribution> {
        if self.new_senders_only && !invite.new_sender {
            return Vec::new();
        }
        let (cost, member) = match self.signal {
            Signal::Invites => (1, None),
            Signal::Links => (u64::from(invite.has_links), None),
            Signal::DistinctRecipients => (1, Some(members.member(invite.of.recipient))),
            Signal::DistinctDomains => (1, Some(members.member(invite.of.recipient_domain))),
            Signal::DistinctSenders => (1, Some(members.member(&sender_subject(invite.of.sender)))),
            Signal::Bounces | Signal::Complaints => (0, None),
        };
        self.scope
            .subjects(&invite.of)
            .into_iter()
            .map(|subject| Contribution {
                subject,
                cost,
                member,
            })
            .collect()
    }
}

/// Acceptances that vouch for a sender after which it is no longer new, whatever its age.
pub const NEW_UNTIL_VOUCHED: i64 = 5;
/// Distinct recipient domains those acceptances must come from: a spammer accepting their own
/// invites from mailboxes of one domain earns nothing.
pub const VOUCHING_DOMAINS: usize = 3;
/// An acceptance vouches only when it comes this long after the invite was sent: one that
/// arrives at once is the sender clicking their own link.
pub const VOUCH_AFTER: chrono::Duration = chrono::Duration::minutes(10);

/// The acceptances that vouch for a sender: how many, and how many distinct recipient domains
/// they came from (counted up to [`VOUCHING_DOMAINS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Vouches {
    pub count: i64,
    pub domains: usize,
}

/// Whether an acceptance at `at` of an invite sent at `sent` vouches for its sender.
pub fn vouches(sent: Option<Time>, at: Time) -> bool {
    sent.is_some_and(|sent| at >= sent + VOUCH_AFTER)
}

/// Whether a sender counts as new at `now`, for `new_senders_only` rules: younger than `days`
/// (from `since`, when the account was made or first seen; a sender never seen is new), unless
/// people vouched for it: [`NEW_UNTIL_VOUCHED`] acceptances from [`VOUCHING_DOMAINS`] domains,
/// since spammers' invites are rarely accepted.
pub fn is_new(since: Option<Time>, vouched: Vouches, days: i64, now: Time) -> bool {
    let age = since.map_or(chrono::Duration::zero(), |since| now - since);
    let trusted = vouched.count >= NEW_UNTIL_VOUCHED && vouched.domains >= VOUCHING_DOMAINS;
    age < chrono::Duration::days(days) && !trusted
}

impl Rule {
    pub fn counting(&self) -> Counting {
        Counting {
            scope: self.scope,
            signal: self.signal,
            new_senders_only: self.new_senders_only,
        }
    }
}

impl ValidRule {
    pub fn counting(&self) -> Counting {
        Counting {
            scope: self.scope,
            signal: self.signal,
            new_senders_only: self.new_senders_only,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender_key::SenderKey;

    fn facts<'a>(sender: &'a SenderKey, has_links: bool, new_sender: bool) -> InviteFacts<'a> {
        InviteFacts {
            of: Subjects {
                sender,
                sender_ip: None,
                recipient: "ana@example.com",
                recipient_domain: "example.com",
                campaign: &[],
            },
            has_links,
            new_sender,
        }
    }

    fn counting(scope: Scope, signal: Signal, new_senders_only: bool) -> Counting {
        Counting {
            scope,
            signal,
            new_senders_only,
        }
    }

    #[test]
    fn each_signal_adds_what_it_counts() {
        let members = MemberKey::new(b"test");
        let sender = SenderKey::new(1, "u_1");
        let plain = facts(&sender, false, false);
        let add = |signal| {
            counting(Scope::Sender, signal, false)
                .of(&plain, &members)
                .first()
                .map(|c| (c.cost, c.member))
        };
        assert_eq!(add(Signal::Invites), Some((1, None)));
        assert_eq!(add(Signal::Links), Some((0, None)), "read, not counted");
        assert_eq!(
            add(Signal::DistinctRecipients),
            Some((1, Some(members.member("ana@example.com"))))
        );
        assert_eq!(
            add(Signal::DistinctDomains),
            Some((1, Some(members.member("example.com"))))
        );
        assert_eq!(add(Signal::Bounces), Some((0, None)));
        assert_eq!(add(Signal::Complaints), Some((0, None)));
        let linked = facts(&sender, true, false);
        assert_eq!(
            counting(Scope::Sender, Signal::Links, false)
                .of(&linked, &members)
                .first()
                .map(|c| c.cost),
            Some(1)
        );
    }

    #[test]
    fn rules_for_new_senders_and_addresses_apply_only_where_they_can() {
        let members = MemberKey::new(b"test");
        let sender = SenderKey::new(1, "u_1");
        let links = counting(Scope::Sender, Signal::Links, true);
        assert!(links.of(&facts(&sender, true, false), &members).is_empty());
        assert_eq!(links.of(&facts(&sender, true, true), &members).len(), 1);
        let ip = counting(Scope::Ip, Signal::Invites, false);
        assert!(
            ip.of(&facts(&sender, false, false), &members).is_empty(),
            "no address given"
        );
    }

    #[test]
    fn campaign_rules_count_each_subject_of_the_text_and_the_sender_as_the_member() {
        let members = MemberKey::new(b"test");
        let sender = SenderKey::new(1, "u_1");
        let campaign = [
            "fingerprint:g1".to_owned(),
            "link_domain:a.example".to_owned(),
            "link_domain:b.example".to_owned(),
        ];
        let mut seen = facts(&sender, true, false);
        seen.of.campaign = &campaign;
        let domains =
            counting(Scope::LinkDomain, Signal::DistinctSenders, false).of(&seen, &members);
        assert_eq!(
            domains
                .iter()
                .map(|c| c.subject.as_str())
                .collect::<Vec<_>>(),
            ["link_domain:a.example", "link_domain:b.example"]
        );
        let text = counting(Scope::Fingerprint, Signal::DistinctSenders, false).of(&seen, &members);
        assert_eq!(text.len(), 1);
        assert_eq!(
            text[0].member,
            Some(members.member(&sender_subject(&sender)))
        );
        assert!(
            counting(Scope::Fingerprint, Signal::Invites, false)
                .of(&facts(&sender, false, false), &members)
                .is_empty(),
            "no fingerprint, nothing counted"
        );
    }
}
