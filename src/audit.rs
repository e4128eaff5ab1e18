//! The audit log: who did what to whom and when. Moderation, rule edits and the dashboard write
//! to it; the dashboard reads it back page by page.

use serde_json::Value;
use sqlx::{PgExecutor, PgPool};

use crate::sender_key::SenderKey;

/// The actor of automatic decisions.
pub const SYSTEM: &str = "system";

/// One line of the audit log, as written.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// `system`, an admin's name, or the operator of a command.
    pub actor: &'a str,
    pub action: &'a str,
    /// The admin the entry is about or by, when there is one.
    pub admin_id: Option<i64>,
    pub sender: Option<&'a SenderKey>,
    pub rule_id: Option<i64>,
    pub detail: Value,
    pub note: Option<&'a str>,
}

impl<'a> Entry<'a> {
    /// An entry with nothing but who and what.
    pub fn new(actor: &'a str, action: &'a str) -> Self {
        Entry {
            actor,
            action,
            admin_id: None,
            sender: None,
            rule_id: None,
            detail: Value::Object(Default::default()),
            note: None,
        }
    }
}

/// Writes one entry, in the caller's transaction or on its own.
pub async fn write<'e>(db: impl PgExecutor<'e>, entry: Entry<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO audit_log (actor, action, admin_id, app_id, sender_id, rule_id, detail,
             note)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(entry.actor)
    .bind(entry.action)
    .bind(entry.admin_id)
    .bind(entry.sender.map(|s| s.app_id))
    .bind(entry.sender.map(|s| s.id.as_str()))
    .bind(entry.rule_id)
    .bind(entry.detail)
    .bind(entry.note)
    .execute(db)
    .await?;
    Ok(())
}

/// Who runs a command-line change, for the audit log: `SENDGUARD_OPERATOR`, else the login
/// name, else the host user; never a placeholder that names no one.
pub fn operator() -> String {
    ["SENDGUARD_OPERATOR", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .or_else(host_user)
        .unwrap_or_else(|| "unknown user".to_owned())
}

/// The user this process runs as: their name in /etc/passwd, else `uid N` (a container's
/// user often has no entry).
#[cfg(unix)]
fn host_user() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    let uid = std::fs::metadata("/proc/self").ok()?.uid().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)? == uid).then(|| name.to_owned())
    });
    Some(name.unwrap_or_else(|| format!("uid {uid}")))
}

#[cfg(not(unix))]
fn host_user() -> Option<String> {
    None
}

/// One line of the audit log, as read.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Recorded {
    pub at: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub action: String,
    /// The app of the sender the entry is about.
    pub app: Option<String>,
    pub sender_id: Option<String>,
    pub detail: Value,
    pub note: Option<String>,
}

/// The audit log, newest first, optionally of one admin (`$1`), one sender id (`$2`) and one
/// app (`$3`).
pub const PAGE: &str = "SELECT l.at, l.actor, l.action, a.name AS app, l.sender_id, l.detail,
         l.note
     FROM audit_log l LEFT JOIN apps a ON a.id = l.app_id
     WHERE ($1 = '' OR l.actor = $1) AND ($2 = '' OR l.sender_id = $2)
       AND ($3::bigint IS NULL OR l.app_id = $3)
     ORDER BY l.at DESC, l.id DESC LIMIT $4 OFFSET $5";

/// A sender's history, newest first.
pub const OF_SENDER: &str = "SELECT l.at, l.actor, l.action, a.name AS app, l.sender_id,
         l.detail, l.note
     FROM audit_log l LEFT JOIN apps a ON a.id = l.app_id
     WHERE l.sender_id = $2 AND l.app_id = $1 ORDER BY l.at DESC, l.id DESC LIMIT 100";

/// Which entries a page shows; an empty filter matches every entry.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    pub actor: &'a str,
    pub sender_id: &'a str,
    pub app_id: Option<i64>,
}

/// `limit` entries matching `filter`, after skipping `offset`.
pub async fn page(
    pool: &PgPool,
    filter: Filter<'_>,
    limit: i64,
    offset: i64,
) -> Result<Vec<Recorded>, sqlx::Error> {
    sqlx::query_as(PAGE)
        .bind(filter.actor)
        .bind(filter.sender_id)
        .bind(filter.app_id)
        .bind(limit)
        .bind(offset)
        .fetch_all(pool)
        .await
}

/// The last hundred entries about one sender.
pub async fn of_sender(pool: &PgPool, sender: &SenderKey) -> Result<Vec<Recorded>, sqlx::Error> {
    sqlx::query_as(OF_SENDER)
        .bind(sender.app_id)
        .bind(&sender.id)
        .fetch_all(pool)
        .await
}
