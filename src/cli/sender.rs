//! `sendguard sender ban|lift`: a sender banned or lifted by hand (docs/DESIGN.md §3e), as a
//! reviewer would from the dashboard, audited under the operator's name.

use std::time::Duration;

use clap::{Args, Subcommand};
use sendguard::config::Database;
use sendguard::limiter::KeyPrefix;
use sendguard::moderation::SenderState;
use sendguard::moderation::review::{self, Review, ReviewAction, ReviewError};
use sendguard::moderation::terms::{Ladder, Term};
use sendguard::rules::RuleCache;
use sendguard::sender_key::SenderKey;
use sendguard::{apps, audit, moderation};

use super::Failure;

#[derive(Subcommand)]
pub enum SenderCommand {
    /// Ban a sender for a term: its held invites are discarded and later ones held.
    Ban {
        /// The app the sender belongs to.
        app: String,
        /// The sender's id in the app.
        sender_id: String,
        /// 1d, 7d, 30d or permanent; unset: the ladder's term for the sender's strikes.
        #[arg(long = "for", value_name = "TERM")]
        term: Option<Term>,
        /// Why, for the audit log.
        #[arg(long)]
        note: Option<String>,
        #[command(flatten)]
        stores: Stores,
    },
    /// Lift a sender's ban or shadow ban: its held invites are discarded unless `--release`.
    Lift {
        /// The app the sender belongs to.
        app: String,
        /// The sender's id in the app.
        sender_id: String,
        /// Why, for the audit log.
        #[arg(long)]
        note: Option<String>,
        /// Send the held invites instead of discarding them.
        #[arg(long)]
        release: bool,
        /// The ban was a mistake: its strike is removed.
        #[arg(long)]
        mistake: bool,
        #[command(flatten)]
        stores: Stores,
    },
}

/// Where the sender and its counters are: a lift clears the sender's own counters.
#[derive(Args)]
pub struct Stores {
    #[command(flatten)]
    database: Database,
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    #[arg(long, env = "SENDGUARD_KEY_PREFIX", default_value = "sg")]
    key_prefix: String,
    #[arg(long, env = "SENDGUARD_BAN_LADDER", default_value = "7d,30d,permanent")]
    ban_ladder: String,
}

impl SenderCommand {
    pub async fn run(self) -> Result<(), Failure> {
        let (app, sender_id, stores) = match &self {
            SenderCommand::Ban {
                app,
                sender_id,
                stores,
                ..
            }
            | SenderCommand::Lift {
                app,
                sender_id,
                stores,
                ..
            } => (app, sender_id, stores),
        };
        let ladder: Ladder = stores.ban_ladder.parse()?;
        let keys = KeyPrefix::new(&stores.key_prefix)?;
        let pool = super::database(&stores.database).await?;
        let sender = SenderKey::new(apps::store::id_of(&pool, app).await?, sender_id.as_str());
        let Some(current) = moderation::senders::find(&pool, &sender).await? else {
            return Err(
                format!("no sender `{sender_id}` of app `{app}` has sent an invite").into(),
            );
        };
        let state: SenderState = current.state.parse()?;
        let operator = audit::operator();
        let (action, term, note, mistake) = match &self {
            SenderCommand::Ban { term, note, .. } => {
                let action = match state {
                    SenderState::ShadowBanned => ReviewAction::ConfirmBan,
                    SenderState::Banned => {
                        return Err(format!(
                            "sender `{sender_id}` of app `{app}` is banned already; its term \
                             can be changed on the dashboard"
                        )
                        .into());
                    }
                    SenderState::Active | SenderState::Trusted => ReviewAction::Ban,
                };
                (action, *term, note, false)
            }
            SenderCommand::Lift {
                note,
                release,
                mistake,
                ..
            } => {
                if !state.holds_invites() {
                    return Err(format!("sender `{sender_id}` of app `{app}` is not banned").into());
                }
                let action = if *release {
                    ReviewAction::LiftAndRelease
                } else {
                    ReviewAction::LiftAndDiscard
                };
                (action, None, note, *mistake)
            }
        };
        let limiter = sendguard::startup::counters(&stores.redis_url, Duration::from_secs(2))
            .await
            .map_err(|e| format!("redis at REDIS_URL: {e}"))?;
        let rules = RuleCache::load(&pool).await?;
        let review = Review {
            sender: &sender,
            action,
            seen_version: current.version,
            seen_held: Some(current.held_stored),
            actor: &operator,
            admin_id: None,
            note: note.as_deref(),
            term,
            mistake,
            // An operator's release goes out at once: the command has no settle time to offer
            // an undo in.
            release_after: Duration::ZERO,
        };
        let done = review::apply(&pool, &limiter, &keys, &rules, &ladder, &review).await;
        let until: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("SELECT banned_until FROM senders WHERE app_id = $1 AND id = $2")
                .bind(sender.app_id)
                .bind(&sender.id)
                .fetch_optional(&pool)
                .await?
                .flatten();
        pool.close().await;
        let done = done.map_err(|e| match e {
            ReviewError::Stale { .. } => {
                Failure::from("the sender changed while the command ran; run it again")
            }
            e => e.into(),
        })?;
        let invites = done.invites_changed;
        match (done.state, until) {
            (SenderState::Banned, Some(until)) => println!(
                "sender `{sender_id}` of app `{app}` banned until {} ({invites} held invite(s) \
                 discarded)",
                until.format("%Y-%m-%d %H:%M UTC")
            ),
            (SenderState::Banned, None) => println!(
                "sender `{sender_id}` of app `{app}` banned permanently ({invites} held \
                 invite(s) discarded)"
            ),
            _ => println!(
                "sender `{sender_id}` of app `{app}` lifted ({invites} held invite(s) {})",
                if matches!(self, SenderCommand::Lift { release: true, .. }) {
                    "released"
                } else {
                    "discarded"
                }
            ),
        }
        Ok(())
    }
}
