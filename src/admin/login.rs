//! Logging in: the login form, the password check and its throttle.
//!
//! Every login attempt is counted before its password is checked, atomically in the limiter,
//! per (name, client address) and per name: parallel attempts cannot slip past the count. A
//! name under attack from many addresses gets fewer attempts per address, but an address that
//! has not failed itself is never locked out.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::json;

use super::Dashboard;
use super::accounts::{self, AccountError};
use super::error::AdminError;
use super::layout::Layout;
use super::session::{Cookies, logged_in, token};
use crate::audit::{self, Entry};
use crate::http::ClientAddr;
use crate::limiter::{Algorithm, Check, Decision, EdgeMode, Quota};

/// Attempts per (name, client address) in the window.
const PAIR_ATTEMPTS: u64 = 10;
/// Attempts per (name, client address) while the name is under attack.
const PAIR_ATTEMPTS_UNDER_ATTACK: u64 = 3;
/// Attempts per name from all addresses in the window, beyond which it is under attack.
const NAME_CEILING: u64 = 100;
const WINDOW_SECS: u64 = 900;

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
    let token = accounts::random_hex();
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

/// The throttle's answer to one attempt.
enum Throttle {
    Allowed,
    Locked { retry_after_secs: u64 },
}

/// The limiter's two counts of login attempts: per (name, client address) and per name. Names
/// that are no admin's are counted as one, so that guessing with a new name each time escapes
/// no count, and keys carry the admin's id, never the caller's text.
struct LoginCounts {
    quota_pair: Quota,
    quota_name: Quota,
    pair: crate::limiter::LimitKey,
    name: crate::limiter::LimitKey,
}

impl LoginCounts {
    fn new(dashboard: &Dashboard, admin_id: Option<i64>, client: &ClientAddr) -> Self {
        let algorithm = Algorithm::HashCounters(EdgeMode::Harsh);
        let quota_pair = Quota::new(PAIR_ATTEMPTS, WINDOW_SECS, algorithm);
        // The ceiling keeps counting past its limit: an attack that goes on stays on record.
        let quota_name = Quota::new(NAME_CEILING, WINDOW_SECS, algorithm).counting_over_limit();
        let name = admin_id.map_or_else(|| "unknown".to_owned(), |id| format!("#{id}"));
        LoginCounts {
            pair: dashboard.keys.key(
                &format!("admin-login:{name}:{}", client.0),
                "admin-login",
                &quota_pair,
            ),
            name: dashboard.keys.key(
                &format!("admin-login-name:{name}"),
                "admin-login",
                &quota_name,
            ),
            quota_pair,
            quota_name,
        }
    }

    /// Counts this attempt and says whether it may be checked.
    fn judge(pair: &Decision, name: &Decision) -> Throttle {
        let allowed_here = if name.allowed {
            PAIR_ATTEMPTS
        } else {
            PAIR_ATTEMPTS_UNDER_ATTACK
        };
        if pair.allowed && pair.count <= allowed_here {
            return Throttle::Allowed;
        }
        let wait_ms = if pair.allowed {
            pair.reset_after_ms
        } else {
            pair.retry_after_ms
        };
        Throttle::Locked {
            retry_after_secs: wait_ms.div_ceil(1000),
        }
    }
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
    // A name no account could have is no admin's, and costs no query.
    let candidate = if accounts::valid_username(&form.username) {
        accounts::candidate(&dashboard.pool, &form.username).await?
    } else {
        None
    };
    let counts = LoginCounts::new(&dashboard, candidate.as_ref().map(|c| c.id), &client);
    let checks = [
        Check::new(&counts.pair, &counts.quota_pair, 1),
        Check::new(&counts.name, &counts.quota_name, 1),
    ];
    // A store that cannot count attempts must not let guessing run unbounded: refuse.
    let Ok(decisions) = dashboard.limiter.check_batch(&checks, None).await else {
        return Ok(login_form(
            &dashboard,
            form.username,
            Some("Logging in is unavailable for a moment; try again shortly.".into()),
            StatusCode::SERVICE_UNAVAILABLE,
        ));
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
    if let (Some(pair), Some(name)) = (decisions.first(), decisions.get(1))
        && let Throttle::Locked { retry_after_secs } = LoginCounts::judge(pair, name)
    {
        attempt.record(&dashboard, "login_locked").await?;
        let minutes = retry_after_secs.div_ceil(60).max(1);
        return Ok(locked(
            &dashboard,
            form.username,
            format!("Too many failed attempts. Try again in {minutes} minutes."),
            retry_after_secs,
        ));
    }
    let stored = candidate.as_ref().map(|c| c.password_hash.clone());
    let matches = match dashboard.passwords.verify(&form.password, stored).await {
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
            // The right password clears this address's count for the name.
            if let Err(e) = dashboard
                .limiter
                .clear(&[(&counts.pair, &counts.quota_pair)])
                .await
            {
                tracing::warn!(error = %e, "a login's attempts were not cleared");
            }
            let token = accounts::open_session(&dashboard.pool, id).await?;
            attempt.record(&dashboard, "login_succeeded").await?;
            Ok(logged_in(&dashboard, token, "/admin/queue"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, count: u64) -> Decision {
        Decision {
            allowed,
            count,
            limit: 0,
            remaining: 0,
            retry_after_ms: 60_000,
            reset_after_ms: 900_000,
        }
    }

    #[test]
    fn an_address_gets_ten_attempts_and_three_while_its_name_is_attacked() {
        let calm = decision(true, 50);
        let attacked = decision(false, 500);
        assert!(matches!(
            LoginCounts::judge(&decision(true, 10), &calm),
            Throttle::Allowed
        ));
        assert!(matches!(
            LoginCounts::judge(&decision(false, 10), &calm),
            Throttle::Locked {
                retry_after_secs: 60
            }
        ));
        assert!(matches!(
            LoginCounts::judge(&decision(true, 3), &attacked),
            Throttle::Allowed
        ));
        assert!(matches!(
            LoginCounts::judge(&decision(true, 4), &attacked),
            Throttle::Locked {
                retry_after_secs: 900
            }
        ));
    }
}
