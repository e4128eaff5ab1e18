//! The first admin: while none exists, `serve` logs a one-time link, valid for an hour, to a
//! page that creates one. Each instance has its own link; using any of them ends the setup.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::Dashboard;
use super::accounts;
use super::error::AdminError;
use super::layout::Layout;
use super::session::logged_in;

const VALID_FOR: Duration = Duration::from_secs(3600);

/// The pending link of this instance, if any.
#[derive(Clone, Default, Debug)]
pub struct SetupLink {
    pending: Arc<Mutex<Option<(String, Instant)>>>,
}

impl SetupLink {
    /// Creates a fresh token and returns it.
    pub fn issue(&self) -> String {
        let token = crate::tokens::random_hex();
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((token.clone(), Instant::now() + VALID_FOR));
        token
    }

    fn valid(&self, token: &str) -> bool {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .as_ref()
            .is_some_and(|(t, until)| Instant::now() < *until && accounts::same_secret(t, token))
    }

    fn consume(&self) {
        *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/setup.html")]
pub(super) struct SetupPage {
    layout: Layout,
    token: String,
    username: String,
    error: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct TokenQuery {
    #[serde(default)]
    token: String,
}

fn expired() -> AdminError {
    AdminError::NotFound(
        "This setup link is not valid (any more). Use `sendguard admin add`.".into(),
    )
}

pub(super) async fn form(
    State(dashboard): State<Dashboard>,
    Query(q): Query<TokenQuery>,
) -> Result<SetupPage, AdminError> {
    if !dashboard.setup.valid(&q.token) || accounts::any_exists(&dashboard.pool).await? {
        return Err(expired());
    }
    Ok(SetupPage {
        layout: Layout::logged_out(String::new()),
        token: q.token,
        username: String::new(),
        error: None,
    })
}

#[derive(Deserialize)]
pub(super) struct SetupForm {
    token: String,
    username: String,
    password: String,
    password2: String,
}

pub(super) async fn create(
    State(dashboard): State<Dashboard>,
    axum::Form(form): axum::Form<SetupForm>,
) -> Result<Response, AdminError> {
    if !dashboard.setup.valid(&form.token) || accounts::any_exists(&dashboard.pool).await? {
        return Err(expired());
    }
    let again = |error: String| {
        let page = SetupPage {
            layout: Layout::logged_out(String::new()),
            token: form.token.clone(),
            username: form.username.clone(),
            error: Some(error),
        };
        (StatusCode::UNPROCESSABLE_ENTITY, page).into_response()
    };
    if form.password != form.password2 {
        return Ok(again("The two passwords differ.".into()));
    }
    let created = accounts::add_first(
        &dashboard.pool,
        &dashboard.passwords,
        &form.username,
        &form.password,
    )
    .await;
    let id = match created {
        Ok(Some(id)) => id,
        // Another setup, here or on another instance, was first.
        Ok(None) => return Err(expired()),
        Err(e @ (accounts::AccountError::Username | accounts::AccountError::WeakPassword)) => {
            return Ok(again(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    dashboard.setup.consume();
    tracing::info!(admin = %form.username, "first admin created");
    let token = accounts::open_session(&dashboard.pool, id).await?;
    Ok(logged_in(&dashboard, token, "/admin"))
}
