//! `sendguard_decisions_total`, counted per rule without an allocation per check.

use std::collections::HashMap;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::labels::DecisionLabels;

/// `sendguard_decisions_total`. Rule names are operators' strings, edited at run time, so they
/// cannot be static labels, and a lookup in the family would need an owned `String` per check.
/// Instead each rule's two counters are created on its first check and kept in a read-mostly
/// map looked up by `&str`: once a rule is known, counting its check is a lock-free load, a
/// hash of its name and an atomic add. A rule renamed or given another action gets new series;
/// the old ones stay, as counters do.
#[derive(Default)]
pub(super) struct Decisions {
    pub(super) family: Family<DecisionLabels, Counter>,
    by_rule: ArcSwap<HashMap<String, RuleCounters>>,
}

#[derive(Clone)]
struct RuleCounters {
    action: &'static str,
    ok: Counter,
    exceeded: Counter,
}

impl RuleCounters {
    fn count(&self, allowed: bool) {
        let counter = if allowed { &self.ok } else { &self.exceeded };
        counter.inc();
    }
}

impl Decisions {
    pub(super) fn count(&self, rule: &str, action: &'static str, allowed: bool) {
        let known = self.by_rule.load();
        match known.get(rule).filter(|c| c.action == action) {
            Some(counters) => counters.count(allowed),
            None => self.add(rule, action).count(allowed),
        }
    }

    /// The counters of a rule not seen yet (or whose action changed). Two checks racing here
    /// get the same counters from the family.
    fn add(&self, rule: &str, action: &'static str) -> RuleCounters {
        let series = |outcome| {
            self.family.get_or_create_owned(&DecisionLabels {
                rule: rule.to_owned(),
                action,
                outcome,
            })
        };
        let counters = RuleCounters {
            action,
            ok: series("ok"),
            exceeded: series("exceeded"),
        };
        self.by_rule.rcu(|known| {
            let mut known = HashMap::clone(known);
            known.insert(rule.to_owned(), counters.clone());
            known
        });
        counters
    }
}
