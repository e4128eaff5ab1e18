//! An app's webhook secret over its life: rotated with an overlap in which the old one still
//! signs, and sealed at start when a value is still in clear or under the previous service key.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use super::settings::{AppError, check_name};
use crate::audit::{self, Entry};
use crate::webhooks::{self, SecretBox};

/// How long the secret before a rotation keeps signing: a day to give every receiver the new
/// one (docs/OPERATING.md).
pub const OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Gives app `name` a new webhook secret, answered in clear to be shown once. Deliveries carry
/// a signature under each secret until [`OVERLAP`] has passed; a second rotation within it
/// retires the oldest secret at once.
pub async fn rotate(
    pool: &PgPool,
    name: &str,
    secrets: &SecretBox,
    actor: &str,
) -> Result<String, AppError> {
    check_name(name)?;
    let secret = webhooks::new_secret();
    let mut tx = pool.begin().await?;
    let rotated: Option<i64> = sqlx::query_scalar(
        "UPDATE apps SET previous_webhook_secret = webhook_secret,
             previous_webhook_secret_until = now() + make_interval(secs => $3),
             webhook_secret = $2, updated_at = now()
         WHERE name = $1 AND webhook_secret IS NOT NULL RETURNING id",
    )
    .bind(name)
    .bind(secrets.seal(&secret))
    .bind(OVERLAP.as_secs_f64())
    .fetch_optional(&mut *tx)
    .await?;
    if rotated.is_none() {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM apps WHERE name = $1)")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?;
        return Err(if exists {
            AppError::NoWebhook(name.to_owned())
        } else {
            AppError::NotFound(name.to_owned())
        });
    }
    let entry = Entry {
        detail: json!({"app": name, "old_secret_signs_for_hours": OVERLAP.as_secs() / 3600}),
        ..Entry::new(actor, "app_rotate_webhook_secret")
    };
    audit::write(&mut *tx, entry).await?;
    tx.commit().await?;
    Ok(secret)
}

/// The columns that hold a sealed secret.
const SEALED_COLUMNS: [&str; 2] = ["webhook_secret", "previous_webhook_secret"];

/// Seals every stored secret still in clear (from before sealing) or sealed under the previous
/// service key, so the previous key can be dropped once every instance has started with the
/// new one. Idempotent, and safe with instances starting at once: a value is replaced only if
/// it is still the one read. Answers how many were sealed anew.
pub async fn seal_stored(pool: &PgPool, secrets: &SecretBox) -> Result<usize, sqlx::Error> {
    let mut sealed = 0;
    for column in SEALED_COLUMNS {
        let stored: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT id, {column} FROM apps WHERE {column} IS NOT NULL"
        ))
        .fetch_all(pool)
        .await?;
        for (id, value) in stored {
            match secrets.open(&value) {
                Ok(opened) if opened.stale => {
                    let done = sqlx::query(&format!(
                        "UPDATE apps SET {column} = $3 WHERE id = $1 AND {column} = $2"
                    ))
                    .bind(id)
                    .bind(&value)
                    .bind(secrets.seal(&opened.secret))
                    .execute(pool)
                    .await?;
                    sealed += done.rows_affected() as usize;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(app = id, column, error = %e,
                    "a webhook secret cannot be opened; its deliveries fail until it is"),
            }
        }
    }
    if sealed > 0 {
        tracing::info!(
            sealed,
            "webhook secrets sealed under the current secret key"
        );
    }
    Ok(sealed)
}
