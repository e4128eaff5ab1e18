//! The appeals queue: each open appeal, oldest first with its wait, beside the sender's
//! evidence (held and sent invites, flags and their counts, strikes, notes), and its decision:
//! grant (releasing or discarding the held invites) or deny, each with a reply.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::Dashboard;
use super::error::AdminError;
use super::format::{Notice, PageQuery, time, wait, why};
use super::layout::Layout;
use super::senders::{HeldView, sender_path};
use super::session::Admin;
use crate::appeals::{self, Appeal, AppealError, Decision, Lifting, Outcome};
use crate::moderation::review::ReviewError;
use crate::moderation::senders;
use crate::moderation::terms::{self, Term};
use crate::rules::Signal;
use crate::sender_key::SenderKey;

/// Open appeals one page shows.
const SHOWN: i64 = 20;
/// Evidence rows of each kind shown beside an appeal; the sender page has the rest.
const EVIDENCE: usize = 5;
/// The longest reply, in characters (the forms' `maxlength`).
const REPLY_MAX: usize = 2000;

pub(super) struct SentView {
    when: String,
    recipient: String,
    status: String,
    text: String,
}

pub(super) struct AppealView {
    id: String,
    version: i64,
    sender_version: i64,
    held_count: i64,
    app: String,
    sender_id: String,
    sender_path: String,
    text: String,
    received: String,
    waited: String,
    ban_ends: String,
    held: Vec<HeldView>,
    sent: Vec<SentView>,
    /// "rule: observed of limit (signal)", newest first.
    flags: Vec<String>,
    /// "when: term, rules", newest first, removed ones marked.
    strikes: Vec<String>,
    notes: Vec<String>,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/appeals.html")]
pub(super) struct AppealsPage {
    layout: Layout,
    appeals: Vec<AppealView>,
    notice: Option<String>,
    error: Option<String>,
}

async fn view(dashboard: &Dashboard, a: Appeal) -> Result<AppealView, AdminError> {
    let pool = &dashboard.pool;
    let key = SenderKey::new(a.app_id, a.sender_id.as_str());
    let app = dashboard
        .apps
        .get(a.app_id)
        .map_or_else(|| a.app_id.to_string(), |app| app.name.clone());
    let held = senders::held(pool, &key).await?;
    let sent = senders::invites(pool, &key, EVIDENCE as i64, 0).await?;
    let flags = senders::flags(pool, &key).await?;
    let strikes = terms::of_sender(pool, &key).await?;
    let notes = senders::notes(pool, &key).await?;
    let waited = (chrono::Utc::now() - a.created_at).num_seconds();
    Ok(AppealView {
        id: a.id.to_string(),
        version: a.version,
        sender_version: a.sender_version,
        held_count: a.held_stored,
        sender_path: sender_path(&app, &a.sender_id),
        app,
        sender_id: a.sender_id,
        text: a.body,
        received: time(Some(a.created_at)),
        waited: wait(waited),
        ban_ends: a
            .banned_until
            .map_or_else(|| "never: permanent".into(), |t| time(Some(t))),
        held: held
            .into_iter()
            .take(EVIDENCE)
            .map(HeldView::from)
            .collect(),
        sent: sent
            .into_iter()
            .map(|i| SentView {
                when: time(Some(i.created_at)),
                text: i
                    .message
                    .or(i.resource)
                    .or(i.sender_name)
                    .unwrap_or_default(),
                status: format!("{} {}", i.status, why(&i.decision))
                    .trim()
                    .to_owned(),
                recipient: i.recipient,
            })
            .collect(),
        flags: flags
            .into_iter()
            .take(EVIDENCE)
            .map(|f| {
                format!(
                    "{} {}: {} of {} ({})",
                    time(Some(f.created_at)),
                    f.rule_name,
                    f.observed,
                    f.limit_count,
                    Signal::words_of(&f.signal)
                )
            })
            .collect(),
        strikes: strikes
            .into_iter()
            .map(|s| {
                let removed = s
                    .removed_reason
                    .map(|r| format!(" (removed: {r})"))
                    .unwrap_or_default();
                format!(
                    "{}: {}, {}{removed}",
                    time(Some(s.at)),
                    s.term
                        .parse::<Term>()
                        .map_or(s.term.as_str(), |t| t.words()),
                    if s.rules.is_empty() {
                        "by hand".into()
                    } else {
                        s.rules.join(", ")
                    }
                )
            })
            .collect(),
        notes: notes
            .into_iter()
            .take(EVIDENCE)
            .map(|n| format!("{}, {}: {}", n.author, time(Some(n.created_at)), n.body))
            .collect(),
    })
}

async fn render(
    dashboard: &Dashboard,
    admin: &Admin,
    notice: Option<String>,
    error: Option<String>,
) -> Result<AppealsPage, AdminError> {
    let mut views = Vec::new();
    for appeal in appeals::open(&dashboard.pool, SHOWN).await? {
        views.push(view(dashboard, appeal).await?);
    }
    Ok(AppealsPage {
        layout: admin.layout(),
        appeals: views,
        notice,
        error,
    })
}

pub(super) async fn appeals_page(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Query(q): Query<PageQuery>,
) -> Result<AppealsPage, AdminError> {
    let notice = Notice::from_query(&q).map(Notice::text);
    render(&dashboard, &admin, notice, None).await
}

#[derive(Deserialize)]
pub(super) struct DecideForm {
    csrf: String,
    /// The appeal's version, and its sender's, on the page the decision was made on.
    version: i64,
    sender_version: i64,
    held: i64,
    /// `grant_release`, `grant_discard` or `deny`.
    outcome: String,
    #[serde(default)]
    reply: String,
}

pub(super) async fn decide(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path(id): Path<Uuid>,
    axum::Form(form): axum::Form<DecideForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let outcome = match form.outcome.as_str() {
        "grant_release" => Outcome::Grant { release: true },
        "grant_discard" => Outcome::Grant { release: false },
        "deny" => Outcome::Deny,
        _ => return Err(AdminError::BadForm("grant or deny the appeal".into())),
    };
    let reply = form.reply.trim();
    if reply.is_empty() || reply.chars().count() > REPLY_MAX {
        return Err(AdminError::BadForm(format!(
            "write a reply for the app to show its user, at most {REPLY_MAX} characters"
        )));
    }
    let decision = Decision {
        appeal: id,
        seen_version: form.version,
        seen_sender_version: form.sender_version,
        seen_held: form.held,
        outcome,
        reply,
        actor: &admin.0.username,
        admin_id: Some(admin.0.admin_id),
    };
    let lifting = Lifting {
        limiter: &dashboard.limiter,
        keys: &dashboard.keys,
        rules: &dashboard.rules,
        ladder: &dashboard.ladder,
    };
    match appeals::decide(&dashboard.pool, &lifting, &decision).await {
        Ok(()) => {
            let notice = Notice::AppealDecided {
                granted: outcome != Outcome::Deny,
            };
            Ok(Redirect::to(&format!("/admin/appeals?{}", notice.query())).into_response())
        }
        Err(e @ (AppealError::Stale { .. } | AppealError::Review(ReviewError::Stale { .. }))) => {
            let page = render(&dashboard, &admin, None, Some(e.to_string())).await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(AppealError::NotFound(_)) => Err(AdminError::NotFound("No such appeal.".into())),
        Err(AppealError::Review(e)) => Err(e.into()),
        Err(AppealError::Db(e)) => Err(e.into()),
        Err(e @ AppealError::Conflict) => Err(AdminError::BadForm(e.to_string())),
    }
}
