//! Creating and editing rules from the dashboard: validation with an error per field, saves
//! that refuse a rule changed since the form was loaded, an audit entry each, and a backtest
//! of a proposed rule on the last 24 hours of recorded invites.

use std::collections::HashSet;
use std::str::FromStr;

use serde_json::json;
use sqlx::PgPool;

use super::{Action, Scope, Subjects};
use crate::audit::{self, Entry};
use crate::limiter::{Algorithm, Check, KeyPrefix, MAX_LIMIT, MemoryStore, Quota};

/// A rule as typed into the form.
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    pub name: String,
    pub scope: String,
    pub limit: String,
    pub window: String,
    pub algorithm: String,
    pub action: String,
    pub enabled: bool,
}

/// What is wrong with each field, if anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    pub name: Option<String>,
    pub scope: Option<String>,
    pub limit: Option<String>,
    pub window: Option<String>,
    pub algorithm: Option<String>,
    pub rule_action: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidRule {
    pub name: String,
    pub scope: Scope,
    pub quota: Quota,
    pub action: Action,
    pub enabled: bool,
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
    let limit = match input.limit.trim().parse::<i64>() {
        Ok(n) if (1..=MAX_LIMIT as i64).contains(&n) => Some(n),
        _ => {
            errors.limit = Some(format!("a whole number from 1 to {MAX_LIMIT}"));
            None
        }
    };
    let window = match input.window.trim().parse::<i64>() {
        Ok(n) if (1..=MAX_WINDOW_SECS).contains(&n) => Some(n),
        _ => {
            errors.window = Some(format!(
                "a whole number of seconds from 1 to {MAX_WINDOW_SECS}"
            ));
            None
        }
    };
    let algorithm =
        Algorithm::from_str(input.algorithm.trim()).map_err(|e| errors.algorithm = Some(e));
    let action = Action::from_str(input.action.trim()).map_err(|e| errors.rule_action = Some(e));
    match (scope, limit, window, algorithm, action) {
        (Ok(scope), Some(limit), Some(window), Ok(algorithm), Ok(action)) if name_ok => {
            let mut quota = Quota::new(limit as u64, window as u64, algorithm);
            quota.count_over_limit = action.counts_over_limit();
            Ok(ValidRule {
                name: name.to_owned(),
                scope,
                quota,
                action,
                enabled: input.enabled,
            })
        }
        _ => Err(Box::new(errors)),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("a rule named `{0}` already exists")]
    NameTaken(String),
    #[error("someone changed this rule since you loaded the page; reload it and edit again")]
    Stale,
    #[error("no such rule")]
    NotFound,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// The audit entry of a rule saved by `actor`, with the rule as saved.
async fn audit_rule(
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
        "limit": rule.quota.limit,
        "window_secs": rule.quota.window_ms / 1000,
        "algorithm": rule.quota.algorithm.to_string(),
        "action": rule.action.as_str(),
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
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO rules (name, scope, limit_count, window_secs, algorithm, action, enabled)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING RETURNING id",
    )
    .bind(&rule.name)
    .bind(rule.scope.as_str())
    .bind(rule.quota.limit as i64)
    .bind((rule.quota.window_ms / 1000) as i64)
    .bind(rule.quota.algorithm.to_string())
    .bind(rule.action.as_str())
    .bind(rule.enabled)
    .fetch_optional(&mut *tx)
    .await?;
    let id = id.ok_or_else(|| SaveError::NameTaken(rule.name.clone()))?;
    audit_rule(&mut tx, actor, "rule_create", id, rule, note).await?;
    tx.commit().await?;
    Ok(id)
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
    sqlx::query(
        "UPDATE rules SET scope = $2, limit_count = $3, window_secs = $4, algorithm = $5,
             action = $6, enabled = $7, version = version + 1, updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(rule.scope.as_str())
    .bind(rule.quota.limit as i64)
    .bind((rule.quota.window_ms / 1000) as i64)
    .bind(rule.quota.algorithm.to_string())
    .bind(rule.action.as_str())
    .bind(rule.enabled)
    .execute(&mut *tx)
    .await?;
    let mut saved = rule.clone();
    saved.name = name;
    audit_rule(&mut tx, actor, "rule_update", id, &saved, note).await?;
    tx.commit().await?;
    Ok(())
}

/// The result of replaying recorded invites through a proposed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backtest {
    pub invites: usize,
    /// Subjects (senders, addresses, …) that would have gone over the limit at least once.
    pub tripped: usize,
    /// Invites that would have been over the limit.
    pub over: usize,
    pub truncated: bool,
}

/// Invites replayed at most, newest first: a bound on the page's cost.
const BACKTEST_MAX: i64 = 200_000;

/// A recorded invite as a backtest replays it.
#[derive(sqlx::FromRow)]
struct Replayed {
    sender_id: String,
    sender_ip: Option<String>,
    recipient: String,
    recipient_domain: String,
    created_at: chrono::DateTime<chrono::Utc>,
}

/// The last 24 hours of invites that a backtest replays, newest first.
pub const BACKTEST_INVITES: &str =
    "SELECT sender_id, sender_ip, recipient, recipient_domain, created_at FROM invites
         WHERE created_at > now() - interval '24 hours'
         ORDER BY created_at DESC LIMIT $1";

/// Replays the last 24 hours of recorded invites, with their own timestamps, through `rule` in
/// the in-process limiter.
pub async fn backtest(pool: &PgPool, rule: &ValidRule) -> Result<Backtest, sqlx::Error> {
    let mut rows: Vec<Replayed> = sqlx::query_as(BACKTEST_INVITES)
        .bind(BACKTEST_MAX + 1)
        .fetch_all(pool)
        .await?;
    let truncated = rows.len() as i64 > BACKTEST_MAX;
    rows.truncate(BACKTEST_MAX as usize);
    rows.reverse();
    let store = MemoryStore::new();
    let keys = KeyPrefix::default();
    let mut tripped = HashSet::new();
    let mut over = 0;
    for row in &rows {
        let of = Subjects {
            sender_id: &row.sender_id,
            sender_ip: row.sender_ip.as_deref(),
            recipient: &row.recipient,
            recipient_domain: &row.recipient_domain,
        };
        let Some(subject) = rule.scope.subject(&of) else {
            continue;
        };
        let key = keys.key(&subject, &rule.name, &rule.quota);
        let check = Check::new(&key, &rule.quota, 1);
        let at_ms = row.created_at.timestamp_millis().max(0) as u64;
        let decision = store.check_batch(&[check], Some(at_ms));
        if decision.iter().any(|d| !d.allowed) {
            over += 1;
            tripped.insert(subject);
        }
    }
    Ok(Backtest {
        invites: rows.len(),
        tripped: tripped.len(),
        over,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> RuleInput {
        RuleInput {
            name: "sender-burst".into(),
            scope: "sender".into(),
            limit: "5".into(),
            window: "60".into(),
            algorithm: "hash_counters".into(),
            action: "shadow_ban".into(),
            enabled: true,
        }
    }

    #[test]
    fn a_good_rule_validates() {
        let rule = validate(&input()).expect("valid");
        assert_eq!(rule.quota.limit, 5);
        assert!(
            rule.quota.count_over_limit,
            "shadow-ban rules count past the limit"
        );
    }

    #[test]
    fn each_bad_field_gets_its_own_error() {
        let mut bad = input();
        bad.name = "Bad Name".into();
        bad.limit = "0".into();
        bad.window = "ten".into();
        bad.algorithm = "magic".into();
        let errors = validate(&bad).expect_err("invalid");
        assert!(errors.name.is_some());
        assert!(errors.limit.is_some());
        assert!(errors.window.is_some());
        assert!(errors.algorithm.is_some());
        assert!(errors.scope.is_none() && errors.rule_action.is_none());
    }
}
