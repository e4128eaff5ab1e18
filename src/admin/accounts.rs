//! Admin accounts (argon2id) and sessions (random tokens, only their hash stored).

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::RngCore;
use sha2::{Digest, Sha256};
use sqlx::PgPool;

/// How long a session lasts.
pub const SESSION_HOURS: i64 = 8;
const MIN_PASSWORD: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("usernames are 1-64 letters, digits, dots, dashes or underscores")]
    Username,
    #[error("passwords need at least {MIN_PASSWORD} characters")]
    WeakPassword,
    #[error("an admin named `{0}` already exists")]
    Exists(String),
    #[error("hashing the password: {0}")]
    Hash(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// A logged-in admin.
#[derive(Debug, Clone)]
pub struct Session {
    pub admin_id: i64,
    pub username: String,
    pub csrf_token: String,
}

pub(crate) fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

fn valid_username(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

pub async fn add(pool: &PgPool, username: &str, password: &str) -> Result<(), AccountError> {
    if !valid_username(username) {
        return Err(AccountError::Username);
    }
    if password.chars().count() < MIN_PASSWORD {
        return Err(AccountError::WeakPassword);
    }
    let salt = SaltString::generate(&mut OsRng);
    let hash = Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| AccountError::Hash(e.to_string()))?
        .to_string();
    let inserted = sqlx::query(
        "INSERT INTO admins (username, password_hash) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(username)
    .bind(hash)
    .execute(pool)
    .await?;
    if inserted.rows_affected() == 0 {
        return Err(AccountError::Exists(username.to_owned()));
    }
    Ok(())
}

pub async fn any_exists(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM admins)")
        .fetch_one(pool)
        .await
}

/// Checks the password and opens a session; `None` for a wrong name or password alike (an
/// unknown name costs the same hashing time, so timing does not tell names apart).
pub async fn log_in(
    pool: &PgPool,
    username: &str,
    password: &str,
) -> Result<Option<(String, Session)>, AccountError> {
    let found: Option<(i64, String)> =
        sqlx::query_as("SELECT id, password_hash FROM admins WHERE username = $1")
            .bind(username)
            .fetch_optional(pool)
            .await?;
    let stand_in;
    let (admin_id, stored) = match &found {
        Some((id, hash)) => (Some(*id), hash.as_str()),
        None => {
            stand_in = Argon2::default()
                .hash_password(b"not a password", &SaltString::generate(&mut OsRng))
                .map_err(|e| AccountError::Hash(e.to_string()))?
                .to_string();
            (None, stand_in.as_str())
        }
    };
    let parsed = PasswordHash::new(stored).map_err(|e| AccountError::Hash(e.to_string()))?;
    let matches = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    let Some(admin_id) = admin_id.filter(|_| matches) else {
        return Ok(None);
    };
    let token = random_hex();
    let csrf_token = random_hex();
    sqlx::query(
        "INSERT INTO admin_sessions (token_hash, admin_id, csrf_token, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(hours => $4))",
    )
    .bind(token_hash(&token))
    .bind(admin_id)
    .bind(&csrf_token)
    .bind(SESSION_HOURS as i32)
    .execute(pool)
    .await?;
    Ok(Some((
        token,
        Session {
            admin_id,
            username: username.to_owned(),
            csrf_token,
        },
    )))
}

/// The live session of a cookie token.
pub async fn session(pool: &PgPool, token: &str) -> Result<Option<Session>, sqlx::Error> {
    let row: Option<(i64, String, String)> = sqlx::query_as(
        "SELECT a.id, a.username, s.csrf_token FROM admin_sessions s JOIN admins a ON a.id = s.admin_id
         WHERE s.token_hash = $1 AND s.expires_at > now()",
    )
    .bind(token_hash(token))
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(admin_id, username, csrf_token)| Session {
        admin_id,
        username,
        csrf_token,
    }))
}

pub async fn log_out(pool: &PgPool, token: &str) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM admin_sessions WHERE token_hash = $1 OR expires_at < now()")
        .bind(token_hash(token))
        .execute(pool)
        .await?;
    Ok(())
}

/// Compares two secrets in time that depends only on their length.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}
