//! One sender's page: its record, live counters, flags, invites and history, and the review
//! decisions taken on it.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::Dashboard;
use super::error::AdminError;
use super::format::{
    Notice, PAGE, PageQuery, Segment, acceptance, age, marked, outcomes, page_number, time, why,
    window,
};
use super::layout::Layout;
use super::session::Admin;
use crate::audit;
use crate::limiter::Check;
use crate::moderation::SenderState;
use crate::moderation::review::{self, ReviewAction};
use crate::moderation::senders::{self, Sender, SentInvite};
use crate::moderation::terms::{self, Term};
use crate::rules::Signal;
use crate::sender_key::SenderKey;
use crate::urls::component;

/// The sender of a page's path: app by name, and the app's sender id.
pub(super) fn sender_of(
    dashboard: &Dashboard,
    app: &str,
    id: &str,
) -> Result<SenderKey, AdminError> {
    Ok(SenderKey::new(dashboard.app(app)?.id, id))
}

/// The page of sender `id` of app `app`.
pub(super) fn sender_path(app: &str, id: &str) -> String {
    format!("/admin/senders/{}/{}", component(app), component(id))
}

/// A form of the sender page names the sender it was made for, as `app/id`.
pub(super) fn same_sender(form_sender: &str, app: &str, id: &str) -> Result<(), AdminError> {
    if form_sender == format!("{app}/{id}") {
        Ok(())
    } else {
        Err(AdminError::BadForm(
            "this form was made for another sender; reload the page and decide again".into(),
        ))
    }
}

#[derive(Deserialize)]
pub(super) struct FindQuery {
    id: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/sender_apps.html")]
pub(super) struct SenderAppsPage {
    layout: Layout,
    id: String,
    /// (app, path of the sender's page in it)
    apps: Vec<(String, String)>,
}

/// The search box: a sender id, in whichever apps have one. One app: its page at once.
pub(super) async fn find_sender(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Query(q): Query<FindQuery>,
) -> Result<Response, AdminError> {
    let id = q.id.trim();
    let apps = senders::apps_of(&dashboard.pool, id).await?;
    match apps.as_slice() {
        [] => Err(AdminError::NotFound(format!(
            "No sender `{id}` has sent an invite."
        ))),
        [app] => Ok(Redirect::to(&sender_path(app, id)).into_response()),
        _ => Ok(SenderAppsPage {
            layout: admin.layout(),
            id: id.to_owned(),
            apps: apps
                .iter()
                .map(|app| (app.clone(), sender_path(app, id)))
                .collect(),
        }
        .into_response()),
    }
}

pub(super) struct SenderView {
    app: String,
    path: String,
    form_id: String,
    id: String,
    state: String,
    version: i64,
    first_seen: String,
    last_seen: String,
    age: String,
    held_stored: i64,
    held_overflow: i64,
    acceptance: String,
    linked_to: Option<String>,
    repeat_offender: bool,
    first_address: String,
    /// When the ban ends, for a `banned` sender.
    ban_ends: String,
}

impl SenderView {
    fn new(app: &str, s: Sender) -> Self {
        SenderView {
            app: app.to_owned(),
            path: sender_path(app, &s.id),
            form_id: format!("{app}/{}", s.id),
            age: age(s.created_in_app_at.unwrap_or(s.first_seen_at)),
            acceptance: acceptance(s.accepted, s.sent),
            id: s.id,
            state: s.state,
            version: s.version,
            first_seen: time(Some(s.first_seen_at)),
            last_seen: time(Some(s.last_seen_at)),
            held_stored: s.held_stored,
            held_overflow: s.held_overflow,
            linked_to: s.linked_to,
            repeat_offender: s.repeat_offender,
            first_address: s.first_address.unwrap_or_default(),
            ban_ends: match s.banned_until {
                Some(until) => time(Some(until)),
                None => "never: the ban is permanent".into(),
            },
        }
    }
}

/// A decision the sender page offers.
pub(super) struct DecisionView {
    action: &'static str,
    label: String,
    /// It sends mail or discards invites: confirmed on a page of its own first.
    confirm: bool,
    /// It bans for a term.
    bans: bool,
}

/// The decisions that apply to `sender` as the page shows it.
fn decisions(sender: &Sender) -> Vec<DecisionView> {
    let Ok(state) = sender.state.parse::<SenderState>() else {
        return Vec::new();
    };
    let held = sender.held_stored;
    <ReviewAction as strum::VariantArray>::VARIANTS
        .iter()
        .copied()
        .filter(|a| a.applies_to(state, held, sender.review_requested))
        .map(|a| DecisionView {
            action: a.as_str(),
            label: a.label(held),
            confirm: a.needs_confirming(held),
            bans: a.confirms(),
        })
        .collect()
}

pub(super) struct CounterView {
    rule: String,
    signal: &'static str,
    count: u64,
    limit: u64,
    window: String,
    action: String,
}

pub(super) struct FlagView {
    when: String,
    rule: String,
    signal: String,
    action: String,
    observed: i64,
    limit: i64,
    window: String,
    repeat: bool,
}

pub(super) struct InviteView {
    id: String,
    when: String,
    recipient: String,
    status: String,
    why: String,
    /// The sender's words, links marked: what a reviewer reads of a sent invite too.
    text: Vec<Segment>,
    /// What its recipient reported of it: a complaint or a bounce is marked on the page.
    outcomes: String,
    complained: bool,
}

/// A held invite with the sender's words, links marked.
pub(super) struct HeldView {
    pub(super) id: String,
    pub(super) when: String,
    pub(super) recipient: String,
    pub(super) why: String,
    pub(super) sender_name: Vec<Segment>,
    pub(super) resource: Vec<Segment>,
    pub(super) message: Vec<Segment>,
}

impl From<SentInvite> for HeldView {
    fn from(i: SentInvite) -> Self {
        let text = |t: Option<String>| t.as_deref().map(marked).unwrap_or_default();
        HeldView {
            id: i.id.to_string(),
            when: time(Some(i.created_at)),
            why: why(&i.decision),
            recipient: i.recipient,
            sender_name: text(i.sender_name),
            resource: text(i.resource),
            message: text(i.message),
        }
    }
}

pub(super) struct AuditView {
    when: String,
    actor: String,
    action: String,
    note: String,
}

pub(super) struct StrikeView {
    when: String,
    rules: String,
    term: String,
    until: String,
    by: String,
    /// Why and by whom it no longer counts; empty while it counts.
    removed: String,
}

impl From<terms::Strike> for StrikeView {
    fn from(s: terms::Strike) -> Self {
        StrikeView {
            when: time(Some(s.at)),
            rules: if s.rules.is_empty() {
                "by hand".into()
            } else {
                s.rules.join(", ")
            },
            term: s
                .term
                .parse::<Term>()
                .map_or(s.term.clone(), |t| t.words().to_owned()),
            until: s.banned_until.map(|u| time(Some(u))).unwrap_or_default(),
            by: s.by_actor,
            removed: match (s.removed_at, s.removed_reason) {
                (Some(at), reason) => format!(
                    "removed {} by {} ({})",
                    time(Some(at)),
                    s.removed_by.unwrap_or_default(),
                    reason.unwrap_or_default()
                ),
                (None, _) => String::new(),
            },
        }
    }
}

/// A term offered for a ban.
pub(super) struct TermChoice {
    value: &'static str,
    words: &'static str,
    selected: bool,
}

/// Every term, `default` selected.
pub(super) fn term_choices(default: Term) -> Vec<TermChoice> {
    <Term as strum::VariantArray>::VARIANTS
        .iter()
        .map(|t| TermChoice {
            value: t.as_str(),
            words: t.words(),
            selected: *t == default,
        })
        .collect()
}

pub(super) struct NoteView {
    when: String,
    author: String,
    body: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/sender.html")]
pub(super) struct SenderPage {
    layout: Layout,
    sender: SenderView,
    decisions: Vec<DecisionView>,
    /// Some decision offered asks for a confirmation.
    confirming: bool,
    /// Some decision offered bans, for a term.
    bans: bool,
    counters: Vec<CounterView>,
    counters_error: Option<String>,
    outcomes: String,
    flags: Vec<FlagView>,
    held: Vec<HeldView>,
    invites: Vec<InviteView>,
    notes: Vec<NoteView>,
    strikes: Vec<StrikeView>,
    /// The terms a ban can be given, the ladder's for this sender selected.
    terms: Vec<TermChoice>,
    audit: Vec<AuditView>,
    page: i64,
    more: bool,
    notice: Option<String>,
    error: Option<String>,
    /// Released invites still waiting for their settle time, and when the first leaves: the
    /// release can be undone until then.
    releases_waiting: Option<(i64, String)>,
}

/// The live counters of the sender-scoped rules, read without counting (cost 0).
async fn counters(dashboard: &Dashboard, sender: &SenderKey) -> (Vec<CounterView>, Option<String>) {
    let counters = review::own_counters(&dashboard.rules, &dashboard.keys, sender);
    let checks: Vec<Check<'_>> = (counters.iter())
        .map(|(r, key)| Check::new(key, &r.quota, 0))
        .collect();
    match dashboard.limiter.check_batch(&checks, None).await {
        Ok(decisions) => (
            counters
                .iter()
                .zip(decisions)
                .map(|((r, _), d)| CounterView {
                    rule: r.name.clone(),
                    signal: r.signal.words(),
                    count: d.count,
                    limit: r.quota.limit,
                    window: window((r.quota.window_ms / 1000) as i64),
                    action: r.action.as_str().to_owned(),
                })
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(format!("Counters are unavailable: {e}"))),
    }
}

pub(super) async fn render_sender(
    dashboard: &Dashboard,
    admin: &Admin,
    app: &str,
    key: &SenderKey,
    page: i64,
    notice: Option<String>,
    error: Option<String>,
) -> Result<SenderPage, AdminError> {
    let pool = &dashboard.pool;
    let sender = senders::find(pool, key).await?.ok_or_else(|| {
        AdminError::NotFound(format!(
            "No sender `{}` of {app} has sent an invite.",
            key.id
        ))
    })?;
    let flags = senders::flags(pool, key).await?;
    let invites = senders::invites(pool, key, PAGE + 1, (page - 1) * PAGE).await?;
    let held = senders::held(pool, key).await?;
    let notes = senders::notes(pool, key).await?;
    let strikes = terms::of_sender(pool, key).await?;
    let next_term = dashboard
        .ladder
        .next_term(pool, key, chrono::Utc::now())
        .await?;
    let (bounces, complaints) = senders::outcomes_last_day(pool, key).await?;
    let history = audit::of_sender(pool, key).await?;
    let (counters, counters_error) = counters(dashboard, key).await;
    let releases_waiting = match crate::moderation::held::releases_waiting(pool, key).await? {
        (n, Some(leaves)) if n > 0 => Some((n, time(Some(leaves)))),
        _ => None,
    };
    let more = invites.len() as i64 > PAGE;
    let decisions = decisions(&sender);
    Ok(SenderPage {
        releases_waiting,
        layout: admin.layout(),
        confirming: decisions.iter().any(|d| d.confirm),
        bans: decisions.iter().any(|d| d.bans),
        decisions,
        sender: SenderView::new(app, sender),
        counters,
        counters_error,
        outcomes: outcomes(bounces, complaints),
        flags: flags
            .into_iter()
            .map(|f| FlagView {
                when: time(Some(f.created_at)),
                rule: f.rule_name,
                signal: Signal::words_of(&f.signal).to_owned(),
                action: f.action,
                observed: f.observed,
                limit: f.limit_count,
                window: window(f.window_secs),
                repeat: f.repeat,
            })
            .collect(),
        held: held.into_iter().map(HeldView::from).collect(),
        invites: invites
            .into_iter()
            .take(PAGE as usize)
            .map(|i| {
                let outcomes = i.outcomes.unwrap_or_default();
                InviteView {
                    id: i.id.to_string(),
                    when: time(Some(i.created_at)),
                    why: why(&i.decision),
                    text: i
                        .message
                        .or(i.resource)
                        .or(i.sender_name)
                        .as_deref()
                        .map(marked)
                        .unwrap_or_default(),
                    complained: outcomes.contains("complaint") || outcomes.contains("bounce"),
                    outcomes,
                    recipient: i.recipient,
                    status: i.status,
                }
            })
            .collect(),
        notes: notes
            .into_iter()
            .map(|n| NoteView {
                when: time(Some(n.created_at)),
                author: n.author,
                body: n.body,
            })
            .collect(),
        strikes: strikes.into_iter().map(StrikeView::from).collect(),
        terms: term_choices(next_term),
        audit: history
            .into_iter()
            .map(|a| AuditView {
                when: time(Some(a.at)),
                actor: a.actor,
                action: a.action,
                note: a.note.unwrap_or_default(),
            })
            .collect(),
        page,
        more,
        notice,
        error,
    })
}

pub(super) async fn sender_page(
    State(dashboard): State<Dashboard>,
    admin: Admin,
    Path((app, id)): Path<(String, String)>,
    Query(q): Query<PageQuery>,
) -> Result<SenderPage, AdminError> {
    let key = sender_of(&dashboard, &app, &id)?;
    let notice = Notice::from_query(&q).map(Notice::text);
    render_sender(
        &dashboard,
        &admin,
        &app,
        &key,
        page_number(q.page),
        notice,
        None,
    )
    .await
}
