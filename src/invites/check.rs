//! The rule check of an invite: every enabled rule that applies, counted in Redis (or in
//! process, for a global invite count) in one round trip; on a single Redis server the same
//! round trip first looks up its text's near-duplicate group, which its `fingerprint` rules
//! count.

use std::sync::Arc;

use super::policy::Checked;
use super::validate::ValidInvite;
use super::{Facts, InviteError, InviteService};
use crate::campaigns;
use crate::limiter::{Check, FoldedGroup, LimitKey, LimiterError};
use crate::metrics::DependencyError;
use crate::rules::contribution::InviteFacts;
use crate::rules::{Rule, Scope, Signal, Subjects};
use crate::sender_key::SenderKey;

impl InviteService {
    /// Every enabled rule that applies, in one pipeline: all keys of a subject share a hash tag.
    /// What the invite adds to each rule is [`Counting::of`]; a rule that only reads its count
    /// (outcome signals, a `links` rule on an invite without links) never acts on it.
    pub(super) async fn check_rules(
        &self,
        invite: &ValidInvite,
        sender: &SenderKey,
        at_ms: Option<u64>,
        facts: Facts,
    ) -> Result<Counted, InviteError> {
        let rules = self.rules.enabled();
        let wanted = crate::rules::wanted(&rules);
        let mut campaign = if wanted.any() {
            let texts = campaigns::Texts {
                message: invite.message.as_deref(),
                sender_name: invite.sender_name.as_deref(),
                resource: invite.resource.as_deref(),
            };
            match self.campaigns.subjects(sender.app_id, texts, wanted).await {
                Ok(subjects) => subjects,
                Err(e) => {
                    self.metrics.dependency_error(DependencyError::Redis);
                    return Err(e.into());
                }
            }
        } else {
            campaigns::Subjects::default()
        };
        let seen = InviteFacts {
            of: Subjects {
                sender,
                sender_ip: invite.sender_ip,
                recipient: &invite.recipient,
                recipient_domain: &invite.recipient_domain,
                campaign: &campaign.keys,
            },
            has_links: facts.has_links,
            new_sender: facts.new_sender,
        };
        let mut planned: Vec<Planned> = Vec::new();
        for rule in rules {
            for adds in rule.counting().of(&seen, &self.members) {
                // Global invite counts are kept in process (see `global`) unless the invite
                // is a replay.
                let local = rule.scope == Scope::Global
                    && rule.signal == Signal::Invites
                    && at_ms.is_none()
                    && self.global.is_some();
                let key = self.keys.key(&adds.subject, &rule.name, &rule.quota);
                planned.push(Planned {
                    rule: rule.clone(),
                    subject: adds.subject,
                    key,
                    cost: adds.cost,
                    member: adds.member,
                    local,
                });
            }
        }
        let remote: Vec<&Planned> = planned.iter().filter(|p| !p.local).collect();
        let checks: Vec<Check<'_>> = remote
            .iter()
            .map(|p| Check {
                member: p.member,
                ..Check::new(&p.key, &p.rule.quota, p.cost)
            })
            .collect();
        // The text's group, when it rides in this call, is named by a stand-in until it answers.
        let stand_in = campaign
            .pending
            .as_ref()
            .and(campaign.keys.first())
            .cloned();
        let started = std::time::Instant::now();
        let decided = match &campaign.pending {
            Some(lookup) => {
                let folded = FoldedGroup {
                    lookup,
                    checks: (0..remote.len())
                        .filter(|&n| Some(&remote[n].subject) == stand_in.as_ref())
                        .collect(),
                };
                self.limiter
                    .check_folded(&checks, at_ms, &folded)
                    .await
                    .map(|(decisions, group)| (decisions, Some(group)))
            }
            None => self
                .limiter
                .check_batch(&checks, at_ms)
                .await
                .map(|decisions| (decisions, None)),
        };
        let mut remote = match decided {
            Ok((decisions, group)) => {
                if let Some(group) = group {
                    campaign.resolve(&group);
                }
                decisions.into_iter()
            }
            Err(e) => {
                self.metrics.dependency_error(DependencyError::Redis);
                return Err(e.into());
            }
        };
        let mut checked = Vec::with_capacity(planned.len());
        for p in planned {
            let mut decision = match (&self.global, p.local) {
                (Some(global), true) => global.count(&p.key, &p.rule.quota),
                _ => remote
                    .next()
                    .ok_or_else(|| LimiterError::BadReply("too few decisions".into()))?,
            };
            // A rule acts on the invites that add to its count.
            if p.cost == 0 {
                decision.allowed = true;
            }
            // A count of the text's group goes under the group the call found.
            let subject = match (&stand_in, campaign.keys.first()) {
                (Some(stand_in), Some(group)) if &p.subject == stand_in => group.clone(),
                _ => p.subject,
            };
            checked.push(Checked {
                rule: p.rule,
                subject,
                decision,
            });
        }
        self.metrics.redis_latency(started.elapsed());
        self.redis.recovered();
        for c in &checked {
            self.metrics
                .decision(&c.rule.name, c.rule.action.as_str(), c.decision.allowed);
        }
        Ok(Counted {
            checked,
            campaign_keys: campaign.keys,
        })
    }
}

/// The rules' answers on one invite, and the campaign subjects it counted under.
pub(super) struct Counted {
    pub(super) checked: Vec<Checked>,
    pub(super) campaign_keys: Vec<String>,
}

/// One rule an invite is checked against: its key and what the invite adds to it.
struct Planned {
    rule: Arc<Rule>,
    subject: String,
    key: LimitKey,
    cost: u64,
    member: Option<u32>,
    /// Counted in process (a global invite count), not in Redis.
    local: bool,
}
