//! The decisions taken on a sender's page: checked against the sender as it is now, a decision
//! that sends mail or discards invites confirmed on a page of its own first, then applied.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::Notice;
use super::layout::Layout;
use super::senders::{render_sender, same_sender, sender_of, sender_path};
use super::session::{Admin, AdminOnly};
use crate::moderation::SenderState;
use crate::moderation::review::{self, Review, ReviewAction, ReviewError};
use crate::moderation::senders;
use crate::moderation::terms::Term;

/// Applies one review decision with the dashboard's stores.
pub(super) async fn apply(
    dashboard: &Dashboard,
    review: &Review<'_>,
) -> Result<review::Reviewed, ReviewError> {
    review::apply(
        &dashboard.pool,
        &dashboard.limiter,
        &dashboard.keys,
        &dashboard.rules,
        &dashboard.ladder,
        review,
    )
    .await
}

#[derive(Deserialize)]
pub(super) struct ReviewForm {
    csrf: String,
    /// The sender the form was made for: it must be the sender of the path.
    #[serde(default)]
    sender: String,
    version: i64,
    /// The held invites the page counted.
    held: Option<i64>,
    action: String,
    #[serde(default)]
    note: String,
    /// `yes` once the reviewer confirmed a decision that sends mail or discards invites.
    #[serde(default)]
    confirmed: String,
    /// The term of a ban the decision confirms: `1d`, `7d`, `30d`, `permanent`; empty for the
    /// ladder's.
    #[serde(default)]
    term: String,
    /// `yes`: the lifted ban was a mistake, and its strike is removed.
    #[serde(default)]
    mistake: String,
}

/// The term a form picked; none for an empty field (the ladder's).
pub(super) fn picked_term(raw: &str) -> Result<Option<Term>, AdminError> {
    match raw.trim() {
        "" => Ok(None),
        term => term.parse().map(Some).map_err(AdminError::BadForm),
    }
}

/// The step before a decision that sends mail or discards invites for good.
#[derive(Template, WebTemplate)]
#[template(path = "admin/confirm.html")]
pub(super) struct ConfirmPage {
    layout: Layout,
    app: String,
    sender_id: String,
    sender_path: String,
    form_id: String,
    version: i64,
    held: i64,
    action: &'static str,
    label: String,
    consequence: &'static str,
    /// Seconds released invites wait before they are sent, while the release can be undone.
    undo_window: Option<u64>,
    note: String,
    term: String,
    /// The ban's term in words, for a decision that bans.
    term_words: &'static str,
    mistake: String,
}

pub(super) async fn review_sender(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path((app, id)): Path<(String, String)>,
    axum::Form(form): axum::Form<ReviewForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    same_sender(&form.sender, &app, &id)?;
    let key = sender_of(&dashboard, &app, &id)?;
    let action: ReviewAction = form.action.parse().map_err(AdminError::BadForm)?;
    let note = super::decision_note(&form.note)?;
    let term = picked_term(&form.term)?;
    let current = senders::find(&dashboard.pool, &key)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("No sender `{id}` of {app}.")))?;
    let state: SenderState = current.state.parse().map_err(AdminError::Internal)?;
    let held = form.held.unwrap_or(current.held_stored);
    // A form of an older page is answered by the version check of `apply`, with its own
    // message; a current one must name a decision that applies, and confirm one that sends
    // mail or discards invites.
    if current.version == form.version {
        if !action.applies_to(state, current.held_stored, current.review_requested) {
            let error = format!(
                "“{}” does not apply to this sender as it is now ({}, {} held); the page \
                 shows the decisions that do.",
                action.label(current.held_stored),
                state.as_str(),
                current.held_stored
            );
            let page = render_sender(&dashboard, &admin, &app, &key, 1, None, Some(error)).await?;
            return Ok((StatusCode::CONFLICT, page).into_response());
        }
        if action.needs_confirming(held) && form.confirmed != "yes" {
            let term_words = match (action.confirms(), term) {
                (false, _) => "",
                (true, Some(term)) => term.words(),
                (true, None) => dashboard
                    .ladder
                    .next_term(&dashboard.pool, &key, chrono::Utc::now())
                    .await?
                    .words(),
            };
            return Ok(ConfirmPage {
                layout: admin.layout(),
                sender_path: sender_path(&app, &id),
                form_id: format!("{app}/{id}"),
                app,
                sender_id: id,
                version: form.version,
                held,
                action: action.as_str(),
                label: action.label(held),
                consequence: action.consequence(),
                undo_window: (action.releases() && !dashboard.settle.is_zero())
                    .then_some(dashboard.settle.as_secs()),
                note: form.note,
                term: form.term,
                term_words,
                mistake: form.mistake,
            }
            .into_response());
        }
    }
    let review = Review {
        sender: &key,
        action,
        seen_version: form.version,
        seen_held: form.held,
        actor: &admin.0.username,
        admin_id: Some(admin.0.admin_id),
        note,
        release_after: dashboard.settle,
        term,
        mistake: form.mistake == "yes",
    };
    let back = |notice: Notice| {
        Redirect::to(&format!("{}?{}", sender_path(&app, &id), notice.query())).into_response()
    };
    match apply(&dashboard, &review).await {
        Ok(done) => Ok(back(Notice::Reviewed {
            action,
            invites: u32::try_from(done.invites_changed).unwrap_or(u32::MAX),
        })),
        Err(e @ ReviewError::Stale { .. }) => {
            let page =
                render_sender(&dashboard, &admin, &app, &key, 1, None, Some(e.to_string())).await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
pub(super) struct TermForm {
    csrf: String,
    #[serde(default)]
    sender: String,
    version: i64,
    term: String,
    #[serde(default)]
    note: String,
}

/// An admin changes the term of a sender's ban, counted from the ban's start; audited.
pub(super) async fn change_term(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path((app, id)): Path<(String, String)>,
    axum::Form(form): axum::Form<TermForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    same_sender(&form.sender, &app, &id)?;
    let key = sender_of(&dashboard, &app, &id)?;
    let term = picked_term(&form.term)?
        .ok_or_else(|| AdminError::BadForm("pick the ban's new term".into()))?;
    let note = super::decision_note(&form.note)?;
    let changed = review::change_term(
        &dashboard.pool,
        &key,
        form.version,
        term,
        &admin.0.username,
        Some(admin.0.admin_id),
        note,
    )
    .await;
    match changed {
        Ok(_) => Ok(Redirect::to(&format!(
            "{}?{}",
            sender_path(&app, &id),
            Notice::TermChanged.query()
        ))
        .into_response()),
        Err(e @ (ReviewError::Stale { .. } | ReviewError::NotBanned(_))) => {
            let page =
                render_sender(&dashboard, &admin, &app, &key, 1, None, Some(e.to_string())).await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}
