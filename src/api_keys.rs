//! API keys: random, shown once, stored as a SHA-256 hash.

use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

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

/// The id of the live key `key`, if any. The lookup is by hash, so comparing the key itself
/// takes no time that depends on how much of it matched.
pub async fn verify(pool: &PgPool, key: &str) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL")
        .bind(hash(key))
        .fetch_optional(pool)
        .await
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
