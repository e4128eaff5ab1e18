//! The audit log page: who did what to whom, newest first, filtered by admin or sender.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::{PAGE, page_number, time};
use super::layout::Layout;
use super::session::Admin;
use crate::audit::{self, Filter};

pub(super) struct AuditRow {
    when: String,
    actor: String,
    action: String,
    app: Option<String>,
    sender: Option<String>,
    detail: String,
    /// The invite the entry was about (a held one decided, the one that tripped a rule).
    invite: Option<String>,
    note: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/audit.html")]
pub(super) struct AuditPage {
    layout: Layout,
    actor: String,
    sender: String,
    app: String,
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
    #[serde(default)]
    app: String,
    page: Option<i64>,
}

pub(super) async fn audit_log(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Query(q): Query<AuditQuery>,
) -> Result<AuditPage, AdminError> {
    let page = page_number(q.page);
    let actor = q.actor.trim().to_owned();
    let sender = q.sender.trim().to_owned();
    let app = q.app.trim().to_owned();
    let app_id = dashboard.app_filter(&app)?;
    let filter = Filter {
        actor: &actor,
        sender_id: &sender,
        app_id,
    };
    let rows = audit::page(&dashboard.pool, filter, PAGE + 1, (page - 1) * PAGE).await?;
    let more = rows.len() as i64 > PAGE;
    Ok(AuditPage {
        layout: admin.layout(),
        entries: rows
            .into_iter()
            .take(PAGE as usize)
            .map(|e| AuditRow {
                when: time(Some(e.at)),
                actor: e.actor,
                action: e.action,
                app: e.app,
                sender: e.sender_id,
                invite: e.detail["invite"].as_str().map(str::to_owned),
                detail: e.detail.to_string(),
                note: e.note.unwrap_or_default(),
            })
            .collect(),
        actor,
        sender,
        app,
        page,
        more,
    })
}
