//! Who is asking: the logged-in admin extractor, the session and login-form cookies, CSRF
//! tokens, and logging in (with its throttle) and out.

use std::net::SocketAddr;

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{ConnectInfo, FromRef, FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use cookie::time::Duration as CookieAge;
use serde::Deserialize;

use super::Dashboard;
use super::accounts::{self, Session};
use super::error::AdminError;
use crate::limiter::{Algorithm, Check, EdgeMode, Quota};

/// The session cookie.
const SESSION: &str = "sg_session";
/// The login form's token: there is no session yet, so the form's token is checked against
/// this cookie instead (the double-submit pattern).
const LOGIN: &str = "sg_login";
/// Failed logins allowed per username and per client address in 15 minutes.
const LOGIN_ATTEMPTS: u64 = 10;

/// A cookie's value when it has the shape of a token; anything else is ignored.
fn token<'a>(jar: &'a CookieJar, name: &str) -> Option<&'a str> {
    jar.get(name).map(Cookie::value).filter(|v| v.len() == 64)
}

fn cookie(name: &'static str, value: String, path: &'static str, secure: bool) -> Cookie<'static> {
    Cookie::build((name, value))
        .path(path)
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .build()
}

/// A logged-in admin; any other request to a protected page is sent to the login page.
pub struct Admin(pub Session);

impl<S> FromRequestParts<S> for Admin
where
    Dashboard: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AdminError> {
        let dashboard = Dashboard::from_ref(state);
        let jar = CookieJar::from_headers(&parts.headers);
        let token = token(&jar, SESSION).ok_or(AdminError::LoggedOut)?;
        accounts::session(&dashboard.pool, token)
            .await?
            .map(Admin)
            .ok_or(AdminError::LoggedOut)
    }
}

impl Admin {
    pub fn check_csrf(&self, sent: &str) -> Result<(), AdminError> {
        if accounts::same_secret(&self.0.csrf_token, sent) {
            Ok(())
        } else {
            Err(AdminError::Csrf)
        }
    }

    pub fn name(&self) -> Option<String> {
        Some(self.0.username.clone())
    }

    pub fn csrf(&self) -> String {
        self.0.csrf_token.clone()
    }
}

/// Sends a freshly logged-in admin to `to` with the session cookie.
pub fn logged_in(token: String, to: &str, secure: bool) -> Response {
    let mut session = cookie(SESSION, token, "/admin", secure);
    session.set_max_age(CookieAge::hours(accounts::SESSION_HOURS));
    (CookieJar::new().add(session), Redirect::to(to)).into_response()
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/login.html")]
struct LoginPage {
    admin: Option<String>,
    csrf: String,
    username: String,
    error: Option<String>,
}

/// The login page with a fresh form token, also set as a short-lived cookie.
fn login_form(
    username: String,
    error: Option<String>,
    status: StatusCode,
    secure: bool,
) -> Response {
    let token = accounts::random_hex();
    let mut form_cookie = cookie(LOGIN, token.clone(), "/admin/login", secure);
    form_cookie.set_max_age(CookieAge::hours(1));
    let page = LoginPage {
        admin: None,
        csrf: token,
        username,
        error,
    };
    (status, CookieJar::new().add(form_cookie), page).into_response()
}

pub async fn login_page(State(dashboard): State<Dashboard>) -> Response {
    login_form(
        String::new(),
        None,
        StatusCode::OK,
        dashboard.secure_cookies,
    )
}

#[derive(Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    csrf: String,
    username: String,
    password: String,
}

/// Failed logins are counted per username and per client address with the project's limiter.
fn login_checks(username: &str, client: &SocketAddr) -> (Quota, [String; 2]) {
    let quota = Quota::new(
        LOGIN_ATTEMPTS,
        900,
        Algorithm::HashCounters(EdgeMode::Harsh),
    );
    let name = username.to_lowercase();
    (
        quota,
        [
            format!("admin-login:{name}"),
            format!("admin-login-ip:{}", client.ip()),
        ],
    )
}

pub async fn log_in(
    State(dashboard): State<Dashboard>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    jar: CookieJar,
    axum::Form(form): axum::Form<LoginForm>,
) -> Result<Response, AdminError> {
    let expected = token(&jar, LOGIN).unwrap_or_default();
    if expected.is_empty() || !accounts::same_secret(expected, &form.csrf) {
        return Err(AdminError::Csrf);
    }
    let (quota, subjects) = login_checks(&form.username, &client);
    let keys = subjects.map(|s| dashboard.keys.key(&s, "admin-login", &quota));
    let checks = |cost| -> Vec<Check<'_>> {
        keys.iter()
            .map(|key| Check {
                key,
                quota: &quota,
                cost,
            })
            .collect()
    };
    let secure = dashboard.secure_cookies;
    let refuse = |text: String, status: StatusCode| {
        login_form(form.username.clone(), Some(text), status, secure)
    };
    // A store that cannot count failures must not let guessing run unbounded: refuse.
    let Ok(counts) = dashboard.limiter.check_batch(&checks(0), None).await else {
        return Ok(refuse(
            "Logging in is unavailable for a moment; try again shortly.".into(),
            StatusCode::SERVICE_UNAVAILABLE,
        ));
    };
    if counts.iter().any(|d| d.count >= LOGIN_ATTEMPTS) {
        let wait = counts.iter().map(|d| d.reset_after_ms).max().unwrap_or(0);
        return Ok(refuse(
            format!(
                "Too many failed attempts. Try again in {} minutes.",
                wait.div_ceil(60_000).max(1)
            ),
            StatusCode::TOO_MANY_REQUESTS,
        ));
    }
    match accounts::log_in(&dashboard.pool, &form.username, &form.password).await {
        Ok(Some((token, _))) => Ok(logged_in(token, "/admin/queue", secure)),
        Ok(None) => {
            if let Err(e) = dashboard.limiter.check_batch(&checks(1), None).await {
                tracing::warn!(error = %e, "could not count a failed login");
            }
            Ok(refuse(
                "Wrong username or password.".into(),
                StatusCode::UNAUTHORIZED,
            ))
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

pub async fn log_out(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    jar: CookieJar,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    if let Some(token) = token(&jar, SESSION) {
        accounts::log_out(&dashboard.pool, token).await?;
    }
    let mut gone = cookie(SESSION, String::new(), "/admin", dashboard.secure_cookies);
    gone.set_max_age(CookieAge::ZERO);
    Ok((jar.add(gone), Redirect::to("/admin/login")).into_response())
}
