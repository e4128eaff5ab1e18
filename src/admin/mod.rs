//! The dashboard under `/admin`: server-rendered pages (askama), one file per page or concern.
//! This file holds the router and the dashboard's state (the security headers are on every
//! answer of the service: [`crate::http::security_headers`]).

mod access;
pub mod accounts;
mod appeals;
mod apps;
mod audit;
mod campaigns;
mod decide;
mod error;
mod format;
mod held;
mod layout;
mod login;
mod overview;
mod queue;
mod rules;
mod senders;
mod session;
pub mod setup;
mod throttle;

use axum::Router;
use axum::extract::FromRef;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use sqlx::PgPool;

use crate::apps::AppCache;
use crate::http::TrustedProxies;
use crate::limiter::{KeyPrefix, Limiter};
use crate::rules::RuleCache;

pub use throttle::LoginKey;

/// What the dashboard's handlers need.
#[derive(Clone)]
pub struct Dashboard {
    pub pool: PgPool,
    pub limiter: Limiter,
    /// The prefix of the counters' keys, to show and clear a sender's counters.
    pub keys: KeyPrefix,
    pub rules: RuleCache,
    pub apps: AppCache,
    /// Mark cookies `Secure` (the public URL is https).
    pub secure_cookies: bool,
    /// The first-admin link, while no admin exists.
    pub setup: setup::SetupLink,
    /// Password hashing, off the async workers and a few at a time.
    pub passwords: accounts::Passwords,
    /// Names the login throttle's counters and signs known-device cookies.
    pub login_key: LoginKey,
    /// Days a sender counts as new (for backtests of `new_senders_only` rules and the queue).
    pub new_sender_days: i64,
    /// How long released invites wait before they are sent: a release can be undone meanwhile.
    pub settle: std::time::Duration,
    /// The default terms of confirmed bans (`SENDGUARD_BAN_LADDER`).
    pub ladder: crate::moderation::terms::Ladder,
}

impl Dashboard {
    /// The app named in a path or form.
    fn app(&self, name: &str) -> Result<std::sync::Arc<crate::apps::App>, error::AdminError> {
        self.apps
            .by_name(name)
            .ok_or_else(|| error::AdminError::NotFound(format!("There is no app `{name}`.")))
    }

    /// Every app's name, for a form's choice of app.
    fn app_names(&self) -> Vec<String> {
        self.apps.all().iter().map(|a| a.name.clone()).collect()
    }

    /// The app a page is filtered by: none for an empty filter.
    fn app_filter(&self, name: &str) -> Result<Option<i64>, error::AdminError> {
        match name.trim() {
            "" => Ok(None),
            name => self.app(name).map(|a| Some(a.id)),
        }
    }
}

pub fn router<S>() -> Router<S>
where
    Dashboard: FromRef<S>,
    TrustedProxies: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/admin", get(overview::overview))
        .route("/admin/audit", get(audit::audit_log))
        .route("/admin/apps", get(apps::list))
        .route("/admin/apps/{name}", get(apps::app_page))
        .route(
            "/admin/apps/{name}/suppressions/remove",
            post(apps::unsuppress),
        )
        .route("/admin/keys", get(access::keys).post(access::create_key))
        .route("/admin/keys/{name}/revoke", post(access::revoke_key))
        .route("/admin/admins", get(access::admins).post(access::add_admin))
        .route(
            "/admin/admins/{username}/disable",
            post(access::disable_admin),
        )
        .route("/admin/rules", get(rules::list))
        .route("/admin/rules/new", get(rules::new_form).post(rules::create))
        .route(
            "/admin/rules/{id}",
            get(rules::edit_form).post(rules::update),
        )
        .route("/admin/login", get(login::login_page).post(login::log_in))
        .route("/admin/setup", get(setup::form).post(setup::create))
        .route("/admin/logout", post(session::log_out))
        .route("/admin/appeals", get(appeals::appeals_page))
        .route("/admin/appeals/{id}/decide", post(appeals::decide))
        .route("/admin/queue", get(queue::queue))
        .route("/admin/campaigns", get(campaigns::list))
        .route("/admin/campaigns/{id}", get(campaigns::campaign_page))
        .route("/admin/campaigns/{id}/decide", post(campaigns::decide))
        .route("/admin/queue/confirm", post(queue::confirm_selected))
        .route("/admin/senders", get(senders::find_sender))
        .route("/admin/senders/{app}/{id}", get(senders::sender_page))
        .route(
            "/admin/senders/{app}/{id}/review",
            post(decide::review_sender),
        )
        .route(
            "/admin/senders/{app}/{id}/invites/{invite}",
            post(held::decide_invite),
        )
        .route("/admin/senders/{app}/{id}/notes", post(held::add_note))
        .route(
            "/admin/senders/{app}/{id}/undo-release",
            post(held::undo_release),
        )
        .route("/admin/senders/{app}/{id}/term", post(decide::change_term))
        .route("/admin/static/admin.css", get(stylesheet))
}

/// The longest note a decision carries into the audit log, in characters (as the forms'
/// `maxlength` counts them).
const DECISION_NOTE: usize = 500;

/// The note of a decision form: none when blank, refused when too long rather than dropped,
/// because the audit log must say why.
fn decision_note(raw: &str) -> Result<Option<&str>, error::AdminError> {
    match raw.trim() {
        "" => Ok(None),
        note if note.chars().count() <= DECISION_NOTE => Ok(Some(note)),
        _ => Err(error::AdminError::BadForm(format!(
            "a note has at most {DECISION_NOTE} characters"
        ))),
    }
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/admin.css"),
    )
}
