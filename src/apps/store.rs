//! The `apps` table: reading every app, creating and changing one (audited). A webhook URL is
//! checked here, where its host is resolved, and its secret made when the first URL is set:
//! the secret is stored sealed, and answered in clear to be shown once.

use serde_json::json;
use sqlx::PgPool;

use super::App;
use super::settings::{AppChanges, AppError, AppValues, check_name};
use crate::audit::{self, Entry};
use crate::webhooks::{self, SecretBox};

const COLUMNS: &str =
    "id, name, product, link_hosts, link_template, mail_from, webhook_url, standard_texts";

pub async fn all(pool: &PgPool) -> Result<Vec<App>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM apps ORDER BY name"))
        .fetch_all(pool)
        .await
}

/// A new webhook URL must be https and reach a public address (docs/DESIGN.md §4).
async fn checked(values: &AppValues, allow_private: bool) -> Result<(), AppError> {
    if let Some(url) = &values.webhook_url {
        webhooks::check_url(url, allow_private)
            .await
            .map_err(|e| AppError::Invalid {
                field: "webhook-url",
                detail: e.to_string(),
            })?;
    }
    Ok(())
}

fn detail(values: &AppValues) -> serde_json::Value {
    json!({
        "product": values.product,
        "link_hosts": values.link_hosts,
        "link_template": values.link_template,
        "from": values.mail_from,
        "webhook_url": values.webhook_url,
        "standard_texts": values.standard_texts,
    })
}

/// Creates app `name`; answers it and, when it has a webhook, the webhook secret (shown once).
pub async fn create(
    pool: &PgPool,
    name: &str,
    changes: AppChanges,
    secrets: &SecretBox,
    allow_private: bool,
    actor: &str,
) -> Result<(App, Option<String>), AppError> {
    check_name(name)?;
    let values = changes.apply(None)?;
    checked(&values, allow_private).await?;
    let secret = values.webhook_url.as_ref().map(|_| webhooks::new_secret());
    let mut tx = pool.begin().await?;
    let app: Option<App> = sqlx::query_as(&format!(
        "INSERT INTO apps (name, product, link_hosts, link_template, mail_from, webhook_url,
             webhook_secret, standard_texts)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
    ))
    .bind(name)
    .bind(&values.product)
    .bind(&values.link_hosts)
    .bind(&values.link_template)
    .bind(&values.mail_from)
    .bind(&values.webhook_url)
    .bind(secret.as_deref().map(|s| secrets.seal(s)))
    .bind(&values.standard_texts)
    .fetch_optional(&mut *tx)
    .await?;
    let app = app.ok_or_else(|| AppError::Exists(name.to_owned()))?;
    let entry = Entry {
        detail: json!({"app": name, "settings": detail(&values)}),
        ..Entry::new(actor, "app_create")
    };
    audit::write(&mut *tx, entry).await?;
    tx.commit().await?;
    Ok((app, secret))
}

#[derive(sqlx::FromRow)]
struct Current {
    #[sqlx(flatten)]
    app: App,
    has_secret: bool,
}

/// Changes app `name`; answers it and, when this change gave it its first webhook URL, the new
/// webhook secret (shown once). A changed URL keeps the secret receivers already verify with.
pub async fn update(
    pool: &PgPool,
    name: &str,
    changes: AppChanges,
    secrets: &SecretBox,
    allow_private: bool,
    actor: &str,
) -> Result<(App, Option<String>), AppError> {
    let mut tx = pool.begin().await?;
    let current: Current = sqlx::query_as(&format!(
        "SELECT {COLUMNS}, webhook_secret IS NOT NULL AS has_secret
         FROM apps WHERE name = $1 FOR UPDATE"
    ))
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| AppError::NotFound(name.to_owned()))?;
    let Current {
        app: current,
        has_secret,
    } = current;
    let values = changes.apply(Some(&current))?;
    checked(&values, allow_private).await?;
    let new_secret = (values.webhook_url.is_some() && !has_secret).then(webhooks::new_secret);
    let app: App = sqlx::query_as(&format!(
        "UPDATE apps SET product = $2, link_hosts = $3, link_template = $4, mail_from = $5,
             webhook_url = $6, webhook_secret = COALESCE($7, webhook_secret),
             standard_texts = $8, updated_at = now()
         WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(current.id)
    .bind(&values.product)
    .bind(&values.link_hosts)
    .bind(&values.link_template)
    .bind(&values.mail_from)
    .bind(&values.webhook_url)
    .bind(new_secret.as_deref().map(|s| secrets.seal(s)))
    .bind(&values.standard_texts)
    .fetch_one(&mut *tx)
    .await?;
    let entry = Entry {
        detail: json!({"app": name, "settings": detail(&values)}),
        ..Entry::new(actor, "app_update")
    };
    audit::write(&mut *tx, entry).await?;
    tx.commit().await?;
    Ok((app, new_secret))
}

/// The id of app `name`.
pub async fn id_of(pool: &PgPool, name: &str) -> Result<i64, AppError> {
    check_name(name)?;
    sqlx::query_scalar("SELECT id FROM apps WHERE name = $1")
        .bind(name)
        .fetch_optional(pool)
        .await?
        .ok_or_else(|| AppError::NotFound(name.to_owned()))
}
