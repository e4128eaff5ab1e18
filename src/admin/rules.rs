//! The rules pages: the list, and forms to create and edit a rule (errors beside each field,
//! a backtest on the last 24 hours). Saved rules reach every instance through NOTIFY.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use strum::VariantArray;

use super::Dashboard;
use super::error::AdminError;
use super::format::{Notice, PageQuery, window};
use super::layout::Layout;
use super::senders::sender_path;
use super::session::{Admin, AdminOnly};
use crate::limiter::Algorithm;
use crate::rules::advisor::{self, Score};
use crate::rules::backtest::{self, Backtest};
use crate::rules::edit::{self, FieldErrors, RuleInput, SaveError};
use crate::rules::{Action, Scope, Signal};
use crate::sender_key::SenderKey;

pub(super) struct RuleRow {
    id: i64,
    name: String,
    scope: String,
    signal: String,
    new_senders_only: bool,
    limit: u64,
    window: String,
    algorithm: String,
    edge: String,
    action: String,
    enabled: bool,
    /// Every Redis key of the rule, as a `SCAN MATCH` pattern: keys end in a code, not the
    /// rule's name.
    keys: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/rules.html")]
pub(super) struct RulesPage {
    layout: Layout,
    rules: Vec<RuleRow>,
    notice: Option<String>,
}

pub(super) async fn list(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Query(q): Query<PageQuery>,
) -> Result<RulesPage, AdminError> {
    let rules = crate::rules::load_all(&dashboard.pool).await?;
    Ok(RulesPage {
        layout: admin.layout(),
        rules: rules
            .into_iter()
            .map(|r| {
                let (algorithm, edge) = edit::algorithm_parts(r.quota.algorithm);
                let keys = dashboard
                    .keys
                    .key(&r.scope.any_subject(), &r.name, &r.quota);
                RuleRow {
                    id: r.id,
                    name: r.name,
                    scope: r.scope.words().to_owned(),
                    signal: r.signal.words().to_owned(),
                    new_senders_only: r.new_senders_only,
                    limit: r.quota.limit,
                    window: window((r.quota.window_ms / 1000) as i64),
                    algorithm: algorithm.to_owned(),
                    edge: edge.unwrap_or_default().to_owned(),
                    action: r.action.as_str().to_owned(),
                    enabled: r.enabled,
                    keys: keys.as_str().to_owned(),
                }
            })
            .collect(),
        notice: Notice::from_query(&q).map(Notice::text),
    })
}

/// The form's fields as they were typed.
pub(super) struct FormView {
    name: String,
    scope: String,
    signal: String,
    new_senders_only: bool,
    limit: String,
    window: String,
    algorithm: String,
    rule_action: String,
    enabled: bool,
    version: i64,
    note: String,
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/rule_form.html")]
pub(super) struct RuleFormPage {
    layout: Layout,
    id: Option<i64>,
    action: String,
    form: FormView,
    errors: FieldErrors,
    error: Option<String>,
    scopes: Vec<&'static str>,
    signals: Vec<&'static str>,
    algorithms: Vec<String>,
    actions: Vec<&'static str>,
    backtest: Option<BacktestView>,
}

pub(super) struct BacktestView {
    invites: usize,
    tripped: usize,
    over: usize,
    /// The senders caught, each as (name, link to its page).
    caught: Vec<(String, String)>,
    caught_count: usize,
    subjects: &'static str,
    truncated: bool,
    score: Option<ScoreView>,
}

pub(super) struct ScoreView {
    confirmed: usize,
    lifted: usize,
    suggested: Option<u64>,
    rows: Vec<ScoreRowView>,
    /// The reviewed senders the proposed limit catches: (name, page, confirmed).
    caught: Vec<(String, String, bool)>,
}

/// A sender's name with its app, and its page.
fn sender_link(dashboard: &Dashboard, sender: &SenderKey) -> Option<(String, String)> {
    let app = dashboard.apps.get(sender.app_id)?;
    Some((
        format!("{} ({})", sender.id, app.name),
        sender_path(&app.name, &sender.id),
    ))
}

pub(super) struct ScoreRowView {
    limit: u64,
    confirmed_caught: usize,
    median: String,
    lifted_caught: usize,
    /// A bar per row, as wide as the share of confirmed senders caught (0-100).
    caught_pct: usize,
    suggested: bool,
}

fn score_view(dashboard: &Dashboard, s: Score) -> ScoreView {
    let rows = s
        .rows
        .iter()
        .map(|r| ScoreRowView {
            limit: r.limit,
            confirmed_caught: r.confirmed_caught,
            median: r
                .median_invites_to_catch
                .map_or_else(|| "—".into(), |n| n.to_string()),
            lifted_caught: r.lifted_caught,
            caught_pct: (r.confirmed_caught * 100)
                .checked_div(s.confirmed)
                .unwrap_or(0),
            suggested: Some(r.limit) == s.suggested,
        })
        .collect();
    ScoreView {
        caught: s
            .caught
            .iter()
            .filter_map(|(sender, confirmed)| {
                sender_link(dashboard, sender).map(|(name, path)| (name, path, *confirmed))
            })
            .collect(),
        confirmed: s.confirmed,
        lifted: s.lifted,
        suggested: s.suggested,
        rows,
    }
}

fn backtest_view(
    dashboard: &Dashboard,
    b: Backtest,
    score: Option<Score>,
    scope: Scope,
) -> BacktestView {
    let caught = b
        .caught
        .iter()
        .filter_map(|s| sender_link(dashboard, s))
        .collect();
    BacktestView {
        caught,
        caught_count: b.caught_count,
        score: score.map(|s| score_view(dashboard, s)),
        invites: b.invites,
        tripped: b.tripped,
        over: b.over,
        subjects: match scope {
            Scope::Sender => "senders",
            Scope::Ip => "addresses",
            Scope::Recipient => "recipients",
            Scope::RecipientDomain => "recipient domains",
            Scope::Global => "global counters",
            Scope::Fingerprint => "texts",
            Scope::LinkDomain => "linked domains",
        },
        truncated: b.truncated,
    }
}

fn page(
    admin: &Admin,
    id: Option<i64>,
    form: FormView,
    errors: FieldErrors,
    error: Option<String>,
    backtest: Option<BacktestView>,
) -> RuleFormPage {
    RuleFormPage {
        layout: admin.layout(),
        action: match id {
            Some(id) => format!("/admin/rules/{id}"),
            None => "/admin/rules/new".into(),
        },
        id,
        form,
        errors,
        error,
        scopes: Scope::VARIANTS.iter().map(|s| s.as_str()).collect(),
        signals: Signal::VARIANTS.iter().map(|s| s.as_str()).collect(),
        algorithms: Algorithm::ALL.iter().map(ToString::to_string).collect(),
        actions: Action::VARIANTS.iter().map(|a| a.as_str()).collect(),
        backtest,
    }
}

pub(super) async fn new_form(AdminOnly(admin): AdminOnly) -> RuleFormPage {
    let form = FormView {
        name: String::new(),
        scope: "sender".into(),
        signal: "invites".into(),
        new_senders_only: false,
        limit: String::new(),
        window: "3600".into(),
        algorithm: "hash_counters".into(),
        rule_action: "monitor".into(),
        enabled: true,
        version: 0,
        note: String::new(),
    };
    page(&admin, None, form, FieldErrors::default(), None, None)
}

pub(super) async fn edit_form(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(id): Path<i64>,
) -> Result<RuleFormPage, AdminError> {
    let rule = crate::rules::find(&dashboard.pool, id)
        .await?
        .ok_or_else(|| AdminError::NotFound(format!("No rule {id}.")))?;
    let form = FormView {
        name: rule.name,
        scope: rule.scope.as_str().into(),
        signal: rule.signal.as_str().into(),
        new_senders_only: rule.new_senders_only,
        limit: rule.quota.limit.to_string(),
        window: (rule.quota.window_ms / 1000).to_string(),
        algorithm: rule.algorithm.to_string(),
        rule_action: rule.action.as_str().into(),
        enabled: rule.enabled,
        version: rule.version,
        note: String::new(),
    };
    Ok(page(
        &admin,
        Some(id),
        form,
        FieldErrors::default(),
        None,
        None,
    ))
}

#[derive(Deserialize)]
pub(super) struct RuleForm {
    csrf: String,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    signal: String,
    new_senders_only: Option<String>,
    #[serde(default)]
    limit: String,
    #[serde(default)]
    window: String,
    #[serde(default)]
    algorithm: String,
    #[serde(default)]
    rule_action: String,
    enabled: Option<String>,
    #[serde(default)]
    note: String,
    #[serde(default)]
    intent: String,
}

pub(super) async fn create(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    axum::Form(form): axum::Form<RuleForm>,
) -> Result<Response, AdminError> {
    submit(&dashboard, admin, None, form).await
}

pub(super) async fn update(
    State(dashboard): State<Dashboard>,
    AdminOnly(admin): AdminOnly,
    Path(id): Path<i64>,
    axum::Form(form): axum::Form<RuleForm>,
) -> Result<Response, AdminError> {
    submit(&dashboard, admin, Some(id), form).await
}

async fn submit(
    dashboard: &Dashboard,
    admin: Admin,
    id: Option<i64>,
    form: RuleForm,
) -> Result<Response, AdminError> {
    admin.check_csrf(&form.csrf)?;
    // An edit keeps the rule's name, whatever the form says.
    let name = match id {
        Some(id) => {
            crate::rules::find(&dashboard.pool, id)
                .await?
                .ok_or_else(|| AdminError::NotFound(format!("No rule {id}.")))?
                .name
        }
        None => form.name,
    };
    let input = RuleInput {
        name: name.clone(),
        scope: form.scope.clone(),
        signal: form.signal.clone(),
        new_senders_only: form.new_senders_only.is_some(),
        limit: form.limit.clone(),
        window: form.window.clone(),
        algorithm: form.algorithm.clone(),
        action: form.rule_action.clone(),
        enabled: form.enabled.is_some(),
    };
    let view = FormView {
        name,
        scope: form.scope,
        signal: form.signal,
        new_senders_only: input.new_senders_only,
        limit: form.limit,
        window: form.window,
        algorithm: form.algorithm,
        rule_action: form.rule_action,
        enabled: input.enabled,
        version: form.version,
        note: form.note.clone(),
    };
    let rule = match edit::validate(&input) {
        Ok(rule) => rule,
        Err(errors) => {
            let p = page(&admin, id, view, *errors, None, None);
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, p).into_response());
        }
    };
    if form.intent == "backtest" {
        let days = dashboard.new_sender_days;
        let result = backtest::backtest(&dashboard.pool, &rule, days).await?;
        let score = advisor::score(&dashboard.pool, &rule, days).await?;
        let b = backtest_view(dashboard, result, score, rule.scope);
        return Ok(page(&admin, id, view, FieldErrors::default(), None, Some(b)).into_response());
    }
    let note = super::decision_note(&form.note)?;
    let saved = match id {
        Some(id) => edit::update(
            &dashboard.pool,
            id,
            form.version,
            &rule,
            &admin.0.username,
            note,
        )
        .await
        .map(|()| id),
        None => edit::create(&dashboard.pool, &rule, &admin.0.username, note).await,
    };
    match saved {
        Ok(_) => {
            let notice = Notice::RuleSaved.query();
            Ok(Redirect::to(&format!("/admin/rules?{notice}")).into_response())
        }
        Err(e @ (SaveError::NameTaken(_) | SaveError::SharedKeys { .. })) => {
            let errors = FieldErrors {
                name: Some(e.to_string()),
                ..FieldErrors::default()
            };
            let p = page(&admin, id, view, errors, None, None);
            Ok((StatusCode::UNPROCESSABLE_ENTITY, p).into_response())
        }
        Err(e @ SaveError::Stale) => {
            let p = page(
                &admin,
                id,
                view,
                FieldErrors::default(),
                Some(e.to_string()),
                None,
            );
            Ok((StatusCode::CONFLICT, p).into_response())
        }
        Err(e) => Err(e.into()),
    }
}
