//! Admin accounts (argon2id, with a role) and their sessions (random tokens, only their hash
//! stored). Every change to an account is written to the audit log.

use std::sync::{Arc, OnceLock};

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use serde_json::json;
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::audit::{self, Entry};
use crate::tokens::{self, random_hex};

/// Sessions end after this long, however active.
pub const SESSION_HOURS: i64 = 8;
/// Sessions end after this long without a request.
const IDLE_MINUTES: i64 = 30;
const MIN_PASSWORD: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error(
        "usernames are 1-64 letters, digits, dots, dashes or underscores, and `system` is reserved"
    )]
    Username,
    #[error("passwords need at least {MIN_PASSWORD} characters")]
    WeakPassword,
    #[error("an admin named `{0}` already exists")]
    Exists(String),
    #[error("no admin named `{0}`")]
    NotFound(String),
    #[error("`{0}` is the last admin who can manage accounts; add another admin first")]
    LastAdmin(String),
    #[error("hashing the password: {0}")]
    Hash(String),
    #[error("too many password checks at once; try again in a moment")]
    Busy,
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// What an admin may do (docs/DESIGN.md §2).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_role)]
pub enum Role {
    /// Everything.
    Admin,
    /// The review queue, sender decisions and the audit log.
    Moderator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

fn unknown_role(s: &str) -> String {
    crate::names::unknown::<Role>("role", s)
}

/// A logged-in admin.
#[derive(Debug, Clone)]
pub struct Session {
    pub admin_id: i64,
    pub username: String,
    pub role: Role,
    pub csrf_token: String,
}

/// A name an account may have: 1 to 64 ASCII letters, digits, `_`, `.` or `-`, and not the
/// name reserved for the service's own entries in the audit log.
pub fn valid_username(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !name.eq_ignore_ascii_case(audit::SYSTEM)
}

/// Password hashing off the async workers, a few at a time: argon2 takes tens of
/// milliseconds of CPU by design, and a burst of logins must neither stall requests nor queue
/// without end. Browsers that logged in before have a slot of their own, so that a flood of
/// guesses, which keeps the shared slots busy, does not lock real admins out.
#[derive(Clone)]
pub struct Passwords {
    permits: Arc<Semaphore>,
    known_devices: Arc<Semaphore>,
}

/// Which slots a password check may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Shared,
    /// A browser with a known-device cookie: its own slot first, else a shared one.
    KnownDevice,
}

impl Passwords {
    pub fn new(at_once: usize) -> Self {
        Passwords {
            permits: Arc::new(Semaphore::new(at_once.max(1))),
            known_devices: Arc::new(Semaphore::new(1)),
        }
    }

    /// Runs `work` on the blocking pool once a permit is free; `Busy` at once when none is.
    async fn run<T: Send + 'static>(
        &self,
        lane: Lane,
        work: impl FnOnce() -> Result<T, AccountError> + Send + 'static,
    ) -> Result<T, AccountError> {
        let own = match lane {
            Lane::KnownDevice => self.known_devices.clone().try_acquire_owned().ok(),
            Lane::Shared => None,
        };
        let permit = match own {
            Some(permit) => permit,
            None => self
                .permits
                .clone()
                .try_acquire_owned()
                .map_err(|_| AccountError::Busy)?,
        };
        let done = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await;
        done.map_err(|e| AccountError::Hash(e.to_string()))?
    }

    pub async fn hash(&self, password: &str) -> Result<String, AccountError> {
        let password = password.to_owned();
        self.run(Lane::Shared, move || hash(&password)).await
    }

    /// Whether `password` matches `stored`; with no stored hash (an unknown name) it is checked
    /// against a stand-in hash made once, so unknown names cost the same time as known ones.
    pub async fn verify(
        &self,
        lane: Lane,
        password: &str,
        stored: Option<String>,
    ) -> Result<bool, AccountError> {
        let password = password.to_owned();
        self.run(lane, move || {
            let matches = match &stored {
                Some(hash) => check(&password, hash)?,
                None => {
                    check(&password, stand_in()?)?;
                    false
                }
            };
            Ok(matches)
        })
        .await
    }
}

fn hash(password: &str) -> Result<String, AccountError> {
    Argon2::default()
        .hash_password(password.as_bytes(), &SaltString::generate(&mut OsRng))
        .map(|h| h.to_string())
        .map_err(|e| AccountError::Hash(e.to_string()))
}

fn check(password: &str, stored: &str) -> Result<bool, AccountError> {
    let parsed = PasswordHash::new(stored).map_err(|e| AccountError::Hash(e.to_string()))?;
    Ok(Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok())
}

/// The hash unknown names are checked against.
fn stand_in() -> Result<&'static str, AccountError> {
    static STAND_IN: OnceLock<String> = OnceLock::new();
    if let Some(h) = STAND_IN.get() {
        return Ok(h);
    }
    let made = hash("not the password of anyone")?;
    Ok(STAND_IN.get_or_init(|| made))
}

fn checked_input(username: &str, password: &str) -> Result<(), AccountError> {
    if !valid_username(username) {
        return Err(AccountError::Username);
    }
    if password.chars().count() < MIN_PASSWORD {
        return Err(AccountError::WeakPassword);
    }
    Ok(())
}

/// Adds an admin on behalf of `actor`; returns its id.
pub async fn add(
    pool: &PgPool,
    username: &str,
    password: &str,
    role: Role,
    actor: &str,
) -> Result<i64, AccountError> {
    checked_input(username, password)?;
    insert(pool, username, &hash(password)?, role, actor).await
}

/// As [`add`], the password hashed off the async workers: the dashboard's form.
pub async fn add_hashing(
    pool: &PgPool,
    passwords: &Passwords,
    username: &str,
    password: &str,
    role: Role,
    actor: &str,
) -> Result<i64, AccountError> {
    checked_input(username, password)?;
    let hash = passwords.hash(password).await?;
    insert(pool, username, &hash, role, actor).await
}

async fn insert(
    pool: &PgPool,
    username: &str,
    hash: &str,
    role: Role,
    actor: &str,
) -> Result<i64, AccountError> {
    let mut tx = pool.begin().await?;
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO admins (username, password_hash, role) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING RETURNING id",
    )
    .bind(username)
    .bind(hash)
    .bind(role.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let id = id.ok_or_else(|| AccountError::Exists(username.to_owned()))?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id: Some(id),
            detail: json!({"username": username, "role": role.as_str()}),
            ..Entry::new(actor, "admin_add")
        },
    )
    .await?;
    tx.commit().await?;
    Ok(id)
}

/// An admin as `sendguard admin list` shows it.
#[derive(Debug, sqlx::FromRow)]
pub struct Listed {
    pub username: String,
    pub role: String,
    pub disabled_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When their latest live session began; older ones are not kept.
    pub last_login: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every admin, by name.
pub async fn list(pool: &PgPool) -> Result<Vec<Listed>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.username, a.role, a.disabled_at, max(s.created_at) AS last_login
         FROM admins a LEFT JOIN admin_sessions s ON s.admin_id = a.id
         GROUP BY a.id ORDER BY a.username",
    )
    .fetch_all(pool)
    .await
}

/// The first admin, from the setup page: created only while no admin exists, however many
/// setups run at once on however many instances. `None` when one exists already.
pub async fn add_first(
    pool: &PgPool,
    passwords: &Passwords,
    username: &str,
    password: &str,
) -> Result<Option<i64>, AccountError> {
    checked_input(username, password)?;
    let hash = passwords.hash(password).await?;
    let mut tx = pool.begin().await?;
    // Serialises concurrent setups; logins and sessions only read the table.
    sqlx::query("LOCK TABLE admins IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO admins (username, password_hash, role)
         SELECT $1, $2, 'admin' WHERE NOT EXISTS (SELECT 1 FROM admins) RETURNING id",
    )
    .bind(username)
    .bind(hash)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(id) = id {
        audit::write(
            &mut *tx,
            Entry {
                admin_id: Some(id),
                ..Entry::new(username, "admin_setup")
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(id)
}

/// Disables an admin on behalf of `actor`: their sessions end at once, on every instance (each
/// request reads its session from the database). The last enabled account of the `admin` role
/// stays: without it no one could manage accounts, rules or apps from the dashboard.
pub async fn disable(pool: &PgPool, username: &str, actor: &str) -> Result<(), AccountError> {
    let mut tx = pool.begin().await?;
    // Serialises with other changes of accounts, so two admins disabling each other at once
    // do not leave none.
    sqlx::query("LOCK TABLE admins IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let last: bool = sqlx::query_scalar(
        "SELECT COALESCE(bool_or(username = $1) AND NOT bool_or(username <> $1), false)
         FROM admins WHERE role = 'admin' AND disabled_at IS NULL",
    )
    .bind(username)
    .fetch_one(&mut *tx)
    .await?;
    if last {
        return Err(AccountError::LastAdmin(username.to_owned()));
    }
    let id: Option<i64> = sqlx::query_scalar(
        "UPDATE admins SET disabled_at = COALESCE(disabled_at, now()) WHERE username = $1
         RETURNING id",
    )
    .bind(username)
    .fetch_optional(&mut *tx)
    .await?;
    let id = id.ok_or_else(|| AccountError::NotFound(username.to_owned()))?;
    sqlx::query("DELETE FROM admin_sessions WHERE admin_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id: Some(id),
            detail: json!({"username": username}),
            ..Entry::new(actor, "admin_disable")
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

pub async fn any_exists(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM admins)")
        .fetch_one(pool)
        .await
}

/// An enabled admin as a login attempt needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Candidate {
    pub id: i64,
    pub password_hash: String,
}

/// The enabled admin of that name, if any.
pub async fn candidate(pool: &PgPool, username: &str) -> Result<Option<Candidate>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, password_hash FROM admins WHERE username = $1 AND disabled_at IS NULL",
    )
    .bind(username)
    .fetch_optional(pool)
    .await
}

/// Opens a session for an admin whose password was checked; returns the cookie token.
pub async fn open_session(pool: &PgPool, admin_id: i64) -> Result<String, sqlx::Error> {
    let token = random_hex();
    sqlx::query(
        "INSERT INTO admin_sessions (token_hash, admin_id, csrf_token, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(hours => $4))",
    )
    .bind(tokens::hash(&token))
    .bind(admin_id)
    .bind(random_hex())
    .bind(SESSION_HOURS as i32)
    .execute(pool)
    .await?;
    Ok(token)
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    admin_id: i64,
    username: String,
    role: String,
    csrf_token: String,
}

/// The live session of a cookie token: its admin enabled, younger than eight hours, used in
/// the last thirty minutes. Using it keeps it alive.
pub async fn session(pool: &PgPool, token: &str) -> Result<Option<Session>, sqlx::Error> {
    let row: Option<SessionRow> = sqlx::query_as(
        "UPDATE admin_sessions s SET last_seen_at = now()
         FROM admins a
         WHERE s.token_hash = $1 AND a.id = s.admin_id AND a.disabled_at IS NULL
           AND s.created_at > now() - make_interval(hours => $2)
           AND s.last_seen_at > now() - make_interval(mins => $3)
         RETURNING a.id AS admin_id, a.username, a.role, s.csrf_token",
    )
    .bind(tokens::hash(token))
    .bind(SESSION_HOURS as i32)
    .bind(IDLE_MINUTES as i32)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Session {
        admin_id: r.admin_id,
        username: r.username,
        // The column's check allows only the two roles; anything else gets the lesser one.
        role: r.role.parse().unwrap_or(Role::Moderator),
        csrf_token: r.csrf_token,
    }))
}

/// Ends a session, and any that expired meanwhile.
pub async fn log_out(pool: &PgPool, token: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM admin_sessions WHERE token_hash = $1
             OR created_at < now() - make_interval(hours => $2)",
    )
    .bind(tokens::hash(token))
    .bind(SESSION_HOURS as i32)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_checked_and_system_is_reserved() {
        assert!(valid_username("alice.b-c_1"));
        for bad in ["", "a b", "ünï", "system", "SYSTEM", &"x".repeat(65)] {
            assert!(!valid_username(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_password_matches_its_own_hash_only() {
        let h = hash("correct horse battery").expect("hash");
        assert!(check("correct horse battery", &h).expect("check"));
        assert!(!check("correct horse batterY", &h).expect("check"));
    }

    #[tokio::test]
    async fn a_full_hashing_pool_answers_busy_at_once() {
        let passwords = Passwords::new(1);
        let held = passwords
            .permits
            .clone()
            .try_acquire_owned()
            .expect("permit");
        assert!(matches!(
            passwords.verify(Lane::Shared, "x", None).await,
            Err(AccountError::Busy)
        ));
        // A known device still has its own slot.
        assert!(
            !passwords
                .verify(Lane::KnownDevice, "x", None)
                .await
                .expect("checked")
        );
        drop(held);
        assert!(
            !passwords
                .verify(Lane::Shared, "x", None)
                .await
                .expect("checked")
        );
    }
}
