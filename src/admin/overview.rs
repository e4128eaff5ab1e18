//! The overview (recent invites by status and an hourly chart) and the audit log.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::{Admin, AdminError, PAGE, Time, queries, time};
use crate::AppState;

pub(super) struct StatusCount {
    status: String,
    count: i64,
}

pub(super) struct Bar {
    x: i64,
    width: i64,
    label: String,
    show_label: bool,
    delivered: i64,
    delivered_y: i64,
    delivered_h: i64,
    stopped: i64,
    stopped_y: i64,
    stopped_h: i64,
}

pub(super) struct Chart {
    width: i64,
    height: i64,
    top: i64,
    bottom: i64,
    left: i64,
    max: i64,
    bars: Vec<Bar>,
}

/// Two bars per hour, delivered and held-or-suppressed, scaled to the busiest hour.
fn chart(hours: &[(Time, i64, i64)], now: Time) -> Chart {
    let (width, height, top, left) = (960, 240, 10, 40);
    let bottom = height - 20;
    let max = hours
        .iter()
        .map(|&(_, d, s)| d.max(s))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = (width - left) / 24;
    let bar = (slot - 4) / 2;
    let start = now - chrono::Duration::hours(23);
    let bars = (0..24)
        .map(|n| {
            let hour = start + chrono::Duration::hours(n);
            let hour_key = hour.format("%Y-%m-%d %H").to_string();
            let (delivered, stopped) = hours
                .iter()
                .find(|(h, _, _)| h.format("%Y-%m-%d %H").to_string() == hour_key)
                .map(|&(_, d, s)| (d, s))
                .unwrap_or((0, 0));
            let scale = |v: i64| (v * (bottom - top)) / max;
            Bar {
                x: left + n * slot,
                width: bar,
                label: hour.format("%H:00").to_string(),
                show_label: n % 3 == 0,
                delivered,
                delivered_y: bottom - scale(delivered),
                delivered_h: scale(delivered),
                stopped,
                stopped_y: bottom - scale(stopped),
                stopped_h: scale(stopped),
            }
        })
        .collect();
    Chart {
        width,
        height,
        top,
        bottom,
        left,
        max,
        bars,
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/overview.html")]
pub(super) struct OverviewPage {
    admin: Option<String>,
    csrf: String,
    awaiting: i64,
    statuses: Vec<StatusCount>,
    chart: Chart,
}

pub(super) async fn overview(
    State(state): State<AppState>,
    Admin(session): Admin,
) -> Result<OverviewPage, AdminError> {
    let statuses: Vec<(String, i64)> = sqlx::query_as(queries::STATUSES_24H)
        .fetch_all(&state.pool)
        .await?;
    let awaiting: i64 = sqlx::query_scalar(queries::AWAITING)
        .fetch_one(&state.pool)
        .await?;
    let hours: Vec<(Time, i64, i64)> = sqlx::query_as(queries::HOURLY)
        .fetch_all(&state.pool)
        .await?;
    Ok(OverviewPage {
        admin: Some(session.username),
        csrf: session.csrf_token,
        awaiting,
        statuses: statuses
            .into_iter()
            .map(|(status, count)| StatusCount { status, count })
            .collect(),
        chart: chart(&hours, chrono::Utc::now()),
    })
}

pub(super) struct AuditRow {
    when: String,
    actor: String,
    action: String,
    sender: Option<String>,
    detail: String,
    note: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/audit.html")]
pub(super) struct AuditPage {
    admin: Option<String>,
    csrf: String,
    actor: String,
    sender: String,
    entries: Vec<AuditRow>,
    page: i64,
    more: bool,
}

#[derive(Deserialize)]
pub(super) struct AuditQuery {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    sender: String,
    page: Option<i64>,
}

type AuditDbRow = (
    Time,
    String,
    String,
    Option<String>,
    serde_json::Value,
    Option<String>,
);

pub(super) async fn audit_log(
    State(state): State<AppState>,
    Admin(session): Admin,
    Query(q): Query<AuditQuery>,
) -> Result<AuditPage, AdminError> {
    let page = q.page.unwrap_or(1).max(1);
    let actor = q.actor.trim().to_owned();
    let sender = q.sender.trim().to_owned();
    let rows: Vec<AuditDbRow> = sqlx::query_as(queries::AUDIT_PAGE)
        .bind(&actor)
        .bind(&sender)
        .bind(PAGE + 1)
        .bind((page - 1) * PAGE)
        .fetch_all(&state.pool)
        .await?;
    let more = rows.len() as i64 > PAGE;
    Ok(AuditPage {
        admin: Some(session.username),
        csrf: session.csrf_token,
        entries: rows
            .into_iter()
            .take(PAGE as usize)
            .map(|(at, actor, action, sender, detail, note)| AuditRow {
                when: time(Some(at)),
                actor,
                action,
                sender,
                detail: detail.to_string(),
                note: note.unwrap_or_default(),
            })
            .collect(),
        actor,
        sender,
        page,
        more,
    })
}
