//! `Idempotency-Key` (docs/DESIGN.md §4): the same key of one API key with the same body answers the
//! first id and never sends twice; with another body it is refused. The key and a hash of the
//! body are stored in `idempotency_keys` (apart from the invites, whose table is partitioned by
//! time and so cannot hold a key unique across all time), in the invite's statement, so two
//! racing requests cannot both be recorded: the second is not written (`ON CONFLICT DO
//! NOTHING`) and looks up the first once its batch has committed.

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

/// The hash stored to tell a repeated body from another one.
pub fn request_hash(body: &[u8]) -> Vec<u8> {
    Sha256::digest(body).to_vec()
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
        Some(_) => Earlier::Conflict,
    })
}
