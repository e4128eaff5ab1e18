//! Creating and editing rules (from the dashboard and from a rules file): validation with an
//! error per field, saves that refuse a rule changed since it was read, an audit entry each.

use std::str::FromStr;

use serde_json::json;
use sqlx::{PgConnection, PgPool};

use super::{Action, Rule, RuleRow, SELECT_RULES, Scope, Signal, quota_for};
use crate::audit::{self, Entry};
use crate::limiter::{Algorithm, EdgeMode, MAX_DISTINCT_LIMIT, MAX_LIMIT, Quota, rule_code};

/// A rule as typed into the form, or written in a rules file.
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    pub name: String,
    pub scope: String,
    pub signal: String,
    pub limit: String,
    /// Seconds, or a number with a unit: `30s`, `15m`, `1h`, `1d`.
    pub window: String,
    pub algorithm: String,
    pub action: String,
    pub new_senders_only: bool,
    pub enabled: bool,
}

/// What is wrong with each field, if anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    pub name: Option<String>,
    pub scope: Option<String>,
    pub signal: Option<String>,
    pub limit: Option<String>,
    pub window: Option<String>,
    pub algorithm: Option<String>,
    pub rule_action: Option<String>,
}

impl FieldErrors {
    /// Each error with the name of its field, in the form's order.
    pub fn named(&self) -> Vec<(&'static str, &str)> {
        [
            ("name", &self.name),
            ("scope", &self.scope),
            ("signal", &self.signal),
            ("limit", &self.limit),
            ("window", &self.window),
            ("algorithm", &self.algorithm),
            ("action", &self.rule_action),
        ]
        .into_iter()
        .filter_map(|(field, e)| e.as_deref().map(|e| (field, e)))
        .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidRule {
    pub name: String,
    pub scope: Scope,
    pub signal: Signal,
    /// The algorithm the rule names (distinct signals count with their own, see `quota`).
    pub algorithm: Algorithm,
    pub quota: Quota,
    pub action: Action,
    pub new_senders_only: bool,
    pub enabled: bool,
}

impl From<&Rule> for ValidRule {
    /// A saved rule, as a proposed one (to backtest it as it stands).
    fn from(rule: &Rule) -> ValidRule {
        ValidRule {
            name: rule.name.clone(),
            scope: rule.scope,
            signal: rule.signal,
            algorithm: rule.algorithm,
            quota: rule.quota,
            action: rule.action,
            new_senders_only: rule.new_senders_only,
            enabled: rule.enabled,
        }
    }
}

/// A window in seconds from `90`, `30s`, `15m`, `1h` or `1d`.
pub fn parse_window(text: &str) -> Option<i64> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    number.parse::<i64>().ok()?.checked_mul(unit)
}

/// A window in its largest whole unit: the count, and the unit as the rules file writes it
/// (`d`, `h`, `m` or `s`).
pub fn window_unit(secs: i64) -> (i64, &'static str) {
    [(86_400, "d"), (3600, "h"), (60, "m")]
        .into_iter()
        .find(|(unit, _)| secs % unit == 0)
        .map_or((secs, "s"), |(unit, name)| (secs / unit, name))
}

/// A window as the rules file writes it: in its largest whole unit.
pub fn window_text(secs: i64) -> String {
    let (count, unit) = window_unit(secs);
    format!("{count}{unit}")
}

/// Longest window a rule may have: thirty days.
const MAX_WINDOW_SECS: i64 = 30 * 86_400;

pub fn validate(input: &RuleInput) -> Result<ValidRule, Box<FieldErrors>> {
    let mut errors = FieldErrors::default();
    let name = input.name.trim();
    let name_ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !name_ok {
        errors.name = Some(
            "1-64 lower-case letters, digits, dashes or underscores, starting with a letter or digit"
                .into(),
        );
    }
    let scope = Scope::from_str(input.scope.trim()).map_err(|e| errors.scope = Some(e));
    let signal_text = input.signal.trim();
    let signal = if signal_text.is_empty() {
        Ok(Signal::Invites)
    } else {
        Signal::from_str(signal_text).map_err(|e| errors.signal = Some(e))
    };
    let algorithm =
        Algorithm::from_str(input.algorithm.trim()).map_err(|e| errors.algorithm = Some(e));
    // A limit of 0 (any occurrence is over) suits every algorithm but the token bucket.
    let max = match &signal {
        Ok(s) if s.is_distinct() => MAX_DISTINCT_LIMIT,
        _ => MAX_LIMIT,
    };
    let min = match (&signal, &algorithm) {
        (Ok(s), Ok(Algorithm::TokenBucket { .. })) if !s.is_distinct() => 1,
        _ => 0,
    };
    let limit = match input.limit.trim().parse::<i64>() {
        Ok(n) if (min as i64..=max as i64).contains(&n) => Some(n),
        _ => {
            errors.limit = Some(format!("a whole number from {min} to {max}"));
            None
        }
    };
    let window = match parse_window(&input.window) {
        Some(n) if (1..=MAX_WINDOW_SECS).contains(&n) => Some(n),
        _ => {
            errors.window =
                Some("from 1 second to 30 days: seconds, or a number with s, m, h or d".into());
            None
        }
    };
    let mut action =
        Action::from_str(input.action.trim()).map_err(|e| errors.rule_action = Some(e));
    // Bounces and complaints of a recipient, a domain, an address or everyone can be run up by
    // a third party (a mailbox that refuses, reports through its own links); flagging on them
    // would ban whoever sends there next. Only a sender's own outcomes may flag it.
    if let (Ok(scope), Ok(signal), Ok(a)) = (&scope, &signal, &action)
        && signal.is_outcome()
        && a.flags()
        && *scope != Scope::Sender
    {
        errors.rule_action = Some(format!(
            "bounces and complaints counted by {} can be run up by others: only a sender's own \
             may shadow-ban or hold; choose suppress, reject or monitor",
            scope.as_str()
        ));
        action = Err(());
    }
    let mut signal = signal;
    if let (Ok(scope), Ok(s)) = (&scope, &signal) {
        // One sender is one distinct sender; outcomes arrive without their invite's text.
        let refused = match (scope, s) {
            (Scope::Sender, Signal::DistinctSenders) => Some(
                "a sender is always one distinct sender: count distinct senders of a \
                      recipient, a text, a linked domain, an address or everyone",
            ),
            (Scope::Fingerprint | Scope::LinkDomain, s) if s.is_outcome() => Some(
                "bounces and complaints are counted by sender, address or recipient, not by text",
            ),
            _ => None,
        };
        if let Some(reason) = refused {
            errors.signal = Some(reason.into());
            signal = Err(());
        }
    }
    match (scope, signal, limit, window, algorithm, action) {
        (Ok(scope), Ok(signal), Some(limit), Some(window), Ok(algorithm), Ok(action))
            if name_ok =>
        {
            Ok(ValidRule {
                name: name.to_owned(),
                scope,
                signal,
                algorithm,
                quota: quota_for(signal, limit as u64, window as u64, algorithm, action),
                action,
                new_senders_only: input.new_senders_only,
                enabled: input.enabled,
            })
        }
        _ => Err(Box::new(errors)),
    }
}

/// The algorithm a rule is written with in a rules file: the family, and the edge apart.
pub fn algorithm_parts(algorithm: Algorithm) -> (&'static str, Option<&'static str>) {
    match algorithm {
        Algorithm::HashCounters(EdgeMode::Harsh) => ("hash_counters", Some("harsh")),
        Algorithm::HashCounters(EdgeMode::Lenient) => ("hash_counters", Some("lenient")),
        Algorithm::HashCounters(EdgeMode::Weighted) => ("hash_counters", Some("weighted")),
        Algorithm::FixedWindow => ("fixed_window", None),
        Algorithm::SlidingWindow => ("sliding_window", None),
        Algorithm::TokenBucket { strict: false } => ("token_bucket", None),
        Algorithm::TokenBucket { strict: true } => ("token_bucket:strict", None),
        Algorithm::SlidingLog => ("sliding_log", None),
        Algorithm::Distinct => ("distinct", None),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("a rule named `{0}` already exists")]
    NameTaken(String),
    #[error("the Redis keys of `{name}` would be those of rule `{other}`: give it another name")]
    SharedKeys { name: String, other: String },
    #[error("someone changed this rule since you loaded the page; reload it and edit again")]
    Stale,
    #[error("no such rule")]
    NotFound,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// The audit entry of a rule saved by `actor`, with the rule as saved.
pub(super) async fn audit_rule(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    actor: &str,
    action: &str,
    id: i64,
    rule: &ValidRule,
    note: Option<&str>,
) -> Result<(), sqlx::Error> {
    let entry = Entry {
        rule_id: Some(id),
        detail: detail(rule),
        note,
        ..Entry::new(actor, action)
    };
    audit::write(&mut **tx, entry).await
}

fn detail(rule: &ValidRule) -> serde_json::Value {
    json!({
        "name": rule.name,
        "scope": rule.scope.as_str(),
        "signal": rule.signal.as_str(),
        "limit": rule.quota.limit,
        "window_secs": rule.quota.window_ms / 1000,
        "algorithm": rule.algorithm.to_string(),
        "action": rule.action.as_str(),
        "new_senders_only": rule.new_senders_only,
        "enabled": rule.enabled,
    })
}

pub async fn create(
    pool: &PgPool,
    rule: &ValidRule,
    actor: &str,
    note: Option<&str>,
) -> Result<i64, SaveError> {
    let mut tx = pool.begin().await?;
    let id = insert(&mut tx, rule).await?;
    audit_rule(&mut tx, actor, "rule_create", id, rule, note).await?;
    tx.commit().await?;
    Ok(id)
}

/// Refuses a rule whose counters would share Redis keys with another rule of its scope: a key
/// ends in a code of its rule's name, algorithm and window ([`rule_code`]), and two rules' codes
/// can collide, however rarely. `except` is the rule being edited.
async fn refuse_shared_keys(
    conn: &mut PgConnection,
    name: &str,
    rule: &ValidRule,
    except: Option<i64>,
) -> Result<(), SaveError> {
    let code = rule_code(name, &rule.quota);
    let rows: Vec<RuleRow> = sqlx::query_as(&format!("{SELECT_RULES} WHERE scope = $1"))
        .bind(rule.scope.as_str())
        .fetch_all(&mut *conn)
        .await?;
    // A row that does not read as a rule is refused where the rules are loaded, not here.
    let other = rows
        .into_iter()
        .filter_map(|row| Rule::try_from(row).ok())
        .find(|r| Some(r.id) != except && r.name != name && rule_code(&r.name, &r.quota) == code);
    match other {
        Some(other) => Err(SaveError::SharedKeys {
            name: name.to_owned(),
            other: other.name,
        }),
        None => Ok(()),
    }
}

/// Inserts a new rule; its id.
pub(super) async fn insert(conn: &mut PgConnection, rule: &ValidRule) -> Result<i64, SaveError> {
    refuse_shared_keys(conn, &rule.name, rule, None).await?;
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO rules (name, scope, signal, limit_count, window_secs, algorithm, action,
             new_senders_only, enabled)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING RETURNING id",
    )
    .bind(&rule.name)
    .bind(rule.scope.as_str())
    .bind(rule.signal.as_str())
    .bind(rule.quota.limit as i64)
    .bind((rule.quota.window_ms / 1000) as i64)
    .bind(rule.algorithm.to_string())
    .bind(rule.action.as_str())
    .bind(rule.new_senders_only)
    .bind(rule.enabled)
    .fetch_optional(&mut *conn)
    .await?;
    id.ok_or_else(|| SaveError::NameTaken(rule.name.clone()))
}

/// Saves an edit made on version `seen_version` of rule `id`. The name stays.
pub async fn update(
    pool: &PgPool,
    id: i64,
    seen_version: i64,
    rule: &ValidRule,
    actor: &str,
    note: Option<&str>,
) -> Result<(), SaveError> {
    let mut tx = pool.begin().await?;
    let current: Option<(i64, String)> =
        sqlx::query_as("SELECT version, name FROM rules WHERE id = $1 FOR UPDATE")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let (version, name) = current.ok_or(SaveError::NotFound)?;
    if version != seen_version {
        return Err(SaveError::Stale);
    }
    overwrite(&mut tx, id, rule).await?;
    let mut saved = rule.clone();
    saved.name = name;
    audit_rule(&mut tx, actor, "rule_update", id, &saved, note).await?;
    tx.commit().await?;
    Ok(())
}

/// Writes every setting of rule `id` but its name.
pub(super) async fn overwrite(
    conn: &mut PgConnection,
    id: i64,
    rule: &ValidRule,
) -> Result<(), SaveError> {
    let name: Option<String> = sqlx::query_scalar("SELECT name FROM rules WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    refuse_shared_keys(conn, &name.ok_or(SaveError::NotFound)?, rule, Some(id)).await?;
    sqlx::query(
        "UPDATE rules SET scope = $2, signal = $3, limit_count = $4, window_secs = $5,
             algorithm = $6, action = $7, new_senders_only = $8, enabled = $9,
             version = version + 1, updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(rule.scope.as_str())
    .bind(rule.signal.as_str())
    .bind(rule.quota.limit as i64)
    .bind((rule.quota.window_ms / 1000) as i64)
    .bind(rule.algorithm.to_string())
    .bind(rule.action.as_str())
    .bind(rule.new_senders_only)
    .bind(rule.enabled)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
