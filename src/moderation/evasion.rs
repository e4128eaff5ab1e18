//! Ban evasion (docs/DESIGN.md §3c): the addresses a banned sender sent from are kept, so that a
//! new sender of the same app first seen from one of them is linked to the banned one.

use sqlx::{PgPool, Postgres, Transaction};

use super::MEMORY_DAYS;
use crate::sender_key::SenderKey;

/// The sender of app `app_id` banned within [`MEMORY_DAYS`] from `address` (an address group),
/// if any.
pub async fn banned_near(
    pool: &PgPool,
    app_id: i64,
    address: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT sender_id FROM banned_addresses
         WHERE app_id = $3 AND address = $1 AND banned_at > now() - make_interval(days => $2)
         ORDER BY banned_at DESC LIMIT 1",
    )
    .bind(address)
    .bind(MEMORY_DAYS)
    .bind(app_id)
    .fetch_optional(pool)
    .await
}

/// Keeps the addresses a banned sender sent from (IPv6 by /64), so that a new sender of the
/// same app first seen from one of them within [`MEMORY_DAYS`] is linked to it.
pub async fn remember_addresses(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO banned_addresses (app_id, address, sender_id)
         SELECT $1, address, $2 FROM (
             SELECT network(set_masklen(sender_ip::inet,
                 CASE WHEN family(sender_ip::inet) = 6 THEN 64 ELSE 32 END))::text AS address
             FROM (SELECT sender_ip FROM invites
                   WHERE app_id = $1 AND sender_id = $2 AND sender_ip IS NOT NULL
                   ORDER BY created_at DESC LIMIT 50) recent
             UNION
             SELECT first_address FROM senders
             WHERE app_id = $1 AND id = $2 AND first_address IS NOT NULL
         ) addresses
         ON CONFLICT (app_id, address, sender_id) DO UPDATE SET banned_at = now()",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
