//! The send-invite flow (docs/DESIGN.md §3a): sender state, rules, one write, an answer only after
//! the commit. Mail goes out later, from the outbox.
//!
//! This file holds the flow itself; the rule check is [`check`], the verdict [`policy`] (pure), the
//! SQL is [`store`], repeated requests are [`idempotency`], and invites accepted while Redis
//! was away are re-checked by [`deferred`].

pub mod bench;
mod check;
mod decision;
mod deferred;
pub mod follow_up;
pub mod global;
pub mod http;
pub mod idempotency;
pub mod policy;
mod store;
pub mod validate;
pub mod writer;

use std::sync::Arc;

use sqlx::PgPool;
use uuid::Uuid;

use crate::apps::App;
use crate::campaigns::Campaigns;
use crate::coalesce::BatchError;
use crate::config::RedisPolicy;
use crate::incident::Incident;
use crate::limiter::{KeyPrefix, Limiter, LimiterError};
use crate::metrics::{DependencyError, Metrics};
use crate::moderation::{self, SenderState, SenderStates, Standing};
use crate::rules::{Action, RuleCache};
use crate::sender_key::SenderKey;
use crate::signals;
use check::Counted;
use follow_up::FollowUps;
use idempotency::Earlier;
use policy::{Checked, Decided, Rejection, Status};
pub use store::insert::INSERT_BATCH;
use store::{Assumed, NewInvite, Written};
pub use validate::{InvalidBody, ValidInvite};
use writer::{Approach, Write, Writer};

/// What the API answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durably recorded: queued, held or suppressed alike.
    Accepted(Uuid),
    /// A `reject` rule is exceeded.
    Rejected(Rejection),
}

#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("database: {0}")]
    Batch(#[from] BatchError),
    #[error("limiter: {0}")]
    Limiter(#[from] LimiterError),
    #[error("this Idempotency-Key was used with a different body")]
    IdempotencyConflict,
    #[error("{0}")]
    Unavailable(String),
}

/// One request to send an invite.
pub struct Submission<'a> {
    pub api_key_id: i64,
    /// The app of the key: its senders, links and branding.
    pub app: Arc<App>,
    pub idempotency_key: Option<&'a str>,
    /// The raw body, for idempotent replays.
    pub body: &'a [u8],
    pub invite: ValidInvite,
}

#[derive(Clone)]
pub struct InviteService {
    pub pool: PgPool,
    /// Invites are written through it, many to a commit.
    pub writer: Writer,
    /// Flags left by written invites, done after their commit.
    pub follow_ups: FollowUps,
    pub limiter: Limiter,
    pub rules: RuleCache,
    pub senders: SenderStates,
    /// Global rules counted in process and flushed (None: every invite asks Redis).
    pub global: Option<global::GlobalCounts>,
    pub keys: KeyPrefix,
    /// Keys what distinct counts count.
    pub members: signals::MemberKey,
    /// What an invite's text counts under for the campaign rules.
    pub campaigns: Campaigns,
    /// How long a queued invite of a sender who is not trusted waits before it is sent, so a
    /// campaign detected meanwhile can still hold it (docs/DESIGN.md §3d).
    pub settle: std::time::Duration,
    pub held_cap: i64,
    pub on_redis_error: RedisPolicy,
    /// Days a sender counts as new for `new_senders_only` rules.
    pub new_sender_days: i64,
    /// Confirm a repeat offender's ban without waiting for review, for the ladder's term
    /// (deferred invites).
    pub confirm_repeat: Option<moderation::terms::Ladder>,
    pub metrics: Metrics,
    /// Outages of each dependency, logged once each.
    pub redis: Incident,
    pub postgres: Incident,
}

/// What the rules need to know of an invite besides its fields.
#[derive(Debug, Clone, Copy)]
struct Facts {
    has_links: bool,
    /// For `new_senders_only` rules.
    new_sender: bool,
}

/// What the rules answered on one invite, from which a verdict is drawn for the sender's state
/// at the time of the write.
struct Answers {
    checked: Vec<Checked>,
    /// The campaign subjects the invite counted under.
    campaign_keys: Vec<String>,
    /// The banned sender this one is linked to, when the invite carries links.
    linked_to: Option<String>,
}

impl Answers {
    /// The verdict for a sender now in `state`.
    fn verdict(&self, state: SenderState) -> Decided {
        if state == SenderState::Trusted {
            return policy::trusted();
        }
        policy::verdict(&self.checked, state, self.linked_to.as_deref())
    }
}

/// Times a state change may be seen between the verdict and the write before giving up.
const STATE_RETRIES: usize = 3;

impl InviteService {
    pub async fn submit(&self, sub: Submission<'_>) -> Result<Outcome, InviteError> {
        let request_hash = idempotency::request_hash(sub.body);
        if let Some(key) = sub.idempotency_key
            && let Some(id) = self.replay(sub.api_key_id, key, &request_hash).await?
        {
            return Ok(Outcome::Accepted(id));
        }
        let invite = Arc::new(sub.invite);
        let request_hash: Arc<[u8]> = request_hash.into();
        let sender = SenderKey::new(sub.app.id, invite.sender_id.as_str());
        let address = invite
            .sender_ip
            .map(|ip| crate::http::group(ip).to_string());
        let mut standing = self.senders.get(&sender).await?;
        let facts = Facts {
            has_links: invite.has_links(),
            new_sender: standing.is_new(
                invite.sender_created_at,
                self.new_sender_days,
                chrono::Utc::now(),
            ),
        };
        let linked_to = self
            .linked_to(&sender, &standing, address.as_deref(), facts)
            .await?;
        // Time-ordered, so each batch's rows land at the right edge of the id index instead of
        // on random pages. The id is no secret: every link that carries it is signed.
        let id = Uuid::now_v7();
        let accept_url =
            sub.app
                .invite_link(invite.accept_url.as_ref(), id, invite.resource.as_deref());
        // The rules count an invite once. When the sender's state turns out to have changed
        // since this instance cached it, the verdict is derived again from the same answers,
        // unless a lift came between.
        let mut answers: Option<Result<Counted, LimiterError>> = None;
        // From here the request is on its way to the writer (a slow sender read is not).
        let mut approach = Some(self.writer.approach());
        for _ in 0..STATE_RETRIES {
            let state = standing.state;
            let decided = if state == SenderState::Trusted {
                policy::trusted()
            } else {
                let checked = match answers.take() {
                    Some(checked) => checked,
                    None => match self.check_rules(&invite, &sender, None, facts).await {
                        Ok(c) => Ok(c),
                        Err(InviteError::Limiter(e)) => Err(e),
                        Err(e) => return Err(e),
                    },
                };
                let decided = match &checked {
                    Ok(c) => policy::verdict(&c.checked, state, linked_to.as_deref()),
                    Err(e) => self.without_redis(e, state, linked_to.as_deref())?,
                };
                answers = Some(checked);
                decided
            };
            if let Some(r) = decided.rejection {
                return Ok(Outcome::Rejected(r));
            }
            let status = decided.status;
            // A breach holds its invite; its flag follows the commit.
            let banning = decided
                .breach
                .as_ref()
                .is_some_and(|b| b.action == Action::ShadowBan);
            let flagging = decided.breach.is_some();
            let write = match status {
                Status::Held => Write::Held {
                    assumed: state,
                    cap: self.held_cap,
                    breach: decided.breach,
                },
                status => Write::Queued(Assumed::new(
                    &standing,
                    state == SenderState::Active && status == Status::Queued,
                )),
            };
            let campaign_keys = match &answers {
                Some(Ok(counted)) => counted.campaign_keys.clone(),
                _ => Vec::new(),
            };
            let new = NewInvite {
                campaign_keys,
                settle: if state == SenderState::Trusted {
                    std::time::Duration::ZERO
                } else {
                    self.settle
                },
                id,
                api_key_id: sub.api_key_id,
                sender: sender.clone(),
                invite: invite.clone(),
                accept_url: accept_url.clone(),
                address: address.clone(),
                status,
                decision: decided.decision,
                idempotency_key: sub.idempotency_key.map(str::to_owned),
                request_hash: request_hash.clone(),
            };
            if self.record(new, write, approach.take()).await? != Written::Skipped {
                if flagging {
                    self.follow_ups.wake();
                }
                if banning {
                    // Held at once on this instance, until the follow-up's state change is
                    // announced to every instance.
                    let banned = Standing {
                        state: SenderState::ShadowBanned,
                        ..standing
                    };
                    self.senders.assume(&sender, banned);
                }
                return Ok(Outcome::Accepted(id));
            }
            // Not written: the key was taken first (answer as its first use did), or the
            // sender's state changed since it was read.
            if let Some(key) = sub.idempotency_key
                && let Some(id) = self.replay(sub.api_key_id, key, &request_hash).await?
            {
                return Ok(Outcome::Accepted(id));
            }
            self.senders.forget(&sender);
            let assumed = standing.state;
            standing = moderation::stored_standing(&self.pool, &sender).await?;
            // Only a lift turns a ban into `active`, and it cleared the sender's counters
            // before it committed: answers taken before it would flag the sender again for the
            // breach just lifted (docs/DESIGN.md §3b), so the invite counts afresh in the cleared
            // counters (and once more in those the lift left as they were).
            if assumed.holds_invites() && standing.state == SenderState::Active {
                answers = None;
            }
        }
        Err(InviteError::Unavailable(
            "the sender's state keeps changing; retry shortly".into(),
        ))
    }

    /// Writes the invite through the group commit, timed and counted.
    async fn record(
        &self,
        new: NewInvite,
        write: Write,
        approach: Option<Approach>,
    ) -> Result<Written, BatchError> {
        let started = std::time::Instant::now();
        let status = new.status;
        let written = self.writer.write(new, write, approach).await;
        match &written {
            Ok(Written::Skipped) => {}
            Ok(_) => {
                self.postgres.recovered();
                self.metrics.postgres_latency(started.elapsed());
                self.metrics.invites(status.as_str(), 1);
            }
            Err(e) => {
                self.postgres.failed(e);
                self.metrics.dependency_error(DependencyError::Postgres);
            }
        }
        written
    }

    /// The first answer to an Idempotency-Key, if it was used before with the same body.
    async fn replay(
        &self,
        api_key_id: i64,
        key: &str,
        request_hash: &[u8],
    ) -> Result<Option<Uuid>, InviteError> {
        match idempotency::earlier(&self.pool, api_key_id, key, request_hash).await? {
            Earlier::Unused => Ok(None),
            Earlier::Same(id) => Ok(Some(id)),
            Earlier::Conflict => Err(InviteError::IdempotencyConflict),
        }
    }

    /// The rules' answers on an invite from a sender of `standing`, at `at_ms` (now when
    /// `None`), asked whatever the sender's state: it may have changed when the verdict is
    /// drawn.
    async fn answers(
        &self,
        invite: &ValidInvite,
        sender: &SenderKey,
        standing: &Standing,
        at_ms: Option<u64>,
    ) -> Result<Answers, InviteError> {
        let at = at_ms
            .and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64))
            .unwrap_or_else(chrono::Utc::now);
        let facts = Facts {
            has_links: invite.has_links(),
            new_sender: standing.is_new(invite.sender_created_at, self.new_sender_days, at),
        };
        let address = invite
            .sender_ip
            .map(|ip| crate::http::group(ip).to_string());
        let linked_to = self
            .linked_to(sender, standing, address.as_deref(), facts)
            .await?;
        let counted = self.check_rules(invite, sender, at_ms, facts).await?;
        Ok(Answers {
            checked: counted.checked,
            campaign_keys: counted.campaign_keys,
            linked_to,
        })
    }

    /// The banned sender this one is linked to, when it matters: the invite has links. A sender
    /// never seen is looked up by its address (it would be linked when first written).
    async fn linked_to(
        &self,
        sender: &SenderKey,
        standing: &Standing,
        address: Option<&str>,
        facts: Facts,
    ) -> Result<Option<String>, sqlx::Error> {
        if !facts.has_links {
            return Ok(None);
        }
        match (&standing.linked_to, address) {
            (Some(banned), _) => Ok(Some(banned.clone())),
            (None, Some(address)) if standing.unseen() => {
                moderation::banned_near(&self.pool, sender.app_id, address).await
            }
            _ => Ok(None),
        }
    }

    /// What an invite from a sender in `state` becomes while Redis cannot be asked, by the
    /// configured policy.
    fn without_redis(
        &self,
        error: &LimiterError,
        state: SenderState,
        linked_to: Option<&str>,
    ) -> Result<Decided, InviteError> {
        self.redis.failed(error);
        policy::without_redis(self.on_redis_error, state, linked_to)
            .ok_or_else(|| InviteError::Unavailable("the rate limiter is unavailable".into()))
    }
}
