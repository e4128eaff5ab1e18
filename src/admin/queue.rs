//! The review queue: senders shadow-banned by a rule, holding invites or flagged for review,
//! waiting for a decision, with a bulk "confirm ban" of the shadow-banned ones.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::{Notice, PAGE, PageQuery, acceptance, age, counted, outcomes, page_number};
use super::layout::Layout;
use super::senders::sender_path;
use super::session::Admin;
use crate::moderation::SenderState;
use crate::moderation::review::{Review, ReviewAction, ReviewError};
use crate::moderation::senders::{self, Awaiting};
use crate::rules::Signal;
use crate::sender_key::SenderKey;

pub(super) struct QueueRow {
    app_id: i64,
    app: String,
    path: String,
    id: String,
    version: i64,
    state: String,
    repeat_offender: bool,
    linked_to: Option<String>,
    age: String,
    rule: String,
    signal: String,
    observed: i64,
    limit: i64,
    held: i64,
    reach: String,
    outcomes: String,
    acceptance: String,
    /// What the reviewer reads first: the text of the invite that tripped the rule, else the
    /// latest held one, said which.
    text: String,
    text_is: &'static str,
}

impl From<Awaiting> for QueueRow {
    fn from(a: Awaiting) -> Self {
        QueueRow {
            path: sender_path(&a.app, &a.id),
            app_id: a.app_id,
            app: a.app,
            age: age(a.since),
            acceptance: acceptance(a.accepted, a.sent),
            id: a.id,
            version: a.version,
            state: a.state,
            repeat_offender: a.repeat_offender,
            linked_to: a.linked_to,
            rule: a.rule_name.unwrap_or_else(|| "manual".into()),
            signal: a
                .signal
                .as_deref()
                .map(|s| Signal::words_of(s).to_owned())
                .unwrap_or_default(),
            observed: a.observed.unwrap_or(0),
            limit: a.limit_count.unwrap_or(0),
            held: a.held,
            reach: format!(
                "{}, {}",
                counted(a.recipients, "recipient"),
                counted(a.domains, "domain")
            ),
            outcomes: outcomes(a.bounces, a.complaints),
            text_is: match (&a.tripping, &a.latest_held) {
                (Some(_), _) => "the invite that tripped the rule",
                (None, Some(_)) => "the latest held invite",
                (None, None) => "",
            },
            text: a.tripping.or(a.latest_held).unwrap_or_default(),
        }
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/queue.html")]
pub(super) struct QueuePage {
    layout: Layout,
    rows: Vec<QueueRow>,
    /// The app the queue is filtered by ("" for all), and every app's name.
    app: String,
    apps: Vec<String>,
    /// Campaigns awaiting a decision, one row each (on the first page).
    campaigns: Vec<QueueCampaign>,
    page: i64,
    more: bool,
    notice: Option<String>,
}

pub(super) struct QueueCampaign {
    path: String,
    id: i64,
    kind: &'static str,
    rule: String,
    senders: i64,
    text: String,
}

/// The queue's filter, beside its page (two extractors of one query string).
#[derive(Deserialize)]
pub(super) struct AppFilter {
    #[serde(default)]
    app: String,
}

pub(super) async fn queue(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Query(q): Query<PageQuery>,
    Query(filter): Query<AppFilter>,
) -> Result<QueuePage, AdminError> {
    let page = page_number(q.page);
    let app_id = dashboard.app_filter(&filter.app)?;
    let rows = senders::queue(&dashboard.pool, app_id, PAGE + 1, (page - 1) * PAGE).await?;
    let more = rows.len() as i64 > PAGE;
    let campaigns = if page == 1 {
        senders::campaigns_awaiting(&dashboard.pool, app_id).await?
    } else {
        Vec::new()
    };
    Ok(QueuePage {
        campaigns: campaigns
            .into_iter()
            .map(|c| QueueCampaign {
                path: format!("/admin/campaigns/{}", c.id),
                id: c.id,
                kind: crate::campaigns::store::kind_words(&c.kind),
                rule: c.rule_name,
                senders: c.senders,
                text: c.sample.unwrap_or(c.normalised).chars().take(140).collect(),
            })
            .collect(),
        layout: admin.layout(),
        rows: rows
            .into_iter()
            .take(PAGE as usize)
            .map(QueueRow::from)
            .collect(),
        app: filter.app,
        apps: dashboard.app_names(),
        page,
        more,
        notice: Notice::from_query(&q).map(Notice::text),
    })
}

/// The step before a bulk "confirm ban": the senders named, the consequence said.
#[derive(Template, WebTemplate)]
#[template(path = "admin/confirm_bulk.html")]
pub(super) struct BulkConfirmPage {
    layout: Layout,
    /// (name, page, the form's value for it)
    senders: Vec<(String, String, String)>,
    note: String,
}

/// A selected row, `<version>:<app id>:<id>`.
fn parse_pick(pick: &str) -> Result<(i64, SenderKey), AdminError> {
    let mut parts = pick.splitn(3, ':');
    let parsed = (|| {
        Some((
            parts.next()?.parse::<i64>().ok()?,
            parts.next()?.parse::<i64>().ok()?,
            parts.next()?,
        ))
    })();
    let (version, app_id, id) =
        parsed.ok_or_else(|| AdminError::BadForm("a selected row was malformed".into()))?;
    Ok((version, SenderKey::new(app_id, id)))
}

/// Bulk "confirm ban": the form repeats `sender=<version>:<app id>:<id>` once per selected row.
pub(super) async fn confirm_selected(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    body: axum::body::Bytes,
) -> Result<Response, AdminError> {
    let mut csrf = String::new();
    let mut note = String::new();
    let mut picked = Vec::new();
    let mut confirmed_form = false;
    for (name, value) in form_urlencoded::parse(&body) {
        match name.as_ref() {
            "csrf" => csrf = value.into_owned(),
            "note" => note = value.into_owned(),
            "sender" => picked.push(value.into_owned()),
            "confirmed" => confirmed_form = value == "yes",
            _ => {}
        }
    }
    admin.check_csrf(&csrf)?;
    let checked_note = super::decision_note(&note)?;
    // One page of the queue at most: each is a transaction of its own, in this request.
    if picked.len() > PAGE as usize {
        return Err(AdminError::BadForm(format!(
            "at most {PAGE} senders at once, a page of the queue"
        )));
    }
    let picks = picked
        .iter()
        .map(|pick| parse_pick(pick))
        .collect::<Result<Vec<_>, _>>()?;
    // Bans discard the held invites for good: a page of its own names the senders first.
    if !confirmed_form {
        let senders = picks
            .iter()
            .zip(&picked)
            .map(|((_, sender), pick)| {
                let app = dashboard
                    .apps
                    .get(sender.app_id)
                    .map_or_else(|| sender.app_id.to_string(), |a| a.name.clone());
                let path = sender_path(&app, &sender.id);
                (format!("{} of {app}", sender.id), path, pick.clone())
            })
            .collect();
        return Ok(BulkConfirmPage {
            layout: admin.layout(),
            senders,
            note,
        }
        .into_response());
    }
    let note = checked_note;
    let mut confirmed = 0;
    let mut changed = 0;
    for (version, sender) in &picks {
        let version = *version;
        // Only a shadow ban is confirmed here, as the queue offers: a ban confirmed again would
        // add a strike and change its term, an admin's decision. The state read at the picked
        // version holds until the review, which refuses any other version.
        let applies = match senders::find(&dashboard.pool, sender).await? {
            None => false,
            // An older pick is refused by the review itself.
            Some(current) if current.version != version => true,
            Some(current) => current.state == SenderState::ShadowBanned.as_str(),
        };
        if !applies {
            changed += 1;
            continue;
        }
        let review = Review {
            sender,
            action: ReviewAction::ConfirmBan,
            seen_version: version,
            // A ban releases nothing.
            seen_held: None,
            actor: &admin.0.username,
            admin_id: Some(admin.0.admin_id),
            note,
            release_after: dashboard.settle,
            // Each sender the ladder's term for its own strikes.
            term: None,
            mistake: false,
        };
        match super::decide::apply(&dashboard, &review).await {
            Ok(_) => confirmed += 1,
            Err(ReviewError::Stale { .. } | ReviewError::NotFound(_)) => changed += 1,
            Err(e) => return Err(e.into()),
        }
    }
    let notice = Notice::Confirmed { confirmed, changed };
    Ok(Redirect::to(&format!("/admin/queue?{}", notice.query())).into_response())
}
