//! Rules: named thresholds read from Postgres into an in-memory cache that every instance
//! reloads when the table changes (LISTEN/NOTIFY, with a one-second poll as a safety net).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;

use crate::limiter::{Algorithm, Quota};

pub mod edit;

/// What a rule counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Sender,
    Ip,
    Recipient,
    RecipientDomain,
    Global,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Sender,
        Scope::Ip,
        Scope::Recipient,
        Scope::RecipientDomain,
        Scope::Global,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Sender => "sender",
            Scope::Ip => "ip",
            Scope::Recipient => "recipient",
            Scope::RecipientDomain => "recipient_domain",
            Scope::Global => "global",
        }
    }
}

/// What an invite can be counted by.
pub struct Subjects<'a> {
    pub sender_id: &'a str,
    pub sender_ip: Option<&'a str>,
    pub recipient: &'a str,
    pub recipient_domain: &'a str,
}

impl Scope {
    /// The subject a rule of this scope counts an invite under, if the rule applies to it.
    pub fn subject(self, of: &Subjects<'_>) -> Option<String> {
        match self {
            Scope::Sender => Some(format!("sender:{}", of.sender_id)),
            Scope::Ip => of.sender_ip.map(|ip| format!("ip:{ip}")),
            Scope::Recipient => Some(format!("recipient:{}", of.recipient)),
            Scope::RecipientDomain => Some(format!("domain:{}", of.recipient_domain)),
            Scope::Global => Some("global".to_owned()),
        }
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::names::parse(&Scope::ALL, Scope::as_str, s, "scope")
    }
}

/// What happens when a rule is exceeded, weakest first: the strongest breached action wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    Monitor,
    Suppress,
    Reject,
    ShadowBan,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Monitor,
        Action::Suppress,
        Action::Reject,
        Action::ShadowBan,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Monitor => "monitor",
            Action::Suppress => "suppress",
            Action::Reject => "reject",
            Action::ShadowBan => "shadow_ban",
        }
    }

    /// Shadow-ban and monitor rules keep counting past the limit: a spammer who keeps going
    /// stays over, and a monitor shows the true volume.
    pub fn counts_over_limit(self) -> bool {
        matches!(self, Action::ShadowBan | Action::Monitor)
    }
}

impl FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::names::parse(&Action::ALL, Action::as_str, s, "action")
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub scope: Scope,
    pub quota: Quota,
    pub action: Action,
    pub enabled: bool,
    pub version: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("rule {name}: {reason}")]
    Invalid { name: String, reason: String },
}

/// A rule as stored.
#[derive(sqlx::FromRow)]
struct RuleRow {
    id: i64,
    name: String,
    scope: String,
    limit_count: i64,
    window_secs: i64,
    algorithm: String,
    action: String,
    enabled: bool,
    version: i64,
}

impl TryFrom<RuleRow> for Rule {
    type Error = RuleError;

    fn try_from(row: RuleRow) -> Result<Rule, RuleError> {
        let invalid = |reason: String| RuleError::Invalid {
            name: row.name.clone(),
            reason,
        };
        let algorithm = Algorithm::from_str(&row.algorithm).map_err(invalid)?;
        let action = Action::from_str(&row.action).map_err(invalid)?;
        let scope = Scope::from_str(&row.scope).map_err(invalid)?;
        let mut quota = Quota::new(row.limit_count as u64, row.window_secs as u64, algorithm);
        quota.count_over_limit = action.counts_over_limit();
        quota.validate().map_err(|e| invalid(e.to_string()))?;
        Ok(Rule {
            id: row.id,
            name: row.name,
            scope,
            quota,
            action,
            enabled: row.enabled,
            version: row.version,
        })
    }
}

const SELECT_RULES: &str =
    "SELECT id, name, scope, limit_count, window_secs, algorithm, action, enabled, version
     FROM rules";

/// Every rule, by name.
pub async fn load_all(pool: &PgPool) -> Result<Vec<Rule>, RuleError> {
    let rows: Vec<RuleRow> = sqlx::query_as(&format!("{SELECT_RULES} ORDER BY name"))
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(Rule::try_from).collect()
}

/// One rule by id.
pub async fn find(pool: &PgPool, id: i64) -> Result<Option<Rule>, RuleError> {
    let row: Option<RuleRow> = sqlx::query_as(&format!("{SELECT_RULES} WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.map(Rule::try_from).transpose()
}

/// The rules in force in this process.
#[derive(Clone)]
pub struct RuleCache {
    rules: Arc<ArcSwap<Vec<Rule>>>,
}

impl RuleCache {
    pub async fn load(pool: &PgPool) -> Result<Self, RuleError> {
        Ok(RuleCache {
            rules: Arc::new(ArcSwap::from_pointee(load_all(pool).await?)),
        })
    }

    /// Every rule, enabled or not.
    pub fn all(&self) -> Vec<Rule> {
        self.rules.load().to_vec()
    }

    /// The enabled rules.
    pub fn enabled(&self) -> Vec<Rule> {
        self.rules
            .load()
            .iter()
            .filter(|r| r.enabled)
            .cloned()
            .collect()
    }

    /// Reads the table again (on a notification, and every second: see [`crate::changes`]).
    pub async fn reload(&self, pool: &PgPool) {
        match load_all(pool).await {
            Ok(rules) => {
                if **self.rules.load() != rules {
                    tracing::info!(rules = rules.len(), "rules reloaded");
                    self.rules.store(Arc::new(rules));
                }
            }
            Err(e) => tracing::warn!(error = %e, "reloading rules failed; keeping the last ones"),
        }
    }
}
