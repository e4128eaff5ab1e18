//! Everything a dashboard handler can fail with, as a page: one conversion per domain error,
//! one rendering for all.

use askama::Template;
use askama_web::WebTemplate;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::layout::Layout;
use crate::admin::accounts::AccountError;
use crate::http::ErrorCause;
use crate::moderation::review::ReviewError;
use crate::rules::RuleError;
use crate::rules::edit::SaveError;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("not logged in")]
    LoggedOut,
    #[error("the form expired or did not come from this dashboard; reload the page and try again")]
    Csrf,
    #[error("this page is for admins only")]
    Forbidden,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadForm(String),
    #[error("the database is unavailable; try again in a moment")]
    Db(#[from] sqlx::Error),
    /// Redis failed a step the decision needs; nothing was changed.
    #[error(
        "Redis could not clear the sender's counters, so nothing was changed; try again in a moment"
    )]
    Redis(String),
    /// A fault that is not the user's: logged, and shown without detail.
    #[error("something went wrong; try again")]
    Internal(String),
}

impl From<ReviewError> for AdminError {
    fn from(e: ReviewError) -> Self {
        match e {
            ReviewError::NotFound(id) => AdminError::NotFound(format!("No sender `{id}`.")),
            ReviewError::Db(e) => AdminError::Db(e),
            ReviewError::Limiter(e) => AdminError::Redis(e.to_string()),
            e @ (ReviewError::Stale { .. } | ReviewError::NotBanned(_)) => {
                AdminError::BadForm(e.to_string())
            }
        }
    }
}

impl From<SaveError> for AdminError {
    fn from(e: SaveError) -> Self {
        match e {
            SaveError::Db(e) => AdminError::Db(e),
            SaveError::NotFound => AdminError::NotFound("No such rule.".into()),
            e @ (SaveError::NameTaken(_) | SaveError::SharedKeys { .. } | SaveError::Stale) => {
                AdminError::BadForm(e.to_string())
            }
        }
    }
}

impl From<RuleError> for AdminError {
    fn from(e: RuleError) -> Self {
        match e {
            RuleError::Db(e) => AdminError::Db(e),
            e @ RuleError::Invalid { .. } => AdminError::Internal(e.to_string()),
        }
    }
}

impl From<AccountError> for AdminError {
    fn from(e: AccountError) -> Self {
        match e {
            AccountError::Db(e) => AdminError::Db(e),
            e @ AccountError::Hash(_) => AdminError::Internal(e.to_string()),
            e => AdminError::BadForm(e.to_string()),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/message.html")]
struct MessagePage {
    layout: Layout,
    heading: String,
    text: String,
    back: String,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        if let AdminError::Db(e) = &self
            && crate::db::refused_text(e)
        {
            return AdminError::BadForm(format!("Refused: {}.", crate::db::REFUSED_TEXT))
                .into_response();
        }
        let (status, heading) = match &self {
            AdminError::LoggedOut => return Redirect::to("/admin/login").into_response(),
            AdminError::Csrf => (StatusCode::FORBIDDEN, "Form refused"),
            AdminError::Forbidden => (StatusCode::FORBIDDEN, "Not for your role"),
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "Not found"),
            AdminError::BadForm(_) => (StatusCode::BAD_REQUEST, "Form refused"),
            AdminError::Db(_) | AdminError::Redis(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "Unavailable")
            }
            AdminError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Error"),
        };
        let cause = match &self {
            AdminError::Db(e) => Some(e.to_string()),
            AdminError::Redis(e) => Some(e.clone()),
            AdminError::Internal(e) => Some(e.clone()),
            _ => None,
        };
        let page = MessagePage {
            layout: Layout::logged_out(String::new()),
            heading: heading.into(),
            text: self.to_string(),
            back: "/admin".into(),
        };
        let mut response = (status, page).into_response();
        if let Some(message) = cause {
            ErrorCause {
                message,
                serious: true,
            }
            .attach(&mut response);
        }
        response
    }
}
