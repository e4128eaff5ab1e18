//! The apps pages (admins only): every app with its settings, and per app the recent webhook
//! deliveries with their failures and the suppressed recipients, each removable.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::{Notice, PAGE, PageQuery, page_number, time};
use super::layout::Layout;
use super::session::AdminOnly;
use crate::apps::App;
use crate::recipients;
use crate::urls::component;
use crate::webhooks;

/// Webhook events shown per app.
const DELIVERIES: i64 = 50;

pub(super) struct AppRow {
    name: String,
    path: String,
    product: String,
    link_hosts: String,
    link_template: String,
    from: String,
    webhook_url: String,
}

impl From<&App> for AppRow {
    fn from(a: &App) -> Self {
        AppRow {
            name: a.name.clone(),
            path: format!("/admin/apps/{}", component(&a.name)),
            product: a.product.clone().unwrap_or_default(),
            link_hosts: a.link_hosts.join(", "),
            link_template: a.link_template.clone().unwrap_or_default(),
            from: a.mail_from.clone().unwrap_or_default(),
            webhook_url: a.webhook_url.clone().unwrap_or_default(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/apps.html")]
pub(super) struct AppsPage {
    layout: Layout,
    apps: Vec<AppRow>,
}

pub(super) async fn list(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
) -> AppsPage {
    AppsPage {
        layout: admin.layout(),
        apps: dashboard
            .apps
            .all()
            .iter()
            .map(|a| AppRow::from(&**a))
            .collect(),
    }
}

pub(super) struct DeliveryView {
    id: String,
    kind: String,
    created: String,
    attempts: i32,
    state: String,
    last: String,
}

impl From<webhooks::Delivery> for DeliveryView {
    fn from(d: webhooks::Delivery) -> Self {
        let state = match (d.delivered_at, d.gave_up_at) {
            (Some(at), _) => format!("delivered {}", time(Some(at))),
            (None, Some(at)) => format!("gave up {}", time(Some(at))),
            (None, None) => format!("next attempt {}", time(Some(d.next_attempt_at))),
        };
        let last = match (d.last_status, d.last_error) {
            (_, Some(error)) => error,
            (Some(status), None) => format!("HTTP {status}"),
            (None, None) => String::new(),
        };
        DeliveryView {
            id: d.id.to_string(),
            kind: d.kind,
            created: time(Some(d.created_at)),
            attempts: d.attempts,
            state,
            last,
        }
    }
}

pub(super) struct SuppressedView {
    recipient: String,
    since: String,
    how: &'static str,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/app.html")]
pub(super) struct AppPage {
    layout: Layout,
    app: AppRow,
    deliveries: Vec<DeliveryView>,
    suppressed: Vec<SuppressedView>,
    page: i64,
    more: bool,
    notice: Option<String>,
}

pub(super) async fn app_page(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(name): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<AppPage, AdminError> {
    let app = dashboard.app(&name)?;
    let page = page_number(q.page);
    let deliveries = webhooks::recent(&dashboard.pool, app.id, DELIVERIES).await?;
    let suppressed =
        recipients::suppressed(&dashboard.pool, app.id, PAGE + 1, (page - 1) * PAGE).await?;
    let more = suppressed.len() as i64 > PAGE;
    Ok(AppPage {
        layout: admin.layout(),
        app: AppRow::from(&*app),
        deliveries: deliveries.into_iter().map(DeliveryView::from).collect(),
        suppressed: suppressed
            .into_iter()
            .take(PAGE as usize)
            .map(|s| SuppressedView {
                since: time(Some(s.created_at)),
                how: if s.invite_id.is_some() {
                    "unsubscribe link"
                } else {
                    "added by an admin"
                },
                recipient: s.recipient,
            })
            .collect(),
        page,
        more,
        notice: Notice::from_query(&q).map(Notice::text),
    })
}

#[derive(Deserialize)]
pub(super) struct UnsuppressForm {
    csrf: String,
    recipient: String,
}

pub(super) async fn unsuppress(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<UnsuppressForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let app = dashboard.app(&name)?;
    let removed = recipients::remove(
        &dashboard.pool,
        app.id,
        form.recipient.trim(),
        &admin.0.username,
        Some(admin.0.admin_id),
    )
    .await?;
    let notice = Notice::Unsuppressed { removed };
    Ok(Redirect::to(&format!(
        "/admin/apps/{}?{}",
        component(&name),
        notice.query()
    ))
    .into_response())
}
