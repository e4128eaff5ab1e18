//! API keys: random, shown once, stored as a SHA-256 hash.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use crate::audit::{self, Entry};
use crate::cache::TtlCache;
use crate::tokens::{hash, random_hex};

/// Prefix of every key, so a leaked one is easy to recognise in logs and scanners.
const KEY_PREFIX: &str = "sg_";

/// Whether `key` has the shape of a key this service issues (the prefix and 64 lower-case hex
/// digits). Anything else is refused without a database query.
pub fn well_formed(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX).is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("key names are 1-64 letters, digits, dots, dashes or underscores")]
    Name,
    #[error(
        "the name `{0}` is taken by another API key (revoked keys keep theirs); choose another"
    )]
    Taken(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// A name a key may have: what logs and the audit log can show as it is.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Creates a key named `name` for app `app_id` on behalf of `actor` and returns it; only its
/// hash is stored.
pub async fn create(
    pool: &PgPool,
    name: &str,
    app_id: i64,
    actor: &str,
) -> Result<String, KeyError> {
    if !valid_name(name) {
        return Err(KeyError::Name);
    }
    let key = format!("{KEY_PREFIX}{}", random_hex());
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO api_keys (name, key_hash, app_id) VALUES ($1, $2, $3)")
        .bind(name)
        .bind(hash(&key))
        .bind(app_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| match e.as_database_error() {
            Some(d) if d.is_unique_violation() => KeyError::Taken(name.to_owned()),
            _ => KeyError::Db(e),
        })?;
    let entry = Entry {
        detail: json!({"name": name, "app_id": app_id}),
        ..Entry::new(actor, "api_key_create")
    };
    audit::write(&mut *tx, entry).await?;
    tx.commit().await?;
    Ok(key)
}

/// Live keys as this instance last read them, by hash: a revocation empties it on every instance
/// (a trigger announces it), and a copy lives a minute at most.
#[derive(Clone)]
pub struct ApiKeyCache(TtlCache<Vec<u8>, (i64, i64)>);

impl Default for ApiKeyCache {
    fn default() -> Self {
        ApiKeyCache(TtlCache::new(Duration::from_secs(60), 10_000))
    }
}

impl ApiKeyCache {
    pub fn clear(&self) {
        self.0.clear();
    }

    /// The id and app of a live key this instance has seen lately.
    pub fn cached(&self, key: &str) -> Option<(i64, i64)> {
        self.0.get(&hash(key)).ok()
    }
}

/// The id and app of the live key `key`, if any. The lookup is by hash, so comparing the key itself
/// takes no time that depends on how much of it matched. Unknown keys are not cached: they are
/// asked of the database each time.
pub async fn verify(
    pool: &PgPool,
    cache: &ApiKeyCache,
    key: &str,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let hashed = hash(key);
    let ticket = match cache.0.get(&hashed) {
        Ok(id) => return Ok(Some(id)),
        Err(ticket) => ticket,
    };
    let id: Option<(i64, i64)> = sqlx::query_as(
        "SELECT id, app_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
    )
    .bind(&hashed)
    .fetch_optional(pool)
    .await?;
    if let Some(id) = id {
        cache.0.store(ticket, hashed, id);
    }
    Ok(id)
}

/// Revokes the key named `name` on behalf of `actor`; false when there is no live key of that
/// name.
pub async fn revoke(pool: &PgPool, name: &str, actor: &str) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let revoked = sqlx::query(
        "UPDATE api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL",
    )
    .bind(name)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if revoked {
        let entry = Entry {
            detail: json!({"name": name}),
            ..Entry::new(actor, "api_key_revoke")
        };
        audit::write(&mut *tx, entry).await?;
    }
    tx.commit().await?;
    Ok(revoked)
}

/// A key as listed: never the key itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyInfo {
    pub name: String,
    pub app: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<KeyInfo>, sqlx::Error> {
    sqlx::query_as(
        "SELECT k.name, a.name AS app, k.created_at, k.revoked_at
         FROM api_keys k JOIN apps a ON a.id = k.app_id ORDER BY k.created_at",
    )
    .fetch_all(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::well_formed;

    #[test]
    fn only_issued_shapes_are_well_formed() {
        assert!(well_formed(&format!("sg_{}", "0a".repeat(32))));
        for bad in [
            "guess",
            "sg_",
            &format!("sg_{}", "0A".repeat(32)),
            &format!("sg_{}", "0a".repeat(33)),
            &format!("xx_{}", "0a".repeat(32)),
        ] {
            assert!(!well_formed(bad), "{bad}");
        }
    }
}
