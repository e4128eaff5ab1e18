//! Ban terms and strikes (docs/DESIGN.md §3e): a confirmed ban lasts a term, each confirmed ban
//! is a strike on the sender's record, and the default term follows the sender's strikes of the
//! last [`STRIKE_DAYS`] days along the ladder (`SENDGUARD_BAN_LADDER`).

use std::str::FromStr;

use chrono::{DateTime, SubsecRound, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, Transaction};

use crate::sender_key::SenderKey;

/// Strikes older than this no longer count.
pub const STRIKE_DAYS: i64 = 90;

/// How long a confirmed ban lasts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(parse_err_ty = String, parse_err_fn = unknown_term)]
pub enum Term {
    #[strum(serialize = "1d")]
    Day,
    #[strum(serialize = "7d")]
    Week,
    #[strum(serialize = "30d")]
    Month,
    #[strum(serialize = "permanent")]
    Permanent,
}

fn unknown_term(s: &str) -> String {
    crate::names::unknown::<Term>("ban term", s)
}

impl Term {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// When a ban of this term that starts at `from` ends, to the microsecond as Postgres
    /// keeps it (the webhook says what the database holds); `None` for a permanent one.
    pub fn until(self, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let days = match self {
            Term::Day => 1,
            Term::Week => 7,
            Term::Month => 30,
            Term::Permanent => return None,
        };
        Some((from + chrono::Duration::days(days)).trunc_subsecs(6))
    }

    /// In a reviewer's words.
    pub fn words(self) -> &'static str {
        match self {
            Term::Day => "1 day",
            Term::Week => "7 days",
            Term::Month => "30 days",
            Term::Permanent => "permanent",
        }
    }
}

/// The default terms by strikes: the first confirmed ban takes the first term, the second the
/// second, and every later one the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder(Vec<Term>);

impl Default for Ladder {
    fn default() -> Self {
        Ladder(vec![Term::Week, Term::Month, Term::Permanent])
    }
}

impl FromStr for Ladder {
    type Err = String;

    /// A comma-separated list of terms, e.g. `7d,30d,permanent`.
    fn from_str(s: &str) -> Result<Self, String> {
        let terms = s
            .split(',')
            .map(|t| t.trim().parse::<Term>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("SENDGUARD_BAN_LADDER: {e}"))?;
        Ok(Ladder(terms))
    }
}

impl Ladder {
    /// The term of a ban confirmed on a sender with `strikes` strikes already counting.
    pub fn term_for(&self, strikes: i64) -> Term {
        let step = usize::try_from(strikes).unwrap_or(0);
        self.0
            .get(step)
            .or(self.0.last())
            .copied()
            .unwrap_or(Term::Permanent)
    }

    /// The term the ladder gives the sender's next ban at `now`.
    pub async fn next_term<'e>(
        &self,
        db: impl PgExecutor<'e>,
        sender: &SenderKey,
        now: DateTime<Utc>,
    ) -> Result<Term, sqlx::Error> {
        Ok(self.term_for(counting(db, sender, now).await?))
    }
}

/// The sender's strikes that count at `now`: not removed, and at most [`STRIKE_DAYS`] old.
pub async fn counting<'e>(
    db: impl PgExecutor<'e>,
    sender: &SenderKey,
    now: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM strikes
         WHERE app_id = $1 AND sender_id = $2 AND removed_at IS NULL
             AND at > $3 - make_interval(days => $4) AND at <= $3",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(now)
    .bind(STRIKE_DAYS as i32)
    .fetch_one(db)
    .await
}

/// Writes the strike of a ban confirmed now, with the rules of the sender's open flags (call it
/// before they are closed); answers its id.
pub async fn record(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    term: Term,
    until: Option<DateTime<Utc>>,
    by: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO strikes (app_id, sender_id, rules, term, banned_until, by_actor)
         VALUES ($1, $2, COALESCE((SELECT array_agg(DISTINCT rule_name ORDER BY rule_name)
                 FROM flags WHERE app_id = $1 AND sender_id = $2 AND closed_at IS NULL), '{}'),
             $3, $4, $5)
         RETURNING id",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(term.as_str())
    .bind(until)
    .bind(by)
    .fetch_one(&mut **tx)
    .await
}

/// Removes the strike of the sender's latest ban, still counted: the ban was a mistake, or an
/// appeal against it was granted. Answers whether there was one.
pub async fn remove_latest(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    by: &str,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let removed = sqlx::query(
        "UPDATE strikes SET removed_at = now(), removed_by = $3, removed_reason = $4
         WHERE id = (SELECT id FROM strikes WHERE app_id = $1 AND sender_id = $2
                     ORDER BY id DESC LIMIT 1)
             AND removed_at IS NULL",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(by)
    .bind(reason)
    .execute(&mut **tx)
    .await?;
    Ok(removed.rows_affected() == 1)
}

/// Sets the term of the sender's current ban (and of its strike), from its start.
pub async fn set_term(
    tx: &mut Transaction<'_, Postgres>,
    sender: &SenderKey,
    term: Term,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let until: Option<DateTime<Utc>> = sqlx::query_scalar(
        "UPDATE strikes SET term = $3,
             banned_until = CASE $3 WHEN '1d' THEN at + interval '1 day'
                 WHEN '7d' THEN at + interval '7 days' WHEN '30d' THEN at + interval '30 days'
                 END
         WHERE id = (SELECT id FROM strikes WHERE app_id = $1 AND sender_id = $2
                     ORDER BY id DESC LIMIT 1)
         RETURNING banned_until",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(term.as_str())
    .fetch_optional(&mut **tx)
    .await?
    .flatten();
    sqlx::query(
        "UPDATE senders SET banned_until = $3, version = version + 1
         WHERE app_id = $1 AND id = $2",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .bind(until)
    .execute(&mut **tx)
    .await?;
    Ok(until)
}

/// One strike on a sender's record, as the sender page shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Strike {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub rules: Vec<String>,
    pub term: String,
    pub banned_until: Option<DateTime<Utc>>,
    pub by_actor: String,
    pub removed_at: Option<DateTime<Utc>>,
    pub removed_by: Option<String>,
    pub removed_reason: Option<String>,
}

/// The sender's strikes, newest first (the record is short: one row per confirmed ban).
pub async fn of_sender(pool: &PgPool, sender: &SenderKey) -> Result<Vec<Strike>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, at, rules, term, banned_until, by_actor, removed_at, removed_by,
             removed_reason
         FROM strikes WHERE app_id = $1 AND sender_id = $2 ORDER BY at DESC, id DESC LIMIT 100",
    )
    .bind(sender.app_id)
    .bind(&sender.id)
    .fetch_all(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_steps_up_and_stays_on_its_last_term() {
        let ladder: Ladder = "7d,30d,permanent".parse().expect("ladder");
        assert_eq!(ladder, Ladder::default());
        let terms: Vec<Term> = (0..5).map(|n| ladder.term_for(n)).collect();
        assert_eq!(
            terms,
            [
                Term::Week,
                Term::Month,
                Term::Permanent,
                Term::Permanent,
                Term::Permanent
            ]
        );
        let short: Ladder = " 1d ".parse().expect("one term");
        assert_eq!(short.term_for(3), Term::Day);
        let bad = "7d,forever".parse::<Ladder>().expect_err("unknown term");
        assert!(
            bad.contains("forever") && bad.contains("permanent"),
            "{bad}"
        );
    }

    #[test]
    fn a_term_ends_after_its_days_and_a_permanent_one_never() {
        let from = Utc::now();
        assert_eq!(
            Term::Day.until(from),
            Some((from + chrono::Duration::days(1)).trunc_subsecs(6))
        );
        assert_eq!(Term::Permanent.until(from), None);
    }
}
