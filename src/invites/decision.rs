//! The record of a verdict kept with each invite (`invites.decision`), which reviewers read:
//! why it got its status, and each rule the verdict depended on.

use serde::Serialize;

/// Why an invite got its status, kept with it as JSON (`invites.decision`): each rule checked,
/// its count, limit and outcome. Typed, and serialized once as the batch binds it: a JSON tree
/// per invite was a tenth of the invite path's CPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    pub reason: &'static str,
    /// The strongest breached action (`null` when none), when rules were checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<Option<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<RuleOutcome>>,
    /// The banned sender this one is linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linked_to: Option<String>,
    /// Decided after the fact, once Redis could be asked again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
}

impl DecisionRecord {
    /// A record of only its reason: no rule was checked.
    pub fn reason(reason: &'static str) -> DecisionRecord {
        DecisionRecord {
            reason,
            action: None,
            rules: None,
            linked_to: None,
            deferred: false,
        }
    }
}

/// One rule of a [`DecisionRecord`]: what the verdict depended on, stored as the array
/// `[rule, count, limit, window_secs, outcome]`. The rule's scope, signal and action are its
/// definition (the rules table, its changes in the audit log), not repeated in every invite.
/// With each field named, the nine default rules' record was 1,217 bytes of a 1,392-byte row;
/// as arrays it is 749.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOutcome {
    pub rule: String,
    pub count: u64,
    pub limit: u64,
    pub window_secs: u64,
    /// `ok` or `exceeded`.
    pub outcome: &'static str,
}

impl Serialize for RuleOutcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (
            &self.rule,
            self.count,
            self.limit,
            self.window_secs,
            self.outcome,
        )
            .serialize(serializer)
    }
}
