//! What a recipient can do from an email without an account (docs/DESIGN.md §4): stop an app's
//! invitations (one-click unsubscribe, RFC 8058) and report an invitation as abuse. Both links
//! are signed per invite with a key every instance shares, so they need no login and cannot be
//! forged for another invite; the suppression list they feed is per app.

pub mod pages;

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use sqlx::PgPool;
use uuid::Uuid;

use crate::audit::{self, Entry};
use crate::config::SecretKeys;
use crate::signals::MemberKey;
use crate::webhooks::SecretBox;

/// The shortest `SENDGUARD_SECRET_KEY` accepted: anything shorter is guessable.
pub const MIN_SECRET_LEN: usize = 32;

/// Bytes of the HMAC kept in a link: 128 bits, as hard to guess as the invite id itself.
const TOKEN_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum LinkKeyError {
    #[error("{0} must have at least {MIN_SECRET_LEN} characters")]
    TooShort(&'static str),
    #[error("the link key is missing from the database (migration 0008 creates it)")]
    Missing,
    #[error("{0}")]
    Config(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// What a signed link lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Unsubscribe,
    Report,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Unsubscribe => "unsubscribe",
            Purpose::Report => "report",
        }
    }
}

/// The key that signs recipients' links, and the one that signed them before it, if any:
/// links already in inboxes outlive a change of key.
#[derive(Clone)]
pub struct LinkKey {
    current: Arc<[u8]>,
    previous: Option<Arc<[u8]>>,
}

impl LinkKey {
    /// `SENDGUARD_SECRET_KEY` when set, else the key the first migration generated and stored.
    /// The previous key is `SENDGUARD_PREVIOUS_SECRET_KEY` when set, else, while a key is
    /// configured, the stored one (so moving to a configured key breaks no link; setting a
    /// previous key retires the stored one).
    pub async fn load(pool: &PgPool, keys: &SecretKeys) -> Result<LinkKey, LinkKeyError> {
        let given = |key: Option<&str>, name: &'static str| match key.filter(|k| !k.is_empty()) {
            Some(k) if k.len() < MIN_SECRET_LEN => Err(LinkKeyError::TooShort(name)),
            Some(k) => Ok(Some(Arc::<[u8]>::from(k.as_bytes()))),
            None => Ok(None),
        };
        let configured = keys.current().map_err(LinkKeyError::Config)?;
        let configured = given(configured.as_deref(), "SENDGUARD_SECRET_KEY")?;
        let previous = given(
            keys.previous_secret_key.as_deref(),
            "SENDGUARD_PREVIOUS_SECRET_KEY",
        )?;
        let stored: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT value FROM secrets WHERE name = 'link_key'")
                .fetch_optional(pool)
                .await?;
        let stored = stored.map(Arc::<[u8]>::from);
        match configured {
            Some(current) => Ok(LinkKey {
                current,
                previous: previous.or(stored),
            }),
            None => Ok(LinkKey {
                current: stored.ok_or(LinkKeyError::Missing)?,
                previous,
            }),
        }
    }

    /// The key of what distinct counts count ([`MemberKey`]), from the current secret.
    pub fn member_key(&self) -> MemberKey {
        MemberKey::new(&self.current)
    }

    /// A key of the current secret for another use, apart from the links' tokens and from
    /// every other `purpose`.
    pub fn derive(&self, purpose: &str) -> [u8; 32] {
        derived(&self.current, purpose)
    }

    /// What seals webhook secrets at rest, from the same current and previous keys.
    pub fn secret_box(&self) -> SecretBox {
        let purpose = crate::webhooks::seal::PURPOSE;
        SecretBox::new(
            derived(&self.current, purpose),
            self.previous.as_deref().map(|key| derived(key, purpose)),
        )
    }

    fn mac(key: &[u8], purpose: Purpose, invite: Uuid) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(purpose.as_str().as_bytes());
        mac.update(b":");
        mac.update(invite.as_bytes());
        mac
    }

    pub fn token(&self, purpose: Purpose, invite: Uuid) -> String {
        let tag = Self::mac(&self.current, purpose, invite)
            .finalize()
            .into_bytes();
        URL_SAFE_NO_PAD.encode(&tag[..TOKEN_BYTES])
    }

    /// Whether `token` is the current or the previous key's token for `purpose` on `invite`,
    /// compared in constant time.
    pub fn verify(&self, purpose: Purpose, invite: Uuid, token: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(token) else {
            return false;
        };
        given.len() == TOKEN_BYTES
            && std::iter::once(&self.current)
                .chain(&self.previous)
                .any(|key| {
                    Self::mac(key, purpose, invite)
                        .verify_truncated_left(&given)
                        .is_ok()
                })
    }

    /// The link of `purpose` for `invite`, under the service's public URL.
    pub fn link(&self, public_url: &str, purpose: Purpose, invite: Uuid) -> String {
        format!(
            "{}/r/{invite}/{}?t={}",
            public_url.trim_end_matches('/'),
            purpose.as_str(),
            self.token(purpose, invite)
        )
    }
}

/// The invite a recipient's link names: its app and recipient.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LinkedInvite {
    pub app_id: i64,
    pub recipient: String,
}

pub async fn invite(pool: &PgPool, id: Uuid) -> Result<Option<LinkedInvite>, sqlx::Error> {
    sqlx::query_as("SELECT app_id, recipient FROM invites WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// Puts the recipient of `invite` on its app's suppression list (once, however often asked).
pub async fn unsubscribe(pool: &PgPool, invite: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO suppressions (app_id, recipient, invite_id)
         SELECT app_id, recipient, id FROM invites WHERE id = $1
         ON CONFLICT (app_id, recipient) DO NOTHING",
    )
    .bind(invite)
    .execute(pool)
    .await?;
    Ok(())
}

/// A recipient on an app's suppression list.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Suppressed {
    pub recipient: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub invite_id: Option<Uuid>,
}

/// The app's suppressed recipients, newest first.
pub async fn suppressed(
    pool: &PgPool,
    app_id: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<Suppressed>, sqlx::Error> {
    sqlx::query_as(
        "SELECT recipient, created_at, invite_id FROM suppressions WHERE app_id = $1
         ORDER BY created_at DESC, recipient LIMIT $2 OFFSET $3",
    )
    .bind(app_id)
    .bind(limit)
    .bind(offset)
    .fetch_all(pool)
    .await
}

/// Takes a recipient off the app's suppression list, audited; false when it was not on it.
pub async fn remove(
    pool: &PgPool,
    app_id: i64,
    recipient: &str,
    actor: &str,
    admin_id: Option<i64>,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let removed = sqlx::query("DELETE FROM suppressions WHERE app_id = $1 AND recipient = $2")
        .bind(app_id)
        .bind(recipient)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if removed {
        let entry = Entry {
            admin_id,
            detail: json!({"app_id": app_id, "recipient": recipient}),
            ..Entry::new(actor, "unsuppress")
        };
        audit::write(&mut *tx, entry).await?;
    }
    tx.commit().await?;
    Ok(removed)
}

/// A key for `purpose` derived from the service key `key`.
fn derived(key: &[u8], purpose: &str) -> [u8; 32] {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(b"derive:");
    mac.update(purpose.as_bytes());
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of 32 `byte`s, with no previous one.
    fn key_of(byte: u8) -> LinkKey {
        LinkKey {
            current: [byte; 32].into(),
            previous: None,
        }
    }

    #[test]
    fn a_token_opens_one_purpose_of_one_invite() {
        let key = key_of(b'k');
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let token = key.token(Purpose::Unsubscribe, a);
        assert!(key.verify(Purpose::Unsubscribe, a, &token));
        assert!(!key.verify(Purpose::Report, a, &token));
        assert!(!key.verify(Purpose::Unsubscribe, b, &token));
        let other = key_of(b'j');
        assert!(!other.verify(Purpose::Unsubscribe, a, &token));
        let mut tampered = token.clone().into_bytes();
        tampered[0] = if tampered[0] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("ascii");
        assert!(!key.verify(Purpose::Unsubscribe, a, &tampered));
        assert!(!key.verify(Purpose::Unsubscribe, a, &token[..10]));
        assert!(!key.verify(Purpose::Unsubscribe, a, "not base64!"));
    }

    #[test]
    fn a_previous_key_verifies_and_never_signs() {
        let (old, invite) = (key_of(b'o'), Uuid::new_v4());
        let token = old.token(Purpose::Report, invite);
        let rotated = LinkKey {
            previous: Some(old.current.clone()),
            ..key_of(b'n')
        };
        assert!(rotated.verify(Purpose::Report, invite, &token));
        assert_ne!(rotated.token(Purpose::Report, invite), token);
        assert!(!key_of(b'n').verify(Purpose::Report, invite, &token));
    }

    #[test]
    fn links_live_under_the_public_url() {
        let key = key_of(b'k');
        let id = Uuid::nil();
        let link = key.link("https://guard.example/", Purpose::Report, id);
        assert!(link.starts_with(&format!("https://guard.example/r/{id}/report?t=")));
    }
}
