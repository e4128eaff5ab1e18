//! Secrets and signatures of the Standard Webhooks scheme: the secret is `whsec_` and the
//! base64 of the HMAC key; a signature is `v1,` and the base64 of HMAC-SHA256 over
//! `{id}.{timestamp}.{body}`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::WebhookError;

const PREFIX: &str = "whsec_";
/// Bytes of key in a new secret (what the scheme's own libraries generate).
const KEY_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A new secret, `whsec_` and the base64 of 32 random bytes, shown to the operator once.
pub fn new_secret() -> String {
    // The thread RNG is a CSPRNG seeded from the OS.
    let key: [u8; KEY_BYTES] = rand::random();
    format!("{PREFIX}{}", STANDARD.encode(key))
}

/// The HMAC key of a `whsec_` secret.
pub(super) fn secret_key(secret: &str) -> Result<Vec<u8>, WebhookError> {
    let encoded = secret
        .trim()
        .strip_prefix(PREFIX)
        .ok_or(WebhookError::Secret)?;
    match STANDARD.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(key),
        _ => Err(WebhookError::Secret),
    }
}

/// The `webhook-signature` value of one attempt: `v1,` and the base64 of the HMAC.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Result<String, WebhookError> {
    let key = secret_key(secret)?;
    let mut mac = HmacSha256::new_from_slice(&key).map_err(|_| WebhookError::Secret)?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The `webhook-signature` value under each of `secrets`, space-separated: during a rotation
/// a receiver holding either secret finds a signature it verifies.
pub(super) fn signatures<'a>(
    secrets: impl IntoIterator<Item = &'a str>,
    id: &str,
    timestamp: i64,
    body: &str,
) -> Result<String, WebhookError> {
    let signed: Vec<String> = secrets
        .into_iter()
        .map(|secret| sign(secret, id, timestamp, body))
        .collect::<Result<_, _>>()?;
    Ok(signed.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published test vectors of the scheme's reference libraries.
    #[test]
    fn signs_the_published_test_vectors() {
        let signed = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            r#"{"test": 2432232314}"#,
        )
        .expect("a valid secret");
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let signed = sign(
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1649367553,
            r#"{"email":"test@example.com","username":"test_user"}"#,
        )
        .expect("a valid secret");
        assert_eq!(signed, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    /// A receiver's check: the HMAC recomputed from the decoded secret, compared in constant time.
    fn verifies(secret: &str, id: &str, timestamp: i64, body: &str, signature: &str) -> bool {
        let Some(sig) = signature
            .strip_prefix("v1,")
            .and_then(|s| STANDARD.decode(s).ok())
        else {
            return false;
        };
        let key = secret_key(secret).expect("a valid secret");
        let mut mac = HmacSha256::new_from_slice(&key).expect("any key length");
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        mac.verify_slice(&sig).is_ok()
    }

    #[test]
    fn a_new_secret_round_trips_through_sign_and_verify() {
        let secret = new_secret();
        assert!(secret.starts_with("whsec_"), "{secret}");
        assert_eq!(secret_key(&secret).expect("decodes").len(), KEY_BYTES);
        assert_ne!(secret, new_secret(), "secrets are random");
        let body = r#"{"type":"sender.banned"}"#;
        let signature = sign(&secret, "e1", 1_700_000_000, body).expect("signs");
        assert!(verifies(&secret, "e1", 1_700_000_000, body, &signature));
        assert!(!verifies(&secret, "e1", 1_700_000_001, body, &signature));
        assert!(!verifies(&secret, "e2", 1_700_000_000, body, &signature));
        assert!(!verifies(
            &new_secret(),
            "e1",
            1_700_000_000,
            body,
            &signature
        ));
    }

    #[test]
    fn each_secret_of_a_rotation_signs() {
        let (old, new) = (new_secret(), new_secret());
        let both = signatures([old.as_str(), new.as_str()], "e1", 1, "{}").expect("signs");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2, "{both}");
        assert!(verifies(&old, "e1", 1, "{}", parts[0]));
        assert!(verifies(&new, "e1", 1, "{}", parts[1]));
        assert_eq!(
            signatures([new.as_str()], "e1", 1, "{}").expect("signs"),
            sign(&new, "e1", 1, "{}").expect("signs")
        );
    }

    #[test]
    fn malformed_secrets_are_refused() {
        for bad in [
            "",
            "whsec_",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not base64!",
        ] {
            assert!(
                matches!(sign(bad, "e", 1, "{}"), Err(WebhookError::Secret)),
                "{bad:?}"
            );
        }
    }
}
