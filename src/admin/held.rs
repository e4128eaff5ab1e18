//! Decisions on one held invite (release or discard) and reviewers' notes on a sender: forms of
//! the sender page.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use uuid::Uuid;

use super::Dashboard;
use super::error::AdminError;
use super::format::Notice;
use super::senders::{render_sender, same_sender, sender_of, sender_path};
use super::session::Admin;
use crate::moderation::held::{self, InviteDecision};
use crate::moderation::review::{self, ReviewError};

fn back(app: &str, id: &str, notice: Notice) -> Response {
    Redirect::to(&format!("{}?{}", sender_path(app, id), notice.query())).into_response()
}

#[derive(Deserialize)]
pub(super) struct InviteForm {
    csrf: String,
    #[serde(default)]
    sender: String,
    /// The sender's version on the page the decision was made on.
    version: i64,
    decision: String,
}

#[derive(Deserialize)]
pub(super) struct UndoForm {
    csrf: String,
    #[serde(default)]
    sender: String,
}

/// Holds again the released invites of a sender that have not left yet.
pub(super) async fn undo_release(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path((app, id)): Path<(String, String)>,
    axum::Form(form): axum::Form<UndoForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    same_sender(&form.sender, &app, &id)?;
    let sender = sender_of(&dashboard, &app, &id)?;
    let held = held::undo_release(
        &dashboard.pool,
        &sender,
        &admin.0.username,
        Some(admin.0.admin_id),
    )
    .await?;
    let invites = u32::try_from(held).unwrap_or(u32::MAX);
    Ok(back(&app, &id, Notice::ReleaseUndone { invites }))
}

pub(super) async fn decide_invite(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path((app, id, invite)): Path<(String, String, Uuid)>,
    axum::Form(form): axum::Form<InviteForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    same_sender(&form.sender, &app, &id)?;
    let sender = sender_of(&dashboard, &app, &id)?;
    let decision = match form.decision.as_str() {
        "release" => InviteDecision::Release {
            after: dashboard.settle,
        },
        "discard" => InviteDecision::Discard,
        _ => return Err(AdminError::BadForm("decide release or discard".into())),
    };
    let decided = held::decide_invite(
        &dashboard.pool,
        &sender,
        form.version,
        invite,
        decision,
        &admin.0.username,
        Some(admin.0.admin_id),
    )
    .await;
    match decided {
        Ok(changed) => Ok(back(&app, &id, Notice::InviteDecided { changed })),
        // As a review on a stale page: the page again, as it is now, with why.
        Err(e @ ReviewError::Stale { .. }) => {
            let page = render_sender(
                &dashboard,
                &admin,
                &app,
                &sender,
                1,
                None,
                Some(e.to_string()),
            )
            .await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
pub(super) struct NoteForm {
    csrf: String,
    #[serde(default)]
    sender: String,
    body: String,
}

pub(super) async fn add_note(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path((app, id)): Path<(String, String)>,
    axum::Form(form): axum::Form<NoteForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    same_sender(&form.sender, &app, &id)?;
    let sender = sender_of(&dashboard, &app, &id)?;
    let body = form.body.trim();
    if body.is_empty() || body.chars().count() > 2000 {
        return Err(AdminError::BadForm(
            "a note has 1 to 2000 characters".into(),
        ));
    }
    review::add_note(
        &dashboard.pool,
        &sender,
        &admin.0.username,
        Some(admin.0.admin_id),
        body,
    )
    .await?;
    Ok(back(&app, &id, Notice::NoteAdded))
}
