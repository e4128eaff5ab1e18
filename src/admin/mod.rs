//! The dashboard under `/admin`: server-rendered pages (askama), login with sessions, a CSRF
//! token in every state-changing form, and security headers on every response.

pub mod accounts;
mod overview;
pub mod queries;
mod rules;
pub mod setup;

use askama::Template;
use askama_web::WebTemplate;
use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::net::SocketAddr;

use crate::AppState;
use crate::limiter::{Algorithm, Check, EdgeMode, Quota};
use crate::moderation::review::{self, Review, ReviewAction, ReviewError};
use crate::rules::Scope;
use accounts::Session;

pub(super) type Time = chrono::DateTime<chrono::Utc>;

const COOKIE: &str = "sg_session";
pub(super) const PAGE: i64 = 25;
/// Failed logins allowed per username and per client address in 15 minutes.
const LOGIN_ATTEMPTS: u64 = 10;

/// Dashboard settings.
#[derive(Clone, Debug)]
pub struct AdminSettings {
    /// Mark cookies `Secure` (the public URL is https).
    pub secure_cookies: bool,
    /// The first-admin link, while no admin exists.
    pub setup: setup::SetupLink,
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/admin", get(overview::overview))
        .route("/admin/audit", get(overview::audit_log))
        .route("/admin/rules", get(rules::list))
        .route("/admin/rules/new", get(rules::new_form).post(rules::create))
        .route(
            "/admin/rules/{id}",
            get(rules::edit_form).post(rules::update),
        )
        .route("/admin/login", get(login_page).post(log_in))
        .route("/admin/setup", get(setup::form).post(setup::create))
        .route("/admin/logout", post(log_out))
        .route("/admin/queue", get(queue))
        .route("/admin/queue/confirm", post(confirm_selected))
        .route("/admin/senders", get(find_sender))
        .route("/admin/senders/{id}", get(sender_page))
        .route("/admin/senders/{id}/review", post(review_sender))
        .route("/admin/static/admin.css", get(stylesheet))
        .layer(axum::middleware::map_response(security_headers))
}

/// Strict headers on every dashboard response: no scripts at all, no framing, no sniffing.
async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/admin.css"),
    )
}

/// Everything a dashboard handler can fail with, as a page.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("not logged in")]
    LoggedOut,
    #[error("the form expired or did not come from this dashboard; reload the page and try again")]
    Csrf,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadForm(String),
    #[error("the database is unavailable; try again in a moment")]
    Db(#[from] sqlx::Error),
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/message.html")]
struct MessagePage {
    admin: Option<String>,
    csrf: String,
    heading: String,
    text: String,
    back: String,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (status, heading) = match &self {
            AdminError::LoggedOut => return Redirect::to("/admin/login").into_response(),
            AdminError::Csrf => (StatusCode::FORBIDDEN, "Form refused"),
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "Not found"),
            AdminError::BadForm(_) => (StatusCode::BAD_REQUEST, "Form refused"),
            AdminError::Db(e) => {
                tracing::error!(error = %e, "dashboard query failed");
                (StatusCode::SERVICE_UNAVAILABLE, "Unavailable")
            }
        };
        let page = MessagePage {
            admin: None,
            csrf: String::new(),
            heading: heading.into(),
            text: self.to_string(),
            back: "/admin".into(),
        };
        (status, page).into_response()
    }
}

/// A logged-in admin; any other request to a protected page is sent to the login page.
pub struct Admin(pub Session);

impl FromRequestParts<AppState> for Admin {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, AdminError> {
        let token = session_cookie(&parts.headers).ok_or(AdminError::LoggedOut)?;
        accounts::session(&state.pool, &token)
            .await?
            .map(Admin)
            .ok_or(AdminError::LoggedOut)
    }
}

fn cookie_value(headers: &HeaderMap, wanted: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.to_owned())
        .filter(|v| v.len() == 64)
}

fn session_cookie(headers: &HeaderMap) -> Option<String> {
    cookie_value(headers, COOKIE)
}

impl Admin {
    pub(super) fn check_csrf(&self, sent: &str) -> Result<(), AdminError> {
        if accounts::same_secret(&self.0.csrf_token, sent) {
            Ok(())
        } else {
            Err(AdminError::Csrf)
        }
    }
}

/// Sends a freshly logged-in admin to `to` with the session cookie.
pub(super) fn logged_in(token: &str, to: &str, secure: bool) -> Response {
    let mut response = Redirect::to(to).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        cookie(token, accounts::SESSION_HOURS * 3600, secure),
    );
    response
}

fn cookie(value: &str, max_age: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{COOKIE}={value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    );
    HeaderValue::from_str(&text)
        .unwrap_or_else(|_| HeaderValue::from_static("sg_session=; Max-Age=0"))
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/login.html")]
struct LoginPage {
    admin: Option<String>,
    csrf: String,
    username: String,
    error: Option<String>,
}

/// Cookie of the login form's token: there is no session yet, so the form's token is checked
/// against this cookie instead (the double-submit pattern).
const LOGIN_COOKIE: &str = "sg_login";

/// The login page with a fresh form token, also set as a short-lived cookie.
fn login_form(
    username: String,
    error: Option<String>,
    status: StatusCode,
    secure: bool,
) -> Response {
    let token = accounts::random_hex();
    let secure = if secure { "; Secure" } else { "" };
    let cookie = format!(
        "{LOGIN_COOKIE}={token}; Path=/admin/login; HttpOnly; SameSite=Strict; Max-Age=3600{secure}"
    );
    let page = LoginPage {
        admin: None,
        csrf: token,
        username,
        error,
    };
    let mut response = (status, page).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

async fn login_page(State(state): State<AppState>) -> Response {
    login_form(
        String::new(),
        None,
        StatusCode::OK,
        state.admin.secure_cookies,
    )
}

#[derive(Deserialize)]
struct LoginForm {
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

async fn log_in(
    State(state): State<AppState>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Result<Response, AdminError> {
    let expected = cookie_value(&headers, LOGIN_COOKIE).unwrap_or_default();
    if expected.is_empty() || !accounts::same_secret(&expected, &form.csrf) {
        return Err(AdminError::Csrf);
    }
    let (quota, subjects) = login_checks(&form.username, &client);
    let keys = subjects.map(|s| state.invites.keys.key(&s, "admin-login", &quota));
    let checks = |cost| -> Vec<Check<'_>> {
        keys.iter()
            .map(|key| Check {
                key,
                quota: &quota,
                cost,
            })
            .collect()
    };
    let secure = state.admin.secure_cookies;
    let refuse = |text: String, status: StatusCode| {
        login_form(form.username.clone(), Some(text), status, secure)
    };
    // A store that cannot count failures must not let guessing run unbounded: refuse.
    let Ok(counts) = state.limiter.check_batch(&checks(0), None).await else {
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
    match accounts::log_in(&state.pool, &form.username, &form.password).await {
        Ok(Some((token, _))) => Ok(logged_in(
            &token,
            "/admin/queue",
            state.admin.secure_cookies,
        )),
        Ok(None) => {
            if let Err(e) = state.limiter.check_batch(&checks(1), None).await {
                tracing::warn!(error = %e, "could not count a failed login");
            }
            Ok(refuse(
                "Wrong username or password.".into(),
                StatusCode::UNAUTHORIZED,
            ))
        }
        Err(accounts::AccountError::Db(e)) => Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "login failed");
            Ok(refuse(
                "Logging in failed; try again.".into(),
                StatusCode::INTERNAL_SERVER_ERROR,
            ))
        }
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

async fn log_out(
    State(state): State<AppState>,
    admin: Admin,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    if let Some(token) = session_cookie(&headers) {
        accounts::log_out(&state.pool, &token).await?;
    }
    let mut response = Redirect::to("/admin/login").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        cookie("", 0, state.admin.secure_cookies),
    );
    Ok(response)
}

#[derive(Deserialize)]
struct PageQuery {
    page: Option<i64>,
    done: Option<String>,
}

struct QueueRow {
    id: String,
    version: i64,
    rule: String,
    observed: i64,
    limit: i64,
    first_attempt: String,
    last_attempt: String,
    held: i64,
    domains: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/queue.html")]
struct QueuePage {
    admin: Option<String>,
    csrf: String,
    rows: Vec<QueueRow>,
    page: i64,
    more: bool,
    notice: Option<String>,
}

pub(super) fn time(t: Option<Time>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "—".into())
}

type QueueDbRow = (
    String,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<Time>,
    Option<Time>,
    i64,
    Option<String>,
);

async fn queue(
    State(state): State<AppState>,
    Admin(session): Admin,
    Query(q): Query<PageQuery>,
) -> Result<QueuePage, AdminError> {
    let page = q.page.unwrap_or(1).max(1);
    let rows: Vec<QueueDbRow> = sqlx::query_as(queries::QUEUE)
        .bind(PAGE + 1)
        .bind((page - 1) * PAGE)
        .fetch_all(&state.pool)
        .await?;
    let more = rows.len() as i64 > PAGE;
    let rows = rows
        .into_iter()
        .take(PAGE as usize)
        .map(
            |(id, version, rule, observed, limit, first, last, held, domains)| QueueRow {
                id,
                version,
                rule: rule.unwrap_or_else(|| "manual".into()),
                observed: observed.unwrap_or(0),
                limit: limit.unwrap_or(0),
                first_attempt: time(first),
                last_attempt: time(last),
                held,
                domains: domains.unwrap_or_default(),
            },
        )
        .collect();
    Ok(QueuePage {
        admin: Some(session.username),
        csrf: session.csrf_token,
        rows,
        page,
        more,
        notice: q.done,
    })
}

/// Bulk "confirm ban": the form repeats `sender=<version>:<id>` once per selected row.
async fn confirm_selected(
    State(state): State<AppState>,
    admin: Admin,
    body: axum::body::Bytes,
) -> Result<Response, AdminError> {
    let mut csrf = String::new();
    let mut note = String::new();
    let mut picked = Vec::new();
    for (name, value) in form_urlencoded::parse(&body) {
        match name.as_ref() {
            "csrf" => csrf = value.into_owned(),
            "note" => note = value.into_owned(),
            "sender" => picked.push(value.into_owned()),
            _ => {}
        }
    }
    admin.check_csrf(&csrf)?;
    let mut confirmed = 0;
    let mut changed = 0;
    for pick in &picked {
        let (version, id) = pick
            .split_once(':')
            .and_then(|(v, id)| Some((v.parse::<i64>().ok()?, id)))
            .ok_or_else(|| AdminError::BadForm("a selected row was malformed".into()))?;
        let review = Review {
            sender_id: id,
            action: ReviewAction::ConfirmBan,
            seen_version: version,
            actor: &admin.0.username,
            note: Some(note.as_str()).filter(|n| !n.trim().is_empty()),
        };
        match apply_review(&state, &review).await {
            Ok(_) => confirmed += 1,
            Err(ReviewError::Stale { .. } | ReviewError::NotFound(_)) => changed += 1,
            Err(ReviewError::Db(e)) => return Err(e.into()),
            Err(e) => return Err(AdminError::BadForm(e.to_string())),
        }
    }
    let mut notice = format!("Confirmed {confirmed} ban(s).");
    if changed > 0 {
        notice.push_str(&format!(
            " {changed} sender(s) changed since the page was loaded and were left alone."
        ));
    }
    Ok(Redirect::to(&format!("/admin/queue?done={}", urlencode(&notice))).into_response())
}

async fn apply_review(
    state: &AppState,
    review: &Review<'_>,
) -> Result<review::Reviewed, ReviewError> {
    review::apply(
        &state.pool,
        &state.limiter,
        &state.invites.keys,
        &state.invites.rules,
        review,
    )
    .await
}

pub(super) fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[derive(Deserialize)]
struct FindQuery {
    id: String,
}

async fn find_sender(_admin: Admin, Query(q): Query<FindQuery>) -> Redirect {
    Redirect::to(&format!("/admin/senders/{}", urlencode(q.id.trim())))
}

type SenderRow = (String, i64, Time, Time, i64, i64);

struct SenderView {
    id: String,
    state: String,
    version: i64,
    first_seen: String,
    last_seen: String,
    held_stored: i64,
    held_overflow: i64,
}

struct CounterView {
    rule: String,
    count: u64,
    limit: u64,
    window: String,
    action: String,
}

struct FlagView {
    when: String,
    rule: String,
    observed: i64,
    limit: i64,
    window: String,
}

struct InviteView {
    when: String,
    recipient: String,
    status: String,
    why: String,
}

struct AuditView {
    when: String,
    actor: String,
    action: String,
    note: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/sender.html")]
struct SenderPage {
    admin: Option<String>,
    csrf: String,
    sender: SenderView,
    counters: Vec<CounterView>,
    counters_error: Option<String>,
    flags: Vec<FlagView>,
    invites: Vec<InviteView>,
    audit: Vec<AuditView>,
    page: i64,
    more: bool,
    notice: Option<String>,
    error: Option<String>,
}

pub(super) fn window(secs: i64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// Why an invite got its status, in one line, from its decision record.
fn why(status: &str, decision: &serde_json::Value) -> String {
    let exceeded: Vec<String> = decision["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .filter(|r| r["outcome"] == "exceeded")
                .map(|r| {
                    format!(
                        "{} {}/{}",
                        r["rule"].as_str().unwrap_or("?"),
                        r["count"],
                        r["limit"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    match (status, decision["reason"].as_str()) {
        (_, Some("trusted")) => "trusted sender".into(),
        (_, Some(reason)) if reason.starts_with("sender_") => {
            format!(
                "sender was {}",
                reason.trim_start_matches("sender_").replace('_', "-")
            )
        }
        _ if exceeded.is_empty() => String::new(),
        _ => format!("exceeded {}", exceeded.join(", ")),
    }
}

async fn render_sender(
    state: &AppState,
    session: Session,
    id: &str,
    page: i64,
    notice: Option<String>,
    error: Option<String>,
) -> Result<SenderPage, AdminError> {
    let row: Option<SenderRow> = sqlx::query_as(
        "SELECT state, version, first_seen_at, last_seen_at, held_stored, held_overflow
             FROM senders WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&state.pool)
    .await?;
    let Some((sender_state, version, first, last, held_stored, held_overflow)) = row else {
        return Err(AdminError::NotFound(format!(
            "No sender `{id}` has sent an invite."
        )));
    };
    let flags: Vec<(Time, String, i64, i64, i64)> = sqlx::query_as(
        "SELECT created_at, rule_name, observed, limit_count, window_secs FROM flags
         WHERE sender_id = $1 ORDER BY created_at DESC LIMIT 50",
    )
    .bind(id)
    .fetch_all(&state.pool)
    .await?;
    let invites: Vec<(Time, String, String, serde_json::Value)> =
        sqlx::query_as(queries::SENDER_INVITES)
            .bind(id)
            .bind(PAGE + 1)
            .bind((page - 1) * PAGE)
            .fetch_all(&state.pool)
            .await?;
    let audit: Vec<(Time, String, String, Option<String>)> = sqlx::query_as(queries::SENDER_AUDIT)
        .bind(id)
        .fetch_all(&state.pool)
        .await?;

    // Live counters of the sender-scoped rules, read without counting (cost 0).
    let rules: Vec<_> = state
        .invites
        .rules
        .all()
        .into_iter()
        .filter(|r| r.scope == Scope::Sender)
        .collect();
    let keys: Vec<_> = rules
        .iter()
        .map(|r| {
            state
                .invites
                .keys
                .key(&format!("sender:{id}"), &r.name, &r.quota)
        })
        .collect();
    let checks: Vec<Check<'_>> = rules
        .iter()
        .zip(&keys)
        .map(|(r, key)| Check {
            key,
            quota: &r.quota,
            cost: 0,
        })
        .collect();
    let (counters, counters_error) = match state.limiter.check_batch(&checks, None).await {
        Ok(decisions) => (
            rules
                .iter()
                .zip(decisions)
                .map(|(r, d)| CounterView {
                    rule: r.name.clone(),
                    count: d.count,
                    limit: r.quota.limit,
                    window: window((r.quota.window_ms / 1000) as i64),
                    action: r.action.as_str().to_owned(),
                })
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(format!("Counters are unavailable: {e}"))),
    };

    let more = invites.len() as i64 > PAGE;
    Ok(SenderPage {
        admin: Some(session.username),
        csrf: session.csrf_token,
        sender: SenderView {
            id: id.to_owned(),
            state: sender_state,
            version,
            first_seen: time(Some(first)),
            last_seen: time(Some(last)),
            held_stored,
            held_overflow,
        },
        counters,
        counters_error,
        flags: flags
            .into_iter()
            .map(|(when, rule, observed, limit, secs)| FlagView {
                when: time(Some(when)),
                rule,
                observed,
                limit,
                window: window(secs),
            })
            .collect(),
        invites: invites
            .into_iter()
            .take(PAGE as usize)
            .map(|(when, recipient, status, decision)| InviteView {
                when: time(Some(when)),
                why: why(&status, &decision),
                recipient,
                status,
            })
            .collect(),
        audit: audit
            .into_iter()
            .map(|(when, actor, action, note)| AuditView {
                when: time(Some(when)),
                actor,
                action,
                note: note.unwrap_or_default(),
            })
            .collect(),
        page,
        more,
        notice,
        error,
    })
}

async fn sender_page(
    State(state): State<AppState>,
    Admin(session): Admin,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<SenderPage, AdminError> {
    render_sender(
        &state,
        session,
        &id,
        q.page.unwrap_or(1).max(1),
        q.done,
        None,
    )
    .await
}

#[derive(Deserialize)]
struct ReviewForm {
    csrf: String,
    version: i64,
    action: String,
    #[serde(default)]
    note: String,
}

async fn review_sender(
    State(state): State<AppState>,
    admin: Admin,
    Path(id): Path<String>,
    axum::Form(form): axum::Form<ReviewForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let action: ReviewAction = form.action.parse().map_err(AdminError::BadForm)?;
    let note = form.note.trim();
    let review = Review {
        sender_id: &id,
        action,
        seen_version: form.version,
        actor: &admin.0.username,
        note: Some(note).filter(|n| !n.is_empty() && n.len() <= 500),
    };
    match apply_review(&state, &review).await {
        Ok(done) => {
            let notice = format!(
                "Done: {} ({} held invite(s) changed).",
                action.as_str().replace('_', " "),
                done.invites_changed
            );
            Ok(Redirect::to(&format!(
                "/admin/senders/{}?done={}",
                urlencode(&id),
                urlencode(&notice)
            ))
            .into_response())
        }
        Err(e @ ReviewError::Stale { .. }) => {
            let page = render_sender(&state, admin.0, &id, 1, None, Some(e.to_string())).await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(ReviewError::NotFound(id)) => Err(AdminError::NotFound(format!("No sender `{id}`."))),
        Err(ReviewError::Db(e)) => Err(e.into()),
        Err(e @ ReviewError::Limiter(_)) => {
            // The decision is committed; only clearing the counters failed.
            tracing::warn!(error = %e, "review applied, counters not cleared");
            Ok(Redirect::to(&format!(
                "/admin/senders/{}?done={}",
                urlencode(&id),
                urlencode("Done, but the sender's counters could not be cleared.")
            ))
            .into_response())
        }
    }
}
