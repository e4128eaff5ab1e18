//! `Idempotency-Key` (docs/DESIGN.md §4): the same key of one API key with the same body answers the
//! first id and never sends twice; with another body it is refused. Bodies are compared by what
//! they mean: the same JSON value, whatever its key order, whitespace or escapes, with a `null`
//! field as an absent one. The key and a hash of the
//! body are stored in `idempotency_keys` (apart from the invites, whose table is partitioned by
//! time and so cannot hold a key unique across all time), in the invite's statement, so two
//! racing requests cannot both be recorded: the second is not written (`ON CONFLICT DO
//! NOTHING`) and looks up the first once its batch has committed.

use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

/// What a key was used for before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Earlier {
    /// Never used.
    Unused,
    /// Used with the same body: answer this id again.
    Same(Uuid),
    /// Used with another body.
    Conflict,
}

/// Leads a hash of a body's meaning. Hashes stored before were of the raw bytes, 32 bytes long
/// without it.
const MEANING: u8 = 1;

/// The hash stored to tell a repeated body from another one: of the body's canonical form.
pub fn request_hash(body: &[u8]) -> Vec<u8> {
    // The body was parsed as a JSON object before; its bytes stand for themselves otherwise.
    let canonical = serde_json::from_slice(body)
        .ok()
        .and_then(|value| serde_json::to_vec(&canonical(value)).ok())
        .unwrap_or_else(|| body.to_vec());
    let mut hash = vec![MEANING];
    hash.extend(Sha256::digest(canonical));
    hash
}

/// `value` with its objects' keys sorted and their `null` fields dropped; strings and numbers
/// are printed afresh, so escapes and whitespace are gone.
fn canonical(value: Value) -> Value {
    match value {
        Value::Object(obj) => {
            let mut fields: Vec<(String, Value)> =
                obj.into_iter().filter(|(_, v)| !v.is_null()).collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(fields.into_iter().map(|(k, v)| (k, canonical(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

pub async fn earlier(
    pool: &PgPool,
    api_key_id: i64,
    key: &str,
    request_hash: &[u8],
) -> Result<Earlier, sqlx::Error> {
    let found: Option<(Uuid, Vec<u8>)> = sqlx::query_as(
        "SELECT invite_id, request_hash FROM idempotency_keys WHERE api_key_id = $1 AND key = $2",
    )
    .bind(api_key_id)
    .bind(key)
    .fetch_optional(pool)
    .await?;
    Ok(match found {
        None => Earlier::Unused,
        Some((id, hash)) if hash == request_hash => Earlier::Same(id),
        // Stored before bodies were compared by meaning (for the retention at most): the bytes
        // it hashed are unknown, and answering the first invite never sends twice.
        Some((id, hash)) if hash.len() != request_hash.len() => Earlier::Same(id),
        Some(_) => Earlier::Conflict,
    })
}

#[cfg(test)]
mod tests {
    use super::request_hash;

    #[test]
    fn the_hash_is_of_the_meaning() {
        let first = request_hash(br#"{"b":"x","a":{"d":1,"c":null}}"#);
        assert_eq!(first, request_hash(br#"{ "a" : {"d":1}, "b":"\u0078" }"#));
        assert_ne!(first, request_hash(br#"{"a":{"d":2},"b":"x"}"#));
        assert_eq!(first.len(), 33);
    }
}
