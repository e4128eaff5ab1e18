//! Rules as code (docs/DESIGN.md §4): every rule as TOML, and a file applied all or nothing. A file
//! is validated whole (each error names the rule and the key), compared with the rules in
//! force, and applied in one transaction, audited under the operator's name; every instance
//! picks the change up within a second (the rules' NOTIFY and reload).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::edit::{self, RuleInput, SaveError, ValidRule};
use super::{Rule, RuleError};
use crate::audit::{self, Entry};

/// The file: one `[[rule]]` table per rule.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesFile {
    #[serde(default)]
    pub rule: Vec<RuleEntry>,
}

/// One rule as written; omitted keys take their defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleEntry {
    pub name: String,
    pub scope: String,
    #[serde(default = "default_signal")]
    pub signal: String,
    pub limit: i64,
    pub window: Window,
    #[serde(default = "default_action")]
    pub action: String,
    #[serde(default = "default_algorithm")]
    pub algorithm: String,
    /// `harsh`, `lenient` or `weighted`, for `hash_counters` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge: Option<String>,
    #[serde(default)]
    pub new_senders_only: bool,
    #[serde(default = "yes")]
    pub enabled: bool,
}

/// A window as `"1h"` or as seconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Window {
    Seconds(i64),
    Text(String),
}

fn default_signal() -> String {
    "invites".into()
}

fn default_action() -> String {
    "monitor".into()
}

fn default_algorithm() -> String {
    "hash_counters".into()
}

fn yes() -> bool {
    true
}

impl RuleEntry {
    fn of(rule: &Rule) -> RuleEntry {
        let (algorithm, edge) = edit::algorithm_parts(rule.algorithm);
        RuleEntry {
            name: rule.name.clone(),
            scope: rule.scope.as_str().into(),
            signal: rule.signal.as_str().into(),
            limit: rule.quota.limit as i64,
            window: Window::Text(edit::window_text((rule.quota.window_ms / 1000) as i64)),
            action: rule.action.as_str().into(),
            algorithm: algorithm.into(),
            edge: edge.map(Into::into),
            new_senders_only: rule.new_senders_only,
            enabled: rule.enabled,
        }
    }

    /// The rule, or the errors of each key.
    fn validate(&self) -> Result<ValidRule, Vec<(&'static str, String)>> {
        let algorithm = match (&self.edge, self.algorithm.as_str()) {
            (None, a) => a.to_owned(),
            (Some(edge), "hash_counters") if edge == "harsh" => "hash_counters".into(),
            (Some(edge), "hash_counters") => format!("hash_counters:{edge}"),
            (Some(_), a) => {
                return Err(vec![(
                    "edge",
                    format!("applies to hash_counters only, not `{a}`"),
                )]);
            }
        };
        let input = RuleInput {
            name: self.name.clone(),
            scope: self.scope.clone(),
            signal: self.signal.clone(),
            limit: self.limit.to_string(),
            window: match &self.window {
                Window::Seconds(s) => s.to_string(),
                Window::Text(t) => t.clone(),
            },
            algorithm,
            action: self.action.clone(),
            new_senders_only: self.new_senders_only,
            enabled: self.enabled,
        };
        edit::validate(&input).map_err(|errors| {
            errors
                .named()
                .into_iter()
                .map(|(field, e)| (field, e.to_owned()))
                .collect()
        })
    }
}

/// Every rule as a rules file.
pub fn export(rules: &[Rule]) -> Result<String, RuleError> {
    let file = RulesFile {
        rule: rules.iter().map(RuleEntry::of).collect(),
    };
    let body = basic_toml::to_string(&file).map_err(|e| RuleError::Invalid {
        name: "(all)".into(),
        reason: e.to_string(),
    })?;
    Ok(format!(
        "# sendguard rules: `sendguard rules apply FILE` makes these the rules in force.\n\n{body}"
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("the file is not valid TOML for rules: {0}")]
    Syntax(String),
    #[error("the file has errors, nothing was changed:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Rules(#[from] RuleError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

impl From<SaveError> for ApplyError {
    fn from(e: SaveError) -> Self {
        match e {
            SaveError::Db(e) => ApplyError::Db(e),
            e => ApplyError::Invalid(vec![e.to_string()]),
        }
    }
}

/// One change a file makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Create(String),
    /// The rule and its keys that change, each with old and new value.
    Update(String, Vec<(&'static str, String, String)>),
    Delete(String),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Create(name) => write!(f, "create {name}"),
            Change::Delete(name) => write!(f, "delete {name}"),
            Change::Update(name, keys) => {
                write!(f, "update {name}:")?;
                for (key, old, new) in keys {
                    write!(f, " {key} {old} -> {new};")?;
                }
                Ok(())
            }
        }
    }
}

/// Parses and validates a whole file: every error of every rule, each naming its rule and key.
pub fn parse(text: &str) -> Result<Vec<ValidRule>, ApplyError> {
    let file: RulesFile =
        basic_toml::from_str(text).map_err(|e| ApplyError::Syntax(e.to_string()))?;
    let mut errors = Vec::new();
    let mut rules = Vec::new();
    let mut names = BTreeMap::new();
    for (n, entry) in file.rule.iter().enumerate() {
        let label = if entry.name.is_empty() {
            format!("rule #{}", n + 1)
        } else {
            format!("rule `{}`", entry.name)
        };
        if names.insert(entry.name.clone(), n).is_some() {
            errors.push(format!("{label}: key `name`: named twice in the file"));
        }
        match entry.validate() {
            Ok(rule) => rules.push(rule),
            Err(keys) => {
                for (key, e) in keys {
                    errors.push(format!("{label}: key `{key}`: {e}"));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(rules)
    } else {
        Err(ApplyError::Invalid(errors))
    }
}

/// What makes `current` the rules of `wanted` (deleting the others with `prune`).
pub fn plan(current: &[Rule], wanted: &[ValidRule], prune: bool) -> Vec<Change> {
    let mut changes = Vec::new();
    for rule in wanted {
        match current.iter().find(|r| r.name == rule.name) {
            None => changes.push(Change::Create(rule.name.clone())),
            Some(now) => {
                let keys = differences(now, rule);
                if !keys.is_empty() {
                    changes.push(Change::Update(rule.name.clone(), keys));
                }
            }
        }
    }
    if prune {
        for now in current {
            if !wanted.iter().any(|r| r.name == now.name) {
                changes.push(Change::Delete(now.name.clone()));
            }
        }
    }
    changes
}

fn differences(now: &Rule, rule: &ValidRule) -> Vec<(&'static str, String, String)> {
    let pairs: [(&'static str, String, String); 8] = [
        (
            "scope",
            now.scope.as_str().into(),
            rule.scope.as_str().into(),
        ),
        (
            "signal",
            now.signal.as_str().into(),
            rule.signal.as_str().into(),
        ),
        (
            "limit",
            now.quota.limit.to_string(),
            rule.quota.limit.to_string(),
        ),
        (
            "window",
            edit::window_text((now.quota.window_ms / 1000) as i64),
            edit::window_text((rule.quota.window_ms / 1000) as i64),
        ),
        (
            "action",
            now.action.as_str().into(),
            rule.action.as_str().into(),
        ),
        (
            "algorithm",
            now.algorithm.to_string(),
            rule.algorithm.to_string(),
        ),
        (
            "new_senders_only",
            now.new_senders_only.to_string(),
            rule.new_senders_only.to_string(),
        ),
        ("enabled", now.enabled.to_string(), rule.enabled.to_string()),
    ];
    pairs.into_iter().filter(|(_, a, b)| a != b).collect()
}

/// Applies `changes` in one transaction, each audited under `actor`.
pub async fn apply(
    pool: &PgPool,
    current: &[Rule],
    wanted: &[ValidRule],
    changes: &[Change],
    actor: &str,
) -> Result<(), ApplyError> {
    let mut tx = pool.begin().await?;
    for change in changes {
        match change {
            Change::Create(name) => {
                let Some(rule) = wanted.iter().find(|r| &r.name == name) else {
                    continue;
                };
                let id = edit::insert(&mut tx, rule).await?;
                edit::audit_rule(&mut tx, actor, "rule_create", id, rule, Some("rules apply"))
                    .await?;
            }
            Change::Update(name, _) => {
                let (Some(rule), Some(now)) = (
                    wanted.iter().find(|r| &r.name == name),
                    current.iter().find(|r| &r.name == name),
                ) else {
                    continue;
                };
                edit::overwrite(&mut tx, now.id, rule).await?;
                edit::audit_rule(
                    &mut tx,
                    actor,
                    "rule_update",
                    now.id,
                    rule,
                    Some("rules apply"),
                )
                .await?;
            }
            Change::Delete(name) => {
                let Some(now) = current.iter().find(|r| &r.name == name) else {
                    continue;
                };
                sqlx::query("DELETE FROM rules WHERE id = $1")
                    .bind(now.id)
                    .execute(&mut *tx)
                    .await?;
                let entry = Entry {
                    rule_id: Some(now.id),
                    detail: serde_json::json!({"name": name}),
                    note: Some("rules apply --prune"),
                    ..Entry::new(actor, "rule_delete")
                };
                audit::write(&mut *tx, entry).await?;
            }
        }
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[[rule]]
name = "sender-hourly"
scope = "sender"
limit = 60
window = "1h"
action = "shadow_ban"

[[rule]]
name = "new-sender-links"
scope = "sender"
signal = "links"
limit = 0
window = 86400
action = "hold"
new_senders_only = true
"#;

    #[test]
    fn a_file_parses_with_defaults_and_units() {
        let rules = parse(FILE).expect("valid");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].quota.window_ms, 3_600_000);
        assert!(rules[0].enabled, "enabled by default");
        assert_eq!(rules[1].signal, super::super::Signal::Links);
        assert!(rules[1].new_senders_only);
    }

    #[test]
    fn every_error_names_its_rule_and_key() {
        let bad = r#"
[[rule]]
name = "ok"
scope = "sender"
limit = 5
window = "1h"

[[rule]]
name = "broken"
scope = "planet"
limit = 5
window = "1 week"
"#;
        let Err(ApplyError::Invalid(errors)) = parse(bad) else {
            panic!("the file has errors");
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("rule `broken`: key `scope`"),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("rule `broken`: key `window`"),
            "{errors:?}"
        );
        assert!(matches!(
            parse("[[rule]]\nname = \"x\"\nscope = \"sender\"\nlimit = 1\nwindow = 60\nlimt = 2\n"),
            Err(ApplyError::Syntax(_))
        ));
    }
}
