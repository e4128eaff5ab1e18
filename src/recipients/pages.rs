//! The pages a recipient reaches from an email: `/r/{invite}/unsubscribe` and
//! `/r/{invite}/report`, each with the link's token in `t`. A GET only shows a page with a
//! button (mail scanners follow links); a POST acts, whatever its body, as the one-click
//! unsubscribe of RFC 8058 does. Acting twice changes nothing more. A link that does not verify,
//! or names no invite, is a 404 like any unknown page.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::{LinkKey, Purpose};
use crate::apps::AppCache;
use crate::outcomes::{OutcomeType, Outcomes};

/// What the pages need.
#[derive(Clone)]
pub struct RecipientPages {
    pub pool: PgPool,
    pub key: LinkKey,
    pub apps: AppCache,
    pub outcomes: Outcomes,
}

#[derive(Deserialize)]
pub struct LinkQuery {
    #[serde(default)]
    t: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "recipient/page.html")]
struct Page {
    title: String,
    text: String,
    /// The form's button and where it posts, on pages that ask before acting.
    button: Option<&'static str>,
    action: String,
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "30")],
        "this page is unavailable for a moment; please try again",
    )
        .into_response()
}

/// The address with most of its local part hidden: the page may be seen by whoever holds the
/// link.
fn masked(recipient: &str) -> String {
    match recipient.split_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}…@{domain}")
        }
        None => "your address".into(),
    }
}

/// The invite of a link that verifies, with its product's name and the masked recipient.
async fn linked(
    pages: &RecipientPages,
    purpose: Purpose,
    invite: &str,
    token: &str,
) -> Result<(Uuid, String, String), Response> {
    let invite: Uuid = invite.parse().map_err(|_| not_found())?;
    if !pages.key.verify(purpose, invite, token) {
        return Err(not_found());
    }
    let linked = super::invite(&pages.pool, invite)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "recipient page: invite lookup failed");
            unavailable()
        })?
        .ok_or_else(not_found)?;
    let product = pages
        .apps
        .get(linked.app_id)
        .map(|a| a.product_or_default().to_owned())
        .unwrap_or_else(|| "the app".into());
    Ok((invite, product, masked(&linked.recipient)))
}

fn action(purpose: Purpose, invite: Uuid, token: &str) -> String {
    format!(
        "/r/{invite}/{}?t={}",
        purpose.as_str(),
        crate::urls::component(token)
    )
}

pub async fn unsubscribe_page(
    State(pages): State<RecipientPages>,
    Path(invite): Path<String>,
    Query(q): Query<LinkQuery>,
) -> Response {
    match linked(&pages, Purpose::Unsubscribe, &invite, &q.t).await {
        Ok((invite, product, to)) => Page {
            title: format!("Stop invitations from {product}?"),
            text: format!("{to} will get no more invitations sent through {product}."),
            button: Some("Unsubscribe"),
            action: action(Purpose::Unsubscribe, invite, &q.t),
        }
        .into_response(),
        Err(answer) => answer,
    }
}

/// The one-click unsubscribe (RFC 8058) and the page's button alike.
pub async fn unsubscribe(
    State(pages): State<RecipientPages>,
    Path(invite): Path<String>,
    Query(q): Query<LinkQuery>,
) -> Response {
    let (invite, product, to) = match linked(&pages, Purpose::Unsubscribe, &invite, &q.t).await {
        Ok(found) => found,
        Err(answer) => return answer,
    };
    if let Err(e) = super::unsubscribe(&pages.pool, invite).await {
        tracing::warn!(error = %e, "unsubscribe failed");
        return unavailable();
    }
    Page {
        title: "You are unsubscribed".into(),
        text: format!("{to} will get no more invitations sent through {product}."),
        button: None,
        action: String::new(),
    }
    .into_response()
}

pub async fn report_page(
    State(pages): State<RecipientPages>,
    Path(invite): Path<String>,
    Query(q): Query<LinkQuery>,
) -> Response {
    match linked(&pages, Purpose::Report, &invite, &q.t).await {
        Ok((invite, product, _)) => Page {
            title: "Report this invitation?".into(),
            text: format!(
                "If you did not want this invitation, or it looks like spam, tell us: {product} will review the account that sent it."
            ),
            button: Some("Report as abuse"),
            action: action(Purpose::Report, invite, &q.t),
        }
        .into_response(),
        Err(answer) => answer,
    }
}

pub async fn report(
    State(pages): State<RecipientPages>,
    Path(invite): Path<String>,
    Query(q): Query<LinkQuery>,
) -> Response {
    let invite = match linked(&pages, Purpose::Report, &invite, &q.t).await {
        Ok((invite, _, _)) => invite,
        Err(answer) => return answer,
    };
    if let Err(e) = pages
        .outcomes
        .record(invite, OutcomeType::Complaint, None)
        .await
    {
        tracing::warn!(error = %e, "report not recorded");
        return unavailable();
    }
    Page {
        title: "Thank you".into(),
        text: "Your report was recorded. The account that sent the invitation will be reviewed."
            .into(),
        button: None,
        action: String::new(),
    }
    .into_response()
}
