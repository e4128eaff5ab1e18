//! Webhook secrets at rest: sealed with ChaCha20-Poly1305 under a key derived from the
//! service's secret key, so a copy of the database alone (a backup, a replica, a read-only
//! role) signs nothing. A sealed value is `sealed:v1:` and the base64 of nonce, ciphertext and
//! tag. When the service key itself is kept in the database (none configured), this protects
//! nothing against a reader of the database; docs/SECURITY.md says so.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

use super::WebhookError;

const PREFIX: &str = "sealed:v1:";
/// The purpose the sealing key is derived for from the service key, apart from its other
/// uses (links, distinct counts, the login throttle).
pub const PURPOSE: &str = "webhook-secret sealing v1";

/// A webhook secret opened from its sealed form.
#[derive(Debug, PartialEq, Eq)]
pub struct Opened {
    pub secret: String,
    /// Sealed under the previous service key, or not sealed at all: worth sealing again.
    pub stale: bool,
}

/// Seals under the current service key; opens under it or the previous one.
#[derive(Clone)]
pub struct SecretBox {
    current: Arc<LessSafeKey>,
    previous: Option<Arc<LessSafeKey>>,
}

fn aead_key(key: [u8; 32]) -> Arc<LessSafeKey> {
    let key = UnboundKey::new(&CHACHA20_POLY1305, &key)
        .unwrap_or_else(|_| unreachable!("32 bytes are a ChaCha20 key's length"));
    Arc::new(LessSafeKey::new(key))
}

impl SecretBox {
    /// From the sealing keys derived for [`PURPOSE`] from the current and previous service
    /// keys (`recipients::LinkKey::secret_box`).
    pub fn new(current: [u8; 32], previous: Option<[u8; 32]>) -> SecretBox {
        SecretBox {
            current: aead_key(current),
            previous: previous.map(aead_key),
        }
    }

    /// `secret` sealed under the current key, with a fresh random nonce.
    pub fn seal(&self, secret: &str) -> String {
        // 96 random bits: collisions are out of reach for the few secrets ever sealed.
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut out = secret.as_bytes().to_vec();
        self.current
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut out)
            .unwrap_or_else(|_| unreachable!("a secret is far below ChaCha20's length limit"));
        let mut sealed = nonce.to_vec();
        sealed.append(&mut out);
        format!("{PREFIX}{}", STANDARD.encode(sealed))
    }

    /// The secret in `stored`. A value in clear (from before sealing) opens as stale; one that
    /// no key opens is an error.
    pub fn open(&self, stored: &str) -> Result<Opened, WebhookError> {
        let Some(encoded) = stored.strip_prefix(PREFIX) else {
            return if stored.starts_with("whsec_") {
                Ok(Opened {
                    secret: stored.to_owned(),
                    stale: true,
                })
            } else {
                Err(WebhookError::Sealed)
            };
        };
        let sealed = STANDARD.decode(encoded).map_err(|_| WebhookError::Sealed)?;
        if sealed.len() < NONCE_LEN {
            return Err(WebhookError::Sealed);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let keys = std::iter::once(&self.current).chain(&self.previous);
        for (i, key) in keys.enumerate() {
            let nonce =
                Nonce::try_assume_unique_for_key(nonce).map_err(|_| WebhookError::Sealed)?;
            let mut buf = body.to_vec();
            if let Ok(plain) = key.open_in_place(nonce, Aad::empty(), &mut buf) {
                let secret = String::from_utf8(plain.to_vec()).map_err(|_| WebhookError::Sealed)?;
                return Ok(Opened {
                    secret,
                    stale: i > 0,
                });
            }
        }
        Err(WebhookError::Sealed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_under_either_key_and_hide_the_secret() {
        let (old, new) = ([b'o'; 32], [b'n'; 32]);
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let before = SecretBox::new(old, None);
        let sealed = before.seal(secret);
        assert!(
            sealed.starts_with(PREFIX) && !sealed.contains("MfKQ9r8"),
            "{sealed}"
        );
        assert_ne!(sealed, before.seal(secret), "each seal has its own nonce");
        let opened = before.open(&sealed).expect("opens");
        assert_eq!((opened.secret.as_str(), opened.stale), (secret, false));

        let rotated = SecretBox::new(new, Some(old));
        assert_eq!(
            rotated.open(&sealed).expect("opens with the previous key"),
            Opened {
                secret: secret.into(),
                stale: true
            }
        );
        assert!(matches!(
            SecretBox::new(new, None).open(&sealed),
            Err(WebhookError::Sealed)
        ));
    }

    #[test]
    fn a_secret_in_clear_is_stale_and_a_tampered_one_refused() {
        let keys = SecretBox::new([b'k'; 32], None);
        let clear = keys.open("whsec_abc").expect("opens");
        assert!(clear.stale);
        let sealed = keys.seal("whsec_abc");
        let mut bytes = STANDARD
            .decode(sealed.trim_start_matches(PREFIX))
            .expect("base64");
        bytes[NONCE_LEN] ^= 1;
        let tampered = format!("{PREFIX}{}", STANDARD.encode(bytes));
        for bad in [tampered.as_str(), "sealed:v1:", "sealed:v1:!!", "plain"] {
            assert!(matches!(keys.open(bad), Err(WebhookError::Sealed)), "{bad}");
        }
    }
}
