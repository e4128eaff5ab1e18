//! Who is asking: the logged-in admin extractors (any role, or admins only), the session and
//! login-form cookies, CSRF tokens, and logging out. Logging in is [`super::login`].

use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use cookie::time::Duration as CookieAge;
use serde::Deserialize;

use super::Dashboard;
use super::accounts::{self, Role, Session};
use super::error::AdminError;
use super::layout::Layout;

/// The cookies' names and scope: behind https, `__Host-` cookies (Secure, the whole host,
/// no Domain), which a sibling subdomain cannot plant.
#[derive(Clone, Copy)]
pub(super) struct Cookies {
    secure: bool,
}

impl Cookies {
    pub(super) fn of(dashboard: &Dashboard) -> Cookies {
        Cookies {
            secure: dashboard.secure_cookies,
        }
    }

    fn session_name(self) -> &'static str {
        if self.secure {
            "__Host-sg_session"
        } else {
            "sg_session"
        }
    }

    pub(super) fn login_name(self) -> &'static str {
        if self.secure {
            "__Host-sg_login"
        } else {
            "sg_login"
        }
    }

    pub(super) fn device_name(self) -> &'static str {
        if self.secure {
            "__Host-sg_device"
        } else {
            "sg_device"
        }
    }

    fn build(
        self,
        name: &'static str,
        value: String,
        path: &'static str,
        age: CookieAge,
    ) -> Cookie<'static> {
        Cookie::build((name, value))
            .path(if self.secure { "/" } else { path })
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure)
            .max_age(age)
            .build()
    }

    fn session(self, token: String) -> Cookie<'static> {
        self.build(
            self.session_name(),
            token,
            "/admin",
            CookieAge::hours(accounts::SESSION_HOURS),
        )
    }

    pub(super) fn login_form(self, token: String) -> Cookie<'static> {
        self.build(
            self.login_name(),
            token,
            "/admin/login",
            CookieAge::hours(1),
        )
    }

    /// A browser that logged in, for months: only the login form reads it.
    pub(super) fn device(self, value: String) -> Cookie<'static> {
        self.build(
            self.device_name(),
            value,
            "/admin/login",
            CookieAge::days(180),
        )
    }
}

/// A cookie's value when it has the shape of a token; anything else is ignored.
pub(super) fn token<'a>(jar: &'a CookieJar, name: &str) -> Option<&'a str> {
    jar.get(name).map(Cookie::value).filter(|v| v.len() == 64)
}

/// A logged-in admin of any role; any other request to a protected page is sent to the login
/// page.
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
        let cookies = Cookies::of(&dashboard);
        let token = token(&jar, cookies.session_name()).ok_or(AdminError::LoggedOut)?;
        accounts::session(&dashboard.pool, token)
            .await?
            .map(Admin)
            .ok_or(AdminError::LoggedOut)
    }
}

/// A logged-in admin with the `admin` role: rules, keys and accounts. Moderators get 403.
pub struct AdminOnly(pub Admin);

impl<S> FromRequestParts<S> for AdminOnly
where
    Dashboard: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AdminError> {
        let admin = Admin::from_request_parts(parts, state).await?;
        if admin.0.role != Role::Admin {
            return Err(AdminError::Forbidden);
        }
        Ok(AdminOnly(admin))
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

    /// The layout of this admin's pages.
    pub fn layout(&self) -> Layout {
        Layout::of(&self.0)
    }
}

/// Sends a freshly logged-in admin to `to` with the session cookie.
pub fn logged_in(dashboard: &Dashboard, token: String, to: &str) -> Response {
    (
        CookieJar::new().add(Cookies::of(dashboard).session(token)),
        Redirect::to(to),
    )
        .into_response()
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
    let cookies = Cookies::of(&dashboard);
    if let Some(token) = token(&jar, cookies.session_name()) {
        accounts::log_out(&dashboard.pool, token).await?;
    }
    let mut gone = cookies.session(String::new());
    gone.set_max_age(CookieAge::ZERO);
    Ok((jar.add(gone), Redirect::to("/admin/login")).into_response())
}
