//! The campaigns (docs/DESIGN.md §3d): each one payload spread by many accounts, listed with a
//! real sample, its senders and its invites; on its page, one decision for all of it, confirmed
//! first when it discards or sends invites.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::{PAGE, PageQuery, Segment, age, marked, page_number, time};
use super::layout::Layout;
use super::senders::sender_path;
use super::session::Admin;
use crate::campaigns::store::{self, Campaign};
use crate::moderation::campaign::{self, CampaignAction, CampaignError, CampaignReview};

/// Senders a campaign's page lists at most.
const SENDERS_SHOWN: i64 = 200;

pub(super) struct CampaignRow {
    id: i64,
    path: String,
    kind: &'static str,
    normalised: String,
    sample: Vec<Segment>,
    senders: i64,
    held: i64,
    delivered: i64,
    first_seen: String,
    last_seen: String,
    rule: String,
    status: String,
    version: i64,
    benign: bool,
}

impl From<Campaign> for CampaignRow {
    fn from(c: Campaign) -> Self {
        CampaignRow {
            path: format!("/admin/campaigns/{}", c.id),
            id: c.id,
            kind: store::kind_words(&c.kind),
            normalised: c.normalised,
            sample: marked(c.sample.as_deref().unwrap_or("")),
            senders: c.senders,
            held: c.held,
            delivered: c.delivered,
            first_seen: time(c.first_seen_at),
            last_seen: time(Some(c.last_seen_at)),
            rule: c.rule_name,
            status: match (&c.decision, &c.decided_by) {
                (Some(d), Some(by)) => format!("{d} by {by}"),
                _ => "awaiting a decision".into(),
            },
            version: c.version,
            benign: c.benign_at.is_some(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/campaigns.html")]
pub(super) struct CampaignsPage {
    layout: Layout,
    rows: Vec<CampaignRow>,
    page: i64,
    more: bool,
}

pub(super) async fn list(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Query(q): Query<PageQuery>,
) -> Result<CampaignsPage, AdminError> {
    let page = page_number(q.page);
    let rows = store::list(&dashboard.pool, PAGE + 1, (page - 1) * PAGE).await?;
    let more = rows.len() as i64 > PAGE;
    Ok(CampaignsPage {
        layout: admin.layout(),
        rows: rows
            .into_iter()
            .take(PAGE as usize)
            .map(CampaignRow::from)
            .collect(),
        page,
        more,
    })
}

pub(super) struct SenderRow {
    path: String,
    app: String,
    id: String,
    state: String,
    age: String,
    invites: i64,
    held: i64,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/campaign.html")]
pub(super) struct CampaignPage {
    layout: Layout,
    campaign: CampaignRow,
    senders: Vec<SenderRow>,
    notice: Option<String>,
    error: Option<String>,
}

async fn render(
    dashboard: &Dashboard,
    admin: &Admin,
    id: i64,
    notice: Option<String>,
    error: Option<String>,
) -> Result<CampaignPage, AdminError> {
    let campaign = store::find(&dashboard.pool, id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("There is no campaign {id}.")))?;
    let senders = store::senders(&dashboard.pool, &campaign.subject, SENDERS_SHOWN)
        .await?
        .into_iter()
        .map(|s| SenderRow {
            path: sender_path(&s.app, &s.sender_id),
            app: s.app,
            id: s.sender_id,
            state: s.state,
            age: age(s.since),
            invites: s.invites,
            held: s.held,
        })
        .collect();
    Ok(CampaignPage {
        layout: admin.layout(),
        campaign: campaign.into(),
        senders,
        notice,
        error,
    })
}

#[derive(Deserialize)]
pub(super) struct DoneQuery {
    done: Option<String>,
    senders: Option<u64>,
    invites: Option<u64>,
}

pub(super) async fn campaign_page(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path(id): Path<i64>,
    Query(q): Query<DoneQuery>,
) -> Result<CampaignPage, AdminError> {
    let notice = q.done.as_deref().and_then(|done| {
        let action: CampaignAction = done.parse().ok()?;
        Some(afterwards(
            action,
            q.senders.unwrap_or(0),
            q.invites.unwrap_or(0),
        ))
    });
    render(&dashboard, &admin, id, notice, None).await
}

/// What a decision did, in the reviewer's words.
fn afterwards(action: CampaignAction, senders: u64, invites: u64) -> String {
    match action {
        CampaignAction::BanAll => format!(
            "Banned {senders} sender(s); {invites} held invite(s) discarded. Senders that \
             changed meanwhile were left for their own review."
        ),
        CampaignAction::MarkBenign => format!(
            "Marked benign: {invites} held invite(s) of {senders} sender(s) released; the \
             campaign no longer counts on any instance within a second."
        ),
        CampaignAction::UndoBenign => "The mark is undone: the campaign counts again.".into(),
    }
}

#[derive(Deserialize)]
pub(super) struct DecideForm {
    csrf: String,
    version: i64,
    action: String,
    #[serde(default)]
    note: String,
    #[serde(default)]
    confirmed: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/confirm_campaign.html")]
pub(super) struct ConfirmCampaignPage {
    layout: Layout,
    campaign: CampaignRow,
    action: &'static str,
    label: &'static str,
    consequence: String,
    note: String,
}

fn label(action: CampaignAction) -> &'static str {
    match action {
        CampaignAction::BanAll => "Ban every sender",
        CampaignAction::MarkBenign => "Mark benign and release",
        CampaignAction::UndoBenign => "Count it again",
    }
}

pub(super) async fn decide(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path(id): Path<i64>,
    axum::Form(form): axum::Form<DecideForm>,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    let action: CampaignAction = form
        .action
        .parse()
        .map_err(|_| AdminError::BadForm(format!("unknown decision `{}`", form.action)))?;
    let note = super::decision_note(&form.note)?;
    // Banning everyone discards invites and releasing sends them: both are confirmed first,
    // on a page that says what will happen.
    if action != CampaignAction::UndoBenign && form.confirmed != "yes" {
        let mut page = render(&dashboard, &admin, id, None, None).await?;
        // A page older than the campaign is refused here, as the decision would be: the
        // confirmation must ask about the campaign the reviewer read.
        if page.campaign.version != form.version {
            page.error = Some(CampaignError::Stale.to_string());
            return Ok((StatusCode::CONFLICT, page).into_response());
        }
        let c = &page.campaign;
        let consequence = match action {
            CampaignAction::BanAll => format!(
                "Every sender of this campaign ({}) is banned, and their held invites are \
                 discarded for good. Each app hears of each ban.",
                c.senders
            ),
            _ => format!(
                "The campaign's held invites ({} in all) go out to their recipients, except those \
                 of senders shadow-banned or banned, which wait for their own review; and this {} \
                 never counts as a campaign again, until the mark is undone.",
                c.held, c.kind
            ),
        };
        return Ok(ConfirmCampaignPage {
            layout: admin.layout(),
            campaign: page.campaign,
            action: action.as_str(),
            label: label(action),
            consequence,
            note: form.note,
        }
        .into_response());
    }
    let review = CampaignReview {
        campaign_id: id,
        action,
        seen_version: form.version,
        actor: &admin.0.username,
        admin_id: Some(admin.0.admin_id),
        note,
        release_after: dashboard.settle,
    };
    match campaign::decide(
        &dashboard.pool,
        &dashboard.limiter,
        &dashboard.keys,
        &dashboard.rules,
        &dashboard.ladder,
        &review,
    )
    .await
    {
        Ok(done) => Ok(Redirect::to(&format!(
            "/admin/campaigns/{id}?done={}&senders={}&invites={}",
            action.as_str(),
            done.senders,
            done.invites
        ))
        .into_response()),
        Err(e @ CampaignError::Stale) => {
            let page = render(&dashboard, &admin, id, None, Some(e.to_string())).await?;
            Ok((StatusCode::CONFLICT, page).into_response())
        }
        Err(CampaignError::NotFound(_)) => {
            Err(AdminError::NotFound(format!("There is no campaign {id}.")))
        }
        Err(CampaignError::Review(e)) => Err(e.into()),
        Err(CampaignError::Db(e)) => Err(e.into()),
    }
}
