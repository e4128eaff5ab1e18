//! API keys: random, shown once, stored as a SHA-256 hash.

use std::time::Duration;

use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::cache::TtlCache;

/// Prefix of every key, so a leaked one is easy to recognise in logs and scanners.
const KEY_PREFIX: &str = "sg_";

fn hash(key: &str) -> Vec<u8> {
    Sha256::digest(key.as_bytes()).to_vec()
}

/// Creates a key named `name` and returns it; only its hash is stored.
pub async fn create(pool: &PgPool, name: &str) -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let key = format!("{KEY_PREFIX}{}", hex::encode(bytes));
    sqlx::query("INSERT INTO api_keys (name, key_hash) VALUES ($1, $2)")
        .bind(name)
        .bind(hash(&key))
        .execute(pool)
        .await?;
    Ok(key)
}

/// Live keys as this instance last read them, by hash: a revocation empties it on every instance
/// (a trigger announces it), and a copy lives a minute at most.
#[derive(Clone)]
pub struct ApiKeyCache(TtlCache<Vec<u8>, i64>);

impl Default for ApiKeyCache {
    fn default() -> Self {
        ApiKeyCache(TtlCache::new(Duration::from_secs(60), 10_000))
    }
}

impl ApiKeyCache {
    pub fn clear(&self) {
        self.0.clear();
    }
}

/// The id of the live key `key`, if any. The lookup is by hash, so comparing the key itself
/// takes no time that depends on how much of it matched. Unknown keys are not cached: they are
/// asked of the database each time.
pub async fn verify(
    pool: &PgPool,
    cache: &ApiKeyCache,
    key: &str,
) -> Result<Option<i64>, sqlx::Error> {
    let hashed = hash(key);
    let ticket = match cache.0.get(&hashed) {
        Ok(id) => return Ok(Some(id)),
        Err(ticket) => ticket,
    };
    let id: Option<i64> =
        sqlx::query_scalar("SELECT id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
            .bind(&hashed)
            .fetch_optional(pool)
            .await?;
    if let Some(id) = id {
        cache.0.store(ticket, hashed, id);
    }
    Ok(id)
}

/// Revokes the key named `name`; false when there is no live key of that name.
pub async fn revoke(pool: &PgPool, name: &str) -> Result<bool, sqlx::Error> {
    let revoked = sqlx::query(
        "UPDATE api_keys SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL",
    )
    .bind(name)
    .execute(pool)
    .await?;
    Ok(revoked.rows_affected() == 1)
}

/// A key as listed: never the key itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyInfo {
    pub name: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

pub async fn list(pool: &PgPool) -> Result<Vec<KeyInfo>, sqlx::Error> {
    sqlx::query_as("SELECT name, created_at, revoked_at FROM api_keys ORDER BY created_at")
        .fetch_all(pool)
        .await
}
