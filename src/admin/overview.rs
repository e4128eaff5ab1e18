//! The overview: recent invites by status, senders awaiting review, and an hourly chart.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;

use super::Dashboard;
use super::error::AdminError;
use super::format::{Time, wait};
use super::layout::Layout;
use super::session::Admin;
use crate::appeals;
use crate::invite_counts::{self, Hour};
use crate::moderation::senders;

pub(super) struct Bar {
    x: i64,
    width: i64,
    label: String,
    show_label: bool,
    delivered: i64,
    delivered_y: i64,
    delivered_h: i64,
    stopped: i64,
    stopped_y: i64,
    stopped_h: i64,
}

pub(super) struct Chart {
    width: i64,
    height: i64,
    top: i64,
    bottom: i64,
    left: i64,
    max: i64,
    bars: Vec<Bar>,
}

/// Two bars per hour, delivered and held-or-suppressed, scaled to the busiest hour.
fn chart(hours: &[Hour], now: Time) -> Chart {
    let (width, height, top, left) = (960, 240, 10, 40);
    let bottom = height - 20;
    let max = hours
        .iter()
        .map(|h| h.delivered.max(h.stopped))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = (width - left) / 24;
    let bar = (slot - 4) / 2;
    let start = now - chrono::Duration::hours(23);
    let bars = (0..24)
        .map(|n| {
            let hour = start + chrono::Duration::hours(n);
            let hour_key = hour.format("%Y-%m-%d %H").to_string();
            let (delivered, stopped) = hours
                .iter()
                .find(|h| h.hour.format("%Y-%m-%d %H").to_string() == hour_key)
                .map(|h| (h.delivered, h.stopped))
                .unwrap_or((0, 0));
            let scale = |v: i64| (v * (bottom - top)) / max;
            Bar {
                x: left + n * slot,
                width: bar,
                label: hour.format("%H:00").to_string(),
                show_label: n % 3 == 0,
                delivered,
                delivered_y: bottom - scale(delivered),
                delivered_h: scale(delivered),
                stopped,
                stopped_y: bottom - scale(stopped),
                stopped_h: scale(stopped),
            }
        })
        .collect();
    Chart {
        width,
        height,
        top,
        bottom,
        left,
        max,
        bars,
    }
}

#[derive(Template, WebTemplate)]
#[template(path = "admin/overview.html")]
pub(super) struct OverviewPage {
    layout: Layout,
    awaiting: i64,
    appeals: i64,
    /// How long the oldest open appeal has waited.
    oldest_appeal: String,
    statuses: Vec<invite_counts::StatusCount>,
    chart: Chart,
}

pub(super) async fn overview(
    State(dashboard): State<Dashboard>,
    admin: Admin,
) -> Result<OverviewPage, AdminError> {
    let pool = &dashboard.pool;
    let statuses = invite_counts::statuses_24h(pool).await?;
    let awaiting = senders::awaiting_review(pool).await?;
    let hours = invite_counts::hourly(pool).await?;
    let (appeals, oldest) = appeals::waiting(pool).await?;
    Ok(OverviewPage {
        layout: admin.layout(),
        awaiting,
        appeals,
        oldest_appeal: wait(oldest as i64),
        statuses,
        chart: chart(&hours, chrono::Utc::now()),
    })
}
