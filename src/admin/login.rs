//! Logging in: the login form and the password check, behind the throttle
//! ([`super::throttle`]).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::json;

use super::Dashboard;
use super::accounts::{self, AccountError, Lane};
use super::error::AdminError;
use super::layout::Layout;
use super::session::{Cookies, logged_in, token};
use super::throttle::{self, Attempts, Verdict};
use crate::audit::{self, Entry};
use crate::http::ClientAddr;

#[derive(Template, WebTemplate)]
#[template(path = "admin/login.html")]
struct LoginPage {
    layout: Layout,
    username: String,
    error: Option<String>,
}

/// The login page with a fresh form token, also set as a short-lived cookie.
fn login_form(
    dashboard: &Dashboard,
    username: String,
    error: Option<String>,
    status: StatusCode,
) -> Response {
    let token = crate::tokens::random_hex();
    let cookies = Cookies::of(dashboard);
    let page = LoginPage {
        layout: Layout::logged_out(token.clone()),
        username,
        error,
    };
    (
        status,
        CookieJar::new().add(cookies.login_form(token)),
        page,
    )
        .into_response()
}

/// The login page refused with 429 and when to try again.
fn locked(
    dashboard: &Dashboard,
    username: String,
    text: String,
    retry_after_secs: u64,
) -> Response {
    let mut response = login_form(
        dashboard,
        username,
        Some(text),
        StatusCode::TOO_MANY_REQUESTS,
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after_secs.max(1)),
    );
    response
}

pub async fn login_page(State(dashboard): State<Dashboard>) -> Response {
    login_form(&dashboard, String::new(), None, StatusCode::OK)
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    csrf: String,
    username: String,
    password: String,
}

/// One login attempt, as the audit log records it.
struct Attempt {
    actor: String,
    admin_id: Option<i64>,
    client: String,
}

impl Attempt {
    async fn record(&self, dashboard: &Dashboard, action: &str) -> Result<(), sqlx::Error> {
        let entry = Entry {
            admin_id: self.admin_id,
            detail: json!({"client": self.client}),
            ..Entry::new(&self.actor, action)
        };
        audit::write(&dashboard.pool, entry).await
    }
}

pub async fn log_in(
    State(dashboard): State<Dashboard>,
    client: ClientAddr,
    jar: CookieJar,
    axum::Form(form): axum::Form<LoginForm>,
) -> Result<Response, AdminError> {
    let cookies = Cookies::of(&dashboard);
    let expected = token(&jar, cookies.login_name()).unwrap_or_default();
    if expected.is_empty() || !accounts::same_secret(expected, &form.csrf) {
        return Err(AdminError::Csrf);
    }
    let device = jar
        .get(cookies.device_name())
        .and_then(|c| dashboard.login_key.device(c.value(), &form.username));
    let attempts = Attempts::new(&dashboard, &form.username, &client, device);
    // A store that cannot count attempts must not let guessing run unbounded: refuse.
    let Ok(verdict) = attempts.judge(&dashboard.limiter).await else {
        return Ok(login_form(
            &dashboard,
            form.username,
            Some("Logging in is unavailable for a moment; try again shortly.".into()),
            StatusCode::SERVICE_UNAVAILABLE,
        ));
    };
    if let Verdict::Locked { retry_after_secs } = verdict {
        throttle::record_refusal(&dashboard, &client).await?;
        let minutes = retry_after_secs.div_ceil(60).max(1);
        return Ok(locked(
            &dashboard,
            form.username,
            format!("Too many failed attempts. Try again in {minutes} minutes."),
            retry_after_secs,
        ));
    }
    // Looked up only once the throttle let the attempt through, which it decided without
    // knowing whether the name is an admin's. A name no account could have costs no query.
    let candidate = if accounts::valid_username(&form.username) {
        accounts::candidate(&dashboard.pool, &form.username).await?
    } else {
        None
    };
    let attempt = Attempt {
        // A name that is no admin's is the caller's text: it is not written to the log.
        actor: if candidate.is_some() {
            form.username.clone()
        } else {
            "unknown".to_owned()
        },
        admin_id: candidate.as_ref().map(|c| c.id),
        client: client.0.to_string(),
    };
    let lane = if device.is_some() {
        Lane::KnownDevice
    } else {
        Lane::Shared
    };
    let stored = candidate.as_ref().map(|c| c.password_hash.clone());
    let matches = match dashboard
        .passwords
        .verify(lane, &form.password, stored)
        .await
    {
        Ok(matches) => matches,
        Err(AccountError::Busy) => {
            return Ok(locked(
                &dashboard,
                form.username,
                "Too many logins at once; try again in a moment.".into(),
                1,
            ));
        }
        Err(e) => return Err(e.into()),
    };
    match attempt.admin_id.filter(|_| matches) {
        Some(id) => {
            // The right password clears this source's count for the name.
            if let Err(e) = attempts.clear(&dashboard.limiter).await {
                tracing::warn!(error = %e, "a login's attempts were not cleared");
            }
            let token = accounts::open_session(&dashboard.pool, id).await?;
            attempt.record(&dashboard, "login_succeeded").await?;
            // This browser is now a known device for the name: a flood of guesses from others
            // does not lock it out.
            let device = cookies.device(dashboard.login_key.device_cookie(&form.username));
            Ok((
                CookieJar::new().add(device),
                logged_in(&dashboard, token, "/admin/queue"),
            )
                .into_response())
        }
        None => {
            attempt.record(&dashboard, "login_failed").await?;
            Ok(login_form(
                &dashboard,
                form.username,
                Some("Wrong username or password.".into()),
                StatusCode::UNAUTHORIZED,
            ))
        }
    }
}
