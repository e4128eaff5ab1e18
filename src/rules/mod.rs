//! Rules: named thresholds read from Postgres into an in-memory cache that every instance
//! reloads when the table changes (LISTEN/NOTIFY, with a one-second poll as a safety net).

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;

use crate::http;
use crate::limiter::{Algorithm, Quota};
use crate::sender_key::SenderKey;

pub mod advisor;
pub mod backtest;
pub mod contribution;
pub mod edit;
pub mod file;
pub mod simulate;

/// What the enabled `rules` count of an invite's payload.
pub fn wanted(rules: &[Arc<Rule>]) -> crate::campaigns::Wanted {
    crate::campaigns::Wanted {
        fingerprint_window_secs: rules
            .iter()
            .filter(|r| r.scope == Scope::Fingerprint)
            .map(|r| r.quota.window_ms / 1000)
            .max(),
        link_domains: rules.iter().any(|r| r.scope == Scope::LinkDomain),
    }
}

/// What a rule counts by.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_scope)]
pub enum Scope {
    Sender,
    Ip,
    Recipient,
    RecipientDomain,
    Global,
    /// The near-duplicate group of the invite's text (docs/DESIGN.md §3d).
    Fingerprint,
    /// Each registrable domain the invite's text links to.
    LinkDomain,
}

impl Scope {
    /// Whom a rule of this scope counts for, in a moderator's words.
    pub fn words(self) -> &'static str {
        match self {
            Scope::Sender => "per sender",
            Scope::Ip => "per sender address (IPv6: /64), per app",
            Scope::Recipient => "per recipient",
            Scope::RecipientDomain => "per recipient domain",
            Scope::Global => "all traffic together",
            Scope::Fingerprint => "per text (near-duplicates together)",
            Scope::LinkDomain => "per domain linked in the text",
        }
    }

    /// Counts what many senders share with a payload: a campaign (docs/DESIGN.md §3d).
    pub fn is_campaign(self) -> bool {
        matches!(self, Scope::Fingerprint | Scope::LinkDomain)
    }

    /// Whether other senders can share this scope's counters (a lift must not clear them).
    pub fn is_shared(self) -> bool {
        !matches!(self, Scope::Sender)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

fn unknown_scope(s: &str) -> String {
    crate::names::unknown::<Scope>("scope", s)
}

/// What an invite can be counted by.
pub struct Subjects<'a> {
    pub sender: &'a SenderKey,
    /// The address the app asserts for its sender.
    pub sender_ip: Option<IpAddr>,
    pub recipient: &'a str,
    pub recipient_domain: &'a str,
    /// The campaign subjects of the invite's text: its fingerprint group and its link domains
    /// ([`crate::campaigns::Payload`]); none where no campaign rule is enabled.
    pub campaign: &'a [String],
}

impl Scope {
    /// The subjects a rule of this scope counts an invite under: `kind:value`, or the kind
    /// alone for the one global count. One, but for a text's link domains (any number) and the
    /// scopes that do not apply (an `ip` rule on an invite without an address, a fingerprint
    /// of a text too short to have one).
    pub fn subjects(self, of: &Subjects<'_>) -> Vec<String> {
        match self {
            Scope::Fingerprint | Scope::LinkDomain => {
                let kind = self.subject_kind();
                of.campaign
                    .iter()
                    .filter(|s| s.split_once(':').is_some_and(|(k, _)| k == kind))
                    .cloned()
                    .collect()
            }
            _ => self.subject(of).into_iter().collect(),
        }
    }

    /// The one subject a rule of a scope without campaign subjects counts an invite under.
    pub fn subject(self, of: &Subjects<'_>) -> Option<String> {
        match self {
            Scope::Sender => Some(sender_subject(of.sender)),
            Scope::Ip => of.sender_ip.map(|ip| address_subject(of.sender.app_id, ip)),
            Scope::Recipient => Some(self.subject_of(of.recipient)),
            Scope::RecipientDomain => Some(self.subject_of(of.recipient_domain)),
            Scope::Global => Some(self.subject_kind().to_owned()),
            Scope::Fingerprint | Scope::LinkDomain => None,
        }
    }

    /// The subject of one value of this scope, `kind:value` (the global count has no value).
    pub fn subject_of(self, value: &str) -> String {
        format!("{}:{value}", self.subject_kind())
    }

    /// A glob of every subject of this scope (for `SCAN MATCH`).
    pub fn any_subject(self) -> String {
        match self {
            Scope::Global => self.subject_kind().to_owned(),
            _ => self.subject_of("*"),
        }
    }

    fn subject_kind(self) -> &'static str {
        match self {
            Scope::Sender => "sender",
            Scope::Ip => "ip",
            Scope::Recipient => "recipient",
            Scope::RecipientDomain => "domain",
            Scope::Global => "global",
            Scope::Fingerprint => crate::campaigns::FINGERPRINT,
            Scope::LinkDomain => crate::campaigns::LINK_DOMAIN,
        }
    }
}

/// The subject of an address for `ip` rules of app `app_id`. The app asserts the address, so
/// each app's traffic counts apart; an IPv6 address counts by its /64 (`http::group`).
fn address_subject(app_id: i64, ip: IpAddr) -> String {
    Scope::Ip.subject_of(&format!("{app_id}:{}", http::group(ip)))
}

/// The subject of a sender's counters: the app is part of it, so two apps' senders of the
/// same id never share a count (and the hash tag keeps one sender's keys in one slot).
pub fn sender_subject(sender: &SenderKey) -> String {
    format!("{}:{sender}", Scope::Sender.subject_kind())
}

/// What happens when a rule is exceeded, weakest first: the strongest breached action wins
/// (docs/DESIGN.md §2: shadow_ban > reject > hold > suppress > monitor).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
    strum::Display,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_action)]
pub enum Action {
    Monitor,
    Suppress,
    /// Hold this one invite for review and flag the sender, whose state does not change.
    Hold,
    Reject,
    ShadowBan,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Shadow-ban, hold and monitor rules keep counting past the limit: a spammer who keeps
    /// going stays over, and a monitor shows the true volume.
    pub fn counts_over_limit(self) -> bool {
        matches!(self, Action::ShadowBan | Action::Hold | Action::Monitor)
    }

    /// Whether a breach flags the sender for review.
    pub fn flags(self) -> bool {
        matches!(self, Action::ShadowBan | Action::Hold)
    }
}

/// What a rule counts (docs/DESIGN.md §2).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_signal)]
pub enum Signal {
    /// Each invite.
    #[default]
    Invites,
    /// Distinct recipient addresses in the window.
    DistinctRecipients,
    /// Distinct recipient domains in the window.
    DistinctDomains,
    /// Invites whose text carries a URL, a domain name or an email address.
    Links,
    /// Bounces reported later (events, permanent SMTP refusals).
    Bounces,
    /// Complaints reported later (events, the report link in the email).
    Complaints,
    /// Distinct senders in the window, for scopes many senders share.
    DistinctSenders,
}

impl Signal {
    /// What the signal counts, in a moderator's words.
    pub fn words(self) -> &'static str {
        match self {
            Signal::Invites => "invites",
            Signal::DistinctRecipients => "different recipients",
            Signal::DistinctDomains => "different recipient domains",
            Signal::Links => "invites with links",
            Signal::Bounces => "bounces",
            Signal::Complaints => "complaints",
            Signal::DistinctSenders => "different senders",
        }
    }

    /// The words of a signal stored by name (a flag's); the name itself if it is no signal.
    pub fn words_of(name: &str) -> &str {
        match name.parse::<Signal>() {
            Ok(signal) => signal.words(),
            Err(_) => name,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Counted when an outcome arrives, after the invite; an invite only reads the count.
    pub fn is_outcome(self) -> bool {
        matches!(self, Signal::Bounces | Signal::Complaints)
    }

    /// Counts distinct members rather than occurrences.
    pub fn is_distinct(self) -> bool {
        matches!(
            self,
            Signal::DistinctRecipients | Signal::DistinctDomains | Signal::DistinctSenders
        )
    }
}

fn unknown_signal(s: &str) -> String {
    crate::names::unknown::<Signal>("signal", s)
}

fn unknown_action(s: &str) -> String {
    crate::names::unknown::<Action>("action", s)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: i64,
    pub name: String,
    pub scope: Scope,
    pub signal: Signal,
    /// The algorithm the rule names (distinct signals count with their own, see `quota`).
    pub algorithm: Algorithm,
    pub quota: Quota,
    pub action: Action,
    /// Applies only to new senders (docs/DESIGN.md §2).
    pub new_senders_only: bool,
    pub enabled: bool,
    pub version: i64,
}

/// The quota a rule of `signal` with `algorithm` asks of the limiter: distinct signals count
/// with the distinct algorithm, whatever else the rule names.
pub fn quota_for(
    signal: Signal,
    limit: u64,
    window_secs: u64,
    algorithm: Algorithm,
    action: Action,
) -> Quota {
    let algorithm = if signal.is_distinct() {
        Algorithm::Distinct
    } else {
        algorithm
    };
    let mut quota = Quota::new(limit, window_secs, algorithm);
    quota.count_over_limit = action.counts_over_limit();
    // Only a rejection tells the caller when to come back.
    quota.reports_wait = action == Action::Reject;
    quota
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
    signal: String,
    new_senders_only: bool,
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
        let signal = Signal::from_str(&row.signal).map_err(invalid)?;
        let quota = quota_for(
            signal,
            row.limit_count as u64,
            row.window_secs as u64,
            algorithm,
            action,
        );
        quota.validate().map_err(|e| invalid(e.to_string()))?;
        Ok(Rule {
            id: row.id,
            name: row.name,
            scope,
            signal,
            algorithm,
            quota,
            action,
            new_senders_only: row.new_senders_only,
            enabled: row.enabled,
            version: row.version,
        })
    }
}

const SELECT_RULES: &str = "SELECT id, name, scope, limit_count, window_secs, algorithm, action,
         signal, new_senders_only, enabled, version
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

fn shared(rules: Vec<Rule>) -> Vec<Arc<Rule>> {
    rules.into_iter().map(Arc::new).collect()
}

/// The rules in force in this process.
#[derive(Clone)]
pub struct RuleCache {
    rules: Arc<ArcSwap<Vec<Arc<Rule>>>>,
}

impl RuleCache {
    pub async fn load(pool: &PgPool) -> Result<Self, RuleError> {
        Ok(RuleCache {
            rules: Arc::new(ArcSwap::from_pointee(shared(load_all(pool).await?))),
        })
    }

    /// Every rule, enabled or not.
    pub fn all(&self) -> Vec<Rule> {
        self.rules.load().iter().map(|r| Rule::clone(r)).collect()
    }

    /// The enabled rules, shared: every invite reads them, and copying each rule's strings
    /// for every invite showed in the profile.
    pub fn enabled(&self) -> Vec<Arc<Rule>> {
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
                let rules = shared(rules);
                if **self.rules.load() != rules {
                    tracing::info!(rules = rules.len(), "rules reloaded");
                    self.rules.store(Arc::new(rules));
                }
            }
            Err(e) => tracing::warn!(error = %e, "reloading rules failed; keeping the last ones"),
        }
    }
}
