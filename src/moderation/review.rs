//! Review actions on a sender (docs/DESIGN.md §3b): each carries the version of the sender the admin
//! saw and is refused when the sender changed since; each is written to the audit log.

use std::collections::BTreeSet;

use serde_json::json;
use sqlx::PgPool;

use super::SenderState;
pub use super::review_action::ReviewAction;
use super::terms::{self, Ladder, Term};
use crate::audit::{self, Entry};
use crate::limiter::{KeyPrefix, LimitKey, Limiter, LimiterError, Quota};
use crate::rules::{self, Rule, RuleCache};
use crate::sender_key::SenderKey;

/// One admin decision about one sender.
#[derive(Debug, Clone)]
pub struct Review<'a> {
    pub sender: &'a SenderKey,
    pub action: ReviewAction,
    /// The sender's version when the admin loaded the page.
    pub seen_version: i64,
    /// The held invites the page counted. Holding an invite leaves the version as it is (a
    /// sender still sending would make every page stale), so an action that releases held
    /// invites is refused unless the count is still this: none held since is released unseen.
    pub seen_held: Option<i64>,
    pub actor: &'a str,
    /// The admin deciding, when a person decides.
    pub admin_id: Option<i64>,
    pub note: Option<&'a str>,
    /// How long released invites wait before the outbox may send them
    /// (`SENDGUARD_SETTLE_SECS`): until then the release can be undone ([`undo_release`]).
    pub release_after: std::time::Duration,
    /// The term of a ban this review confirms; `None`: the ladder's, by the sender's strikes.
    pub term: Option<Term>,
    /// A lift of a confirmed ban that was a mistake: its strike is removed.
    pub mistake: bool,
}

impl Review<'_> {
    /// Whether the review would release or discard held invites its page did not count (`held`
    /// now): a release always names the count it showed; a discard, when a page gave a count (a
    /// bulk ban names none, and discards what its senders hold), must not exceed it.
    fn changes_unseen(&self, held: i64) -> bool {
        match self.action.held_become() {
            Some("queued") => self.seen_held != Some(held),
            Some(_) => self.seen_held.is_some_and(|seen| held > seen),
            None => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("no sender `{0}`")]
    NotFound(String),
    #[error(
        "this sender changed since you loaded the page (now {state}, version {version}); reload and decide again"
    )]
    Stale { state: String, version: i64 },
    #[error("sender `{0}` is not banned")]
    NotBanned(String),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("clearing counters: {0}")]
    Limiter(#[from] LimiterError),
}

/// What a review did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewed {
    pub state: SenderState,
    pub version: i64,
    /// Held invites released to the queue or discarded.
    pub invites_changed: u64,
}

/// Locks the sender's row for the caller's transaction and answers its state and the count of
/// its held invites, when its version is still the one the admin's page showed.
pub async fn lock_at(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender: &SenderKey,
    seen_version: i64,
) -> Result<(String, i64), ReviewError> {
    let current: Option<(String, i64, i64)> = sqlx::query_as(
        "SELECT state, version, held_stored FROM senders WHERE app_id = $1 AND id = $2
         FOR UPDATE",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((state, version, held)) = current else {
        return Err(ReviewError::NotFound(sender.id.clone()));
    };
    if version != seen_version {
        return Err(ReviewError::Stale { state, version });
    }
    Ok((state, held))
}

/// Applies a review in one transaction; a lift first clears the sender's counters of the rules
/// it tripped, so the released invites and the next ones do not trip them again at once.
pub async fn apply(
    pool: &PgPool,
    limiter: &Limiter,
    keys: &KeyPrefix,
    rules: &RuleCache,
    ladder: &Ladder,
    review: &Review<'_>,
) -> Result<Reviewed, ReviewError> {
    prepare(pool, limiter, keys, rules, review).await?;
    let mut tx = pool.begin().await?;
    let done = apply_in(&mut tx, ladder, review).await?;
    tx.commit().await?;
    Ok(done)
}

/// What a review does before its transaction: a lift clears the sender's counters of the rules
/// it tripped, with no row locked while Redis answers. An invite that sees the lift counts in
/// cleared counters, and a lift Redis cannot clear is not applied at all (the next invite would
/// trip the same counters and flag the sender again, as a repeat offender).
pub async fn prepare(
    pool: &PgPool,
    limiter: &Limiter,
    keys: &KeyPrefix,
    rules: &RuleCache,
    review: &Review<'_>,
) -> Result<(), ReviewError> {
    if !review.action.lifts() {
        return Ok(());
    }
    let sender = review.sender;
    let current: Option<(i64, i64)> =
        sqlx::query_as("SELECT version, held_stored FROM senders WHERE app_id = $1 AND id = $2")
            .bind(sender.app_id)
            .bind(&sender.id)
            .fetch_optional(pool)
            .await?;
    // A page already stale is refused in the transaction, without clearing anything.
    let fresh = current.is_some_and(|(version, held)| {
        version == review.seen_version && !review.changes_unseen(held)
    });
    if fresh {
        clear_counters(pool, limiter, keys, rules, sender).await?;
    }
    Ok(())
}

/// The review's changes in the caller's transaction, after [`prepare`]: the sender's state,
/// its held invites, its flags, the strike and term of a confirmed ban, the audit entry and
/// the app's webhook event.
pub async fn apply_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ladder: &Ladder,
    review: &Review<'_>,
) -> Result<Reviewed, ReviewError> {
    let sender = review.sender;
    let (state, held) = lock_at(tx, sender, review.seen_version).await?;
    // Held invites only come in under the sender's lock, so the count read here stays until
    // the commit.
    if review.changes_unseen(held) {
        return Err(ReviewError::Stale {
            state,
            version: review.seen_version,
        });
    }
    let new_state = match review.action.new_state() {
        Some(s) => s,
        None => state.parse().unwrap_or(SenderState::Active),
    };
    let now = chrono::Utc::now();
    let term = match (review.action.confirms(), review.term) {
        (false, _) => None,
        (true, Some(term)) => Some(term),
        (true, None) => Some(ladder.next_term(&mut **tx, sender, now).await?),
    };
    let until = term.and_then(|t| t.until(now));
    // The strike names the rules of the flags this ban confirms, read before they close.
    if let Some(term) = term {
        terms::record(tx, sender, term, until, review.actor).await?;
    }
    let ban = if term.is_some() {
        latest_flag(tx, sender).await?
    } else {
        None
    };
    let mistake = review.mistake && review.action.lifts() && state == "banned";
    if mistake {
        terms::remove_latest(tx, sender, review.actor, "mistake").await?;
    }
    // A lift remembers when a ban ended (a ban within MEMORY_DAYS after is a repeat offence);
    // a trusted sender made active again was never banned. Any decision answers a request for
    // review. A ban's term is set by the decision that confirms it, kept by one that leaves the
    // state, and ends with any other.
    let version: i64 = sqlx::query_scalar(
        "UPDATE senders SET state = $2, version = version + 1, state_changed_at = now(),
             state_changed_by = $4, review_requested_at = NULL,
             held_stored = CASE WHEN $3 THEN 0 ELSE held_stored END,
             lifted_at = CASE WHEN $5 AND state IN ('shadow_banned', 'banned') THEN now()
                 ELSE lifted_at END,
             banned_until = CASE WHEN $7 THEN $8 WHEN $2 = 'banned' THEN banned_until END
         WHERE app_id = $6 AND id = $1 RETURNING version",
    )
    .bind(&sender.id)
    .bind(new_state.as_str())
    .bind(review.action.held_become().is_some())
    .bind(review.actor)
    .bind(review.action.lifts())
    .bind(sender.app_id)
    .bind(term.is_some())
    .bind(until)
    .fetch_one(&mut **tx)
    .await?;
    if review.action.bans() {
        super::remember_addresses(tx, sender).await?;
    }
    super::close_flags(tx, sender).await?;
    let invites_changed = match review.action.held_become() {
        Some(status) => {
            discard_or_release(tx, sender, status, review.actor, review.release_after).await?
        }
        None => 0,
    };
    let mut detail = json!({"from": state, "to": new_state.as_str(), "invites": invites_changed});
    if let Some(term) = term {
        detail["term"] = term.as_str().into();
        detail["banned_until"] = json!(until);
    }
    if mistake {
        detail["strike_removed"] = true.into();
    }
    audit::write(
        &mut **tx,
        Entry {
            admin_id: review.admin_id,
            sender: Some(sender),
            detail,
            note: review.note,
            ..Entry::new(review.actor, review.action.as_str())
        },
    )
    .await?;
    if let Some(event) = review.action.event() {
        let mut data = json!({"previous_state": state, "state": new_state.as_str()});
        if let Some(term) = term {
            data["banned_until"] = json!(until);
            data["term"] = term.as_str().into();
            // The statement of reasons: the rule the ban confirms, its count and limit.
            data["rule"] = json!(ban.as_ref().map(|b| &b.0));
            data["observed"] = json!(ban.as_ref().map(|b| b.1));
            data["limit"] = json!(ban.as_ref().map(|b| b.2));
        }
        if review.action.lifts() {
            data["reason"] = REVIEWED.into();
        }
        super::announce(tx, sender, event, data).await?;
    }
    Ok(Reviewed {
        state: new_state,
        version,
        invites_changed,
    })
}

/// The `reason` of a `sender.lifted` event a person decided.
const REVIEWED: &str = "reviewed";

/// The rule, count and limit of the sender's latest open flag.
async fn latest_flag(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender: &SenderKey,
) -> Result<Option<(String, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT rule_name, observed, limit_count FROM flags
         WHERE app_id = $1 AND sender_id = $2 AND closed_at IS NULL
         ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_optional(&mut **tx)
    .await
}

/// Moves every held invite of the sender to `status` (`queued` or `discarded`), marked with
/// who decided; answers how many. Released invites go to the queue as they are: they were
/// counted when they came in.
pub(super) async fn discard_or_release(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender: &SenderKey,
    status: &str,
    actor: &str,
    release_after: std::time::Duration,
) -> Result<u64, sqlx::Error> {
    let moved: i64 = sqlx::query_scalar(
        "WITH moved AS (
             UPDATE invites SET status = $2,
                 decision = decision || jsonb_build_object('decided',
                     jsonb_build_object('status', $2, 'by', $4::text, 'at', now()))
             WHERE app_id = $3 AND sender_id = $1 AND status = 'held'
             RETURNING id, created_at),
         queued AS (
             INSERT INTO outbox (invite_id, created_at, next_attempt_at)
             SELECT id, created_at, now() + make_interval(secs => $5) FROM moved
             WHERE $2 = 'queued')
         SELECT count(*) FROM moved",
    )
    .bind(&sender.id)
    .bind(status)
    .bind(sender.app_id)
    .bind(actor)
    .bind(release_after.as_secs_f64())
    .fetch_one(&mut **tx)
    .await?;
    Ok(moved as u64)
}

/// Changes the term of the sender's ban from its start, decided on the sender's page at
/// `seen_version`; audited. Refused for a sender not `banned`.
pub async fn change_term(
    pool: &PgPool,
    sender: &SenderKey,
    seen_version: i64,
    term: Term,
    actor: &str,
    admin_id: Option<i64>,
    note: Option<&str>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ReviewError> {
    let mut tx = pool.begin().await?;
    let (state, _) = lock_at(&mut tx, sender, seen_version).await?;
    if state != SenderState::Banned.as_str() {
        return Err(ReviewError::NotBanned(sender.id.clone()));
    }
    let until = terms::set_term(&mut tx, sender, term).await?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id,
            sender: Some(sender),
            detail: json!({"term": term.as_str(), "banned_until": until}),
            note,
            ..Entry::new(actor, "change_term")
        },
    )
    .await?;
    tx.commit().await?;
    Ok(until)
}

/// Clears the sender's own counters of the rules it tripped. A counter whose subject other
/// senders share (an address, a recipient, a domain, the global count) stays as it is: one
/// sender's lift must not hand the others a fresh allowance (docs/DESIGN.md §3b).
pub(super) async fn clear_counters(
    pool: &PgPool,
    limiter: &Limiter,
    keys: &KeyPrefix,
    rules: &RuleCache,
    sender: &SenderKey,
) -> Result<(), ReviewError> {
    let tripped: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT rule_name FROM flags WHERE app_id = $1 AND sender_id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_all(pool)
    .await?;
    let tripped: BTreeSet<String> = tripped.into_iter().collect();
    let to_clear: Vec<(Rule, LimitKey)> = own_counters(rules, keys, sender)
        .into_iter()
        .filter(|(rule, _)| tripped.contains(&rule.name))
        .collect();
    let pairs: Vec<(&LimitKey, &Quota)> = to_clear.iter().map(|(r, k)| (k, &r.quota)).collect();
    limiter.clear(&pairs).await?;
    Ok(())
}

/// The sender's own counters: each rule that counts per sender, with its key for this sender.
/// A counter other senders share is never one of them.
pub fn own_counters(
    rules: &RuleCache,
    keys: &KeyPrefix,
    sender: &SenderKey,
) -> Vec<(Rule, LimitKey)> {
    let subject = rules::sender_subject(sender);
    (rules.all().into_iter())
        .filter(|rule| !rule.scope.is_shared())
        .map(|rule| {
            let key = keys.key(&subject, &rule.name, &rule.quota);
            (rule, key)
        })
        .collect()
}

/// A reviewer's private note on a sender, kept with the sender and in the audit log.
pub async fn add_note(
    pool: &PgPool,
    sender: &SenderKey,
    author: &str,
    admin_id: Option<i64>,
    body: &str,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO sender_notes (app_id, sender_id, admin_id, author, body)
         VALUES ($5, $1, $2, $3, $4)",
    )
    .bind(&sender.id)
    .bind(admin_id)
    .bind(author)
    .bind(body)
    .bind(sender.app_id)
    .execute(&mut *tx)
    .await?;
    audit::write(
        &mut *tx,
        Entry {
            admin_id,
            sender: Some(sender),
            note: Some(body),
            ..Entry::new(author, "note")
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}
