//! Who may reach sendguard (admins only): the apps' API keys and the dashboard's accounts.
//! A key is shown once, on the page that creates it; revoking a key and disabling an account
//! cannot be undone, so each asks on a page of its own first. Every change is audited.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::accounts::{self, Role};
use super::error::AdminError;
use super::format::{Notice, PageQuery, time};
use super::layout::Layout;
use super::session::AdminOnly;
use crate::api_keys::{self, KeyError};
use crate::urls::component;

impl From<KeyError> for AdminError {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Db(e) => AdminError::Db(e),
            e => AdminError::BadForm(e.to_string()),
        }
    }
}

pub(super) struct KeyRow {
    name: String,
    app: String,
    created: String,
    /// `None` while the key is live.
    revoked: Option<String>,
    revoke_path: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/keys.html")]
pub(super) struct KeysPage {
    layout: Layout,
    keys: Vec<KeyRow>,
    apps: Vec<String>,
    notice: Option<String>,
}

pub(super) async fn keys(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Query(q): Query<PageQuery>,
) -> Result<KeysPage, AdminError> {
    let keys = api_keys::list(&dashboard.pool).await?;
    Ok(KeysPage {
        layout: admin.layout(),
        keys: keys
            .into_iter()
            .map(|k| KeyRow {
                revoke_path: format!("/admin/keys/{}/revoke", component(&k.name)),
                created: time(Some(k.created_at)),
                revoked: k.revoked_at.map(|t| time(Some(t))),
                name: k.name,
                app: k.app,
            })
            .collect(),
        apps: dashboard.app_names(),
        notice: Notice::from_query(&q).map(Notice::text),
    })
}

#[derive(Deserialize)]
pub(super) struct NewKeyForm {
    csrf: String,
    name: String,
    app: String,
}

/// The page that shows a new key, the only time it is shown.
#[derive(Template, WebTemplate)]
#[template(path = "admin/key_created.html")]
pub(super) struct KeyCreatedPage {
    layout: Layout,
    name: String,
    app: String,
    key: String,
}

pub(super) async fn create_key(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    axum::Form(form): axum::Form<NewKeyForm>,
) -> Result<KeyCreatedPage, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let app = dashboard.app(form.app.trim())?;
    let name = form.name.trim();
    let key = api_keys::create(&dashboard.pool, name, app.id, &admin.0.username).await?;
    Ok(KeyCreatedPage {
        layout: admin.layout(),
        name: name.to_owned(),
        app: app.name.clone(),
        key,
    })
}

#[derive(Deserialize)]
pub(super) struct ConfirmedForm {
    csrf: String,
    /// `yes` once the admin confirmed on the page that says what happens.
    #[serde(default)]
    confirmed: String,
}

/// The step before a change that cannot be undone.
#[derive(Template, WebTemplate)]
#[template(path = "admin/confirm_access.html")]
pub(super) struct ConfirmAccessPage {
    layout: Layout,
    label: String,
    consequence: String,
    action: String,
    back: String,
}

pub(super) async fn revoke_key(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<ConfirmedForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    if form.confirmed != "yes" {
        return Ok(ConfirmAccessPage {
            layout: admin.layout(),
            label: format!("Revoke the key `{name}`"),
            consequence: "Every request that carries this key is refused from now on, on every \
                          instance within a second. A revoked key cannot be restored; its app \
                          needs a new one."
                .into(),
            action: format!("/admin/keys/{}/revoke", component(&name)),
            back: "/admin/keys".into(),
        }
        .into_response());
    }
    if !api_keys::revoke(&dashboard.pool, &name, &admin.0.username).await? {
        return Err(AdminError::NotFound(format!("No live key named `{name}`.")));
    }
    let notice = Notice::KeyRevoked;
    Ok(Redirect::to(&format!("/admin/keys?{}", notice.query())).into_response())
}

pub(super) struct AccountRow {
    username: String,
    role: &'static str,
    disabled: Option<String>,
    last_login: String,
    disable_path: String,
    /// The viewer's own account, which they cannot disable here.
    own: bool,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/admins.html")]
pub(super) struct AdminsPage {
    layout: Layout,
    accounts: Vec<AccountRow>,
    notice: Option<String>,
}

pub(super) async fn admins(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Query(q): Query<PageQuery>,
) -> Result<AdminsPage, AdminError> {
    let listed = accounts::list(&dashboard.pool).await?;
    let accounts = listed
        .into_iter()
        .map(|a| {
            let role: Role = a.role.parse().map_err(AdminError::Internal)?;
            Ok(AccountRow {
                own: a.username == admin.0.username,
                disable_path: format!("/admin/admins/{}/disable", component(&a.username)),
                role: role.as_str(),
                disabled: a.disabled_at.map(|t| time(Some(t))),
                last_login: time(a.last_login),
                username: a.username,
            })
        })
        .collect::<Result<_, AdminError>>()?;
    Ok(AdminsPage {
        layout: admin.layout(),
        accounts,
        notice: Notice::from_query(&q).map(Notice::text),
    })
}

#[derive(Deserialize)]
pub(super) struct NewAdminForm {
    csrf: String,
    username: String,
    role: String,
    password: String,
}

pub(super) async fn add_admin(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    axum::Form(form): axum::Form<NewAdminForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let role: Role = form.role.parse().map_err(AdminError::BadForm)?;
    accounts::add_hashing(
        &dashboard.pool,
        &dashboard.passwords,
        form.username.trim(),
        &form.password,
        role,
        &admin.0.username,
    )
    .await?;
    let notice = Notice::AdminAdded;
    Ok(Redirect::to(&format!("/admin/admins?{}", notice.query())).into_response())
}

pub(super) async fn disable_admin(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(username): Path<String>,
    axum::Form(form): axum::Form<ConfirmedForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    if username == admin.0.username {
        return Err(AdminError::BadForm(
            "You cannot disable your own account here; another admin can.".into(),
        ));
    }
    if form.confirmed != "yes" {
        return Ok(ConfirmAccessPage {
            layout: admin.layout(),
            label: format!("Disable `{username}`"),
            consequence: "Their sessions end at once, on every instance, and they cannot log \
                          in again. There is no enabling it again: add an account under another name \
                          if they return."
                .into(),
            action: format!("/admin/admins/{}/disable", component(&username)),
            back: "/admin/admins".into(),
        }
        .into_response());
    }
    accounts::disable(&dashboard.pool, &username, &admin.0.username).await?;
    let notice = Notice::AdminDisabled;
    Ok(Redirect::to(&format!("/admin/admins?{}", notice.query())).into_response())
}
