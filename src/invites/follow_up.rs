//! What a flagging invite leaves to do (docs/DESIGN.md §3a): the batch statement writes the
//! invite like any other, with a `pending_flags` row in the same transaction; the flag, the
//! sender's new state, the audit entry and the webhook event follow here, in a transaction of
//! their own, so the invite is answered as fast as its neighbours. Every instance does them,
//! woken at once by its own writer's commits and once a second otherwise; `SKIP LOCKED` keeps
//! two from doing the same one, and the row goes in the transaction that does it, so each is
//! done once, even after a crash between the commit and the flag.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::types::Json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::policy::Breach;
use super::store;
use crate::campaigns;
use crate::moderation::SenderState;
use crate::moderation::terms::Ladder;
use crate::sender_key::SenderKey;
use crate::webhooks::{self, EventType};

/// Follow-ups done per transaction.
const BATCH: i64 = 100;

/// The record of a breach in its follow-up row.
pub fn record(breach: &Breach) -> Value {
    json!({
        "rule_id": breach.rule_id,
        "rule_name": breach.rule_name,
        "signal": breach.signal.as_str(),
        "action": breach.action.as_str(),
        "observed": breach.observed,
        "limit": breach.limit,
        "window_secs": breach.window_secs,
        "campaign": breach.campaign,
    })
}

/// The breach a follow-up row records; `None` when it names a signal or an action this version
/// does not know.
fn breach(record: &Value) -> Option<Breach> {
    Some(Breach {
        rule_id: record["rule_id"].as_i64(),
        rule_name: record["rule_name"].as_str()?.to_owned(),
        signal: record["signal"].as_str()?.parse().ok()?,
        action: record["action"].as_str()?.parse().ok()?,
        observed: record["observed"].as_u64()?,
        limit: record["limit"].as_u64()?,
        window_secs: record["window_secs"].as_u64()?,
        campaign: record["campaign"].as_str().map(str::to_owned),
    })
}

/// Flags the sender of a breach by invite `invite_id`. A campaign's breach also records the
/// campaign, holds its invites still waiting in the queue (docs/DESIGN.md §3d: with a settle
/// time, the first recipients never see it) and flags their senders, and tells each app with
/// senders in it, once. Answers the sender's new state, if it changed.
pub async fn flag_breach(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender: &SenderKey,
    breach: &Breach,
    invite_id: Uuid,
    confirm_repeat: Option<&Ladder>,
    stored: bool,
) -> Result<Option<SenderState>, sqlx::Error> {
    let Some(subject) = &breach.campaign else {
        return store::flag(
            tx,
            sender,
            breach,
            Some(invite_id),
            None,
            confirm_repeat,
            stored,
        )
        .await;
    };
    let (campaign, sweep) =
        campaigns::store::detect(tx, subject, &breach.rule_name, invite_id).await?;
    let flagged = store::flag(
        tx,
        sender,
        breach,
        Some(invite_id),
        Some(campaign),
        confirm_repeat,
        stored,
    )
    .await?;
    if sweep {
        // Their senders are locked in key order first, as every writer locks them.
        let waiting = campaigns::store::queued_senders(tx, subject).await?;
        store::lock_senders(tx, &waiting).await?;
        for swept in campaigns::store::sweep(tx, subject, campaign).await? {
            let of = SenderKey::new(swept.app_id, swept.sender_id.as_str());
            store::flag(
                tx,
                &of,
                breach,
                Some(swept.id),
                Some(campaign),
                confirm_repeat,
                true,
            )
            .await?;
        }
    }
    tell_apps(tx, campaign).await?;
    Ok(flagged)
}

/// `campaign.detected` to each app with senders flagged in the campaign that was not told yet,
/// naming that app's senders only.
async fn tell_apps(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    campaign: i64,
) -> Result<(), sqlx::Error> {
    let untold = campaigns::store::untold_apps(tx, campaign).await?;
    if untold.is_empty() {
        return Ok(());
    }
    let (kind, sample): (String, Option<String>) = sqlx::query_as(
        "SELECT kind, CASE WHEN kind = 'link_domain' THEN normalised ELSE sample END
         FROM campaigns WHERE id = $1",
    )
    .bind(campaign)
    .fetch_one(&mut **tx)
    .await?;
    for (app_id, senders) in untold {
        let app: Option<String> =
            sqlx::query_scalar("SELECT name FROM apps WHERE id = $1 AND webhook_url IS NOT NULL")
                .bind(app_id)
                .fetch_optional(&mut **tx)
                .await?;
        let Some(app) = app else { continue };
        let data = json!({
            "campaign_id": campaign,
            "kind": kind,
            "sample": sample,
            "senders": senders,
        });
        let Value::Object(fields) = data else {
            continue;
        };
        webhooks::enqueue(
            tx,
            app_id,
            &app,
            EventType::CampaignDetected,
            chrono::Utc::now(),
            fields,
        )
        .await?;
    }
    Ok(())
}

#[derive(sqlx::FromRow)]
struct Pending {
    id: i64,
    app_id: i64,
    sender_id: String,
    invite_id: Uuid,
    version: i64,
    over_cap: bool,
    breach: Json<Value>,
}

/// Does the follow-ups; cloned into the invite service, which wakes it after each commit that
/// left one.
#[derive(Clone)]
pub struct FollowUps {
    pool: PgPool,
    wake: Arc<Notify>,
    /// A repeat offender's shadow ban is confirmed at once, for the ladder's term.
    confirm_repeat: Option<Ladder>,
}

impl FollowUps {
    pub fn new(pool: PgPool, confirm_repeat: Option<Ladder>) -> FollowUps {
        FollowUps {
            pool,
            wake: Arc::new(Notify::new()),
            confirm_repeat,
        }
    }

    /// A follow-up was committed: do it now rather than at the next round.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Does up to [`BATCH`] follow-ups in one transaction, oldest first; answers how many.
    ///
    /// Their senders are locked in key order, as the batch statement locks them. A follow-up
    /// whose sender a person decided on since its invite was written (its version moved, by
    /// someone else than the system) is dropped: the decision was made with the invite in view
    /// and outranks the rule.
    pub async fn run_once(&self) -> Result<usize, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let pending: Vec<Pending> = sqlx::query_as(
            "SELECT id, app_id, sender_id, invite_id, version, over_cap, breach
             FROM pending_flags ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
        )
        .bind(BATCH)
        .fetch_all(&mut *tx)
        .await?;
        if pending.is_empty() {
            return Ok(0);
        }
        let senders: Vec<SenderKey> = pending
            .iter()
            .map(|p| SenderKey::new(p.app_id, p.sender_id.as_str()))
            .collect();
        store::lock_senders(&mut tx, &senders).await?;
        for (p, sender) in pending.iter().zip(&senders) {
            let decided: bool = sqlx::query_scalar(
                "SELECT version > $3 AND COALESCE(state_changed_by, 'system') NOT LIKE 'system%'
                 FROM senders
                 WHERE app_id = $1 AND id = $2",
            )
            .bind(p.app_id)
            .bind(&p.sender_id)
            .bind(p.version)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or(false);
            match breach(&p.breach) {
                Some(_) if decided => {
                    tracing::info!(sender = %p.sender_id, "a flag overtaken by a decision dropped");
                }
                Some(b) => {
                    let stored = !p.over_cap;
                    flag_breach(
                        &mut tx,
                        sender,
                        &b,
                        p.invite_id,
                        self.confirm_repeat.as_ref(),
                        stored,
                    )
                    .await?;
                }
                None => tracing::warn!(id = p.id, "a follow-up with an unknown breach dropped"),
            }
        }
        sqlx::query("DELETE FROM pending_flags WHERE id = ANY($1)")
            .bind(pending.iter().map(|p| p.id).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(pending.len())
    }

    /// Does follow-ups when woken and every second, until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            // Bounded: follow-ups coming faster than they are done wait for the next round.
            for _ in 0..1000 {
                match self.run_once().await {
                    Ok(n) if n as i64 == BATCH && !stop.is_cancelled() => continue,
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "flag follow-ups failed; retried"),
                }
                break;
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}
