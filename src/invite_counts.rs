//! Figures over recent invites for the dashboard's overview: counts by status and an hourly
//! series. The queries are constants so `tests/it/explain.rs` can check their plans.

use sqlx::PgPool;

type Time = chrono::DateTime<chrono::Utc>;

/// Invites of the last 24 hours by status.
pub const STATUSES_24H: &str = "SELECT status, count(*) AS count FROM invites
     WHERE created_at > now() - interval '24 hours'
     GROUP BY status ORDER BY status";

/// Invites per hour over the last 24 hours: delivered, and held or suppressed.
pub const HOURLY: &str = "SELECT date_trunc('hour', created_at) AS hour,
            count(*) FILTER (WHERE status = 'sent') AS delivered,
            count(*) FILTER (WHERE status IN ('held', 'suppressed')) AS stopped
     FROM invites WHERE created_at > date_trunc('hour', now()) - interval '23 hours'
     GROUP BY 1";

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StatusCount {
    pub status: String,
    pub count: i64,
}

#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct Hour {
    pub hour: Time,
    pub delivered: i64,
    pub stopped: i64,
}

pub async fn statuses_24h(pool: &PgPool) -> Result<Vec<StatusCount>, sqlx::Error> {
    sqlx::query_as(STATUSES_24H).fetch_all(pool).await
}

/// Only the hours that had invites; the caller fills the gaps.
pub async fn hourly(pool: &PgPool) -> Result<Vec<Hour>, sqlx::Error> {
    sqlx::query_as(HOURLY).fetch_all(pool).await
}
