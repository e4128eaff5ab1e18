//! How the pages write times, windows, reasons and links.

use crate::moderation::review::ReviewAction;

pub type Time = chrono::DateTime<chrono::Utc>;

/// Rows per page of every list.
pub const PAGE: i64 = 25;

/// The last page number a list shows: far beyond any real list, small enough that no offset
/// computed from it can overflow.
const LAST_PAGE: i64 = 100_000;

/// The page number asked for, from 1 to [`LAST_PAGE`].
pub fn page_number(asked: Option<i64>) -> i64 {
    asked.unwrap_or(1).clamp(1, LAST_PAGE)
}

/// What a page says after a change, chosen by a code in its link: never text from the link
/// itself, which anyone can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Bulk confirmation: how many were confirmed, how many had changed meanwhile.
    Confirmed {
        confirmed: u32,
        changed: u32,
    },
    /// A review decision and how many held invites it changed.
    Reviewed {
        action: ReviewAction,
        invites: u32,
    },
    /// A rule saved.
    RuleSaved,
    /// One held invite released or discarded (or, `changed` false, no longer held).
    InviteDecided {
        changed: bool,
    },
    NoteAdded,
    /// A recipient taken off an app's suppression list (or, `removed` false, not on it).
    Unsuppressed {
        removed: bool,
    },
    /// Released invites held again before they left (none: all had left).
    ReleaseUndone {
        invites: u32,
    },
    /// A ban's term changed.
    TermChanged,
    /// An appeal granted (`granted`) or denied.
    AppealDecided {
        granted: bool,
    },
    KeyRevoked,
    AdminAdded,
    AdminDisabled,
}

/// The query of a list page: its page number, and a notice to show (`done` names it, `n` and
/// `m` are its counts).
#[derive(Debug, Default, serde::Deserialize)]
pub struct PageQuery {
    pub page: Option<i64>,
    done: Option<String>,
    n: Option<u32>,
    m: Option<u32>,
}

impl Notice {
    pub fn from_query(q: &PageQuery) -> Option<Notice> {
        let n = q.n.unwrap_or(0);
        let notice = match q.done.as_deref()? {
            "confirmed" => Notice::Confirmed {
                confirmed: n,
                changed: q.m.unwrap_or(0),
            },
            "rule_saved" => Notice::RuleSaved,
            "invite_decided" => Notice::InviteDecided { changed: n > 0 },
            "note_added" => Notice::NoteAdded,
            "unsuppressed" => Notice::Unsuppressed { removed: n > 0 },
            "release_undone" => Notice::ReleaseUndone { invites: n },
            "term_changed" => Notice::TermChanged,
            "appeal_decided" => Notice::AppealDecided { granted: n > 0 },
            "key_revoked" => Notice::KeyRevoked,
            "admin_added" => Notice::AdminAdded,
            "admin_disabled" => Notice::AdminDisabled,
            action => Notice::Reviewed {
                action: action.parse().ok()?,
                invites: n,
            },
        };
        Some(notice)
    }

    /// The query that shows this notice.
    pub fn query(self) -> String {
        match self {
            Notice::Confirmed { confirmed, changed } => {
                format!("done=confirmed&n={confirmed}&m={changed}")
            }
            Notice::Reviewed { action, invites } => format!("done={}&n={invites}", action.as_str()),
            Notice::RuleSaved => "done=rule_saved".into(),
            Notice::InviteDecided { changed } => {
                format!("done=invite_decided&n={}", u8::from(changed))
            }
            Notice::NoteAdded => "done=note_added".into(),
            Notice::Unsuppressed { removed } => {
                format!("done=unsuppressed&n={}", u8::from(removed))
            }
            Notice::ReleaseUndone { invites } => format!("done=release_undone&n={invites}"),
            Notice::TermChanged => "done=term_changed".into(),
            Notice::AppealDecided { granted } => {
                format!("done=appeal_decided&n={}", u8::from(granted))
            }
            Notice::KeyRevoked => "done=key_revoked".into(),
            Notice::AdminAdded => "done=admin_added".into(),
            Notice::AdminDisabled => "done=admin_disabled".into(),
        }
    }

    pub fn text(self) -> String {
        match self {
            Notice::Confirmed { confirmed, changed } => {
                let mut text = format!("Confirmed {confirmed} ban(s).");
                if changed > 0 {
                    text.push_str(&format!(
                        " {changed} sender(s) changed since the page was loaded and were left alone."
                    ));
                }
                text
            }
            Notice::Reviewed {
                action: ReviewAction::Dismiss,
                ..
            } => "Dismissed: the sender stays as it is.".into(),
            Notice::Reviewed { action, invites } => format!(
                "Done: {} ({invites} held invite(s) changed). {}",
                action.as_str().replace('_', " "),
                action.afterwards()
            )
            .trim_end()
            .to_owned(),
            Notice::RuleSaved => "Saved; every instance applies the rule within a second.".into(),
            Notice::InviteDecided { changed: true } => "Done: the invite was decided.".into(),
            Notice::InviteDecided { changed: false } => {
                "That invite was no longer held; nothing changed.".into()
            }
            Notice::NoteAdded => "Note added.".into(),
            Notice::Unsuppressed { removed: true } => {
                "Removed: the app may invite this recipient again.".into()
            }
            Notice::Unsuppressed { removed: false } => {
                "That recipient was not on the list; nothing changed.".into()
            }
            Notice::ReleaseUndone { invites: 0 } => {
                "Nothing to undo: the released invites had already left.".into()
            }
            Notice::ReleaseUndone { invites } => format!(
                "Undone: {invites} released invite(s) are held again; none of them was sent."
            ),
            Notice::TermChanged => {
                "The ban's term changed: it now ends as shown, counted from its start.".into()
            }
            Notice::AppealDecided { granted: true } => {
                "Appeal granted: the ban is lifted, its strike removed, and the app told.".into()
            }
            Notice::AppealDecided { granted: false } => {
                "Appeal denied: the ban and its term stand, and the app was told.".into()
            }
            Notice::KeyRevoked => {
                "Revoked: requests with that key are refused on every instance within a second."
                    .into()
            }
            Notice::AdminAdded => {
                "Added. Give them the password over a channel you trust; they log in at \
                 /admin/login."
                    .into()
            }
            Notice::AdminDisabled => "Disabled: their sessions have ended.".into(),
        }
    }
}

pub fn time(t: Option<Time>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "—".into())
}

/// A piece of a sender's text, marked when it is a link.
pub struct Segment {
    pub text: String,
    pub link: bool,
}

/// `text` cut into pieces at the links found in it, so the page can mark them (the pieces are
/// escaped like any text).
pub fn marked(text: &str) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut at = 0;
    for link in crate::signals::links::find_read(text) {
        if link.start > at {
            segments.push(Segment {
                text: text[at..link.start].to_owned(),
                link: false,
            });
        }
        segments.push(Segment {
            text: text[link.start..link.end].to_owned(),
            link: true,
        });
        at = link.end;
    }
    if at < text.len() {
        segments.push(Segment {
            text: text[at..].to_owned(),
            link: false,
        });
    }
    segments
}

/// How long a sender has existed, in its largest whole unit.
pub fn age(since: Time) -> String {
    let days = (chrono::Utc::now() - since).num_days();
    match days {
        0 => "under a day".into(),
        1 => "1 day".into(),
        d => format!("{d} days"),
    }
}

/// How long something has waited, `secs` seconds, in a reviewer's words.
pub fn wait(secs: i64) -> String {
    let minutes = secs.max(0) / 60;
    match (minutes / (24 * 60), minutes / 60 % 24, minutes % 60) {
        (0, 0, m) => format!("{m} min"),
        (0, h, m) => format!("{h} h {m} min"),
        (1, h, _) => format!("1 day {h} h"),
        (d, h, _) => format!("{d} days {h} h"),
    }
}

/// Accepted invites against delivered ones, as a share.
pub fn acceptance(accepted: i64, sent: i64) -> String {
    if sent == 0 {
        return if accepted == 0 {
            "nothing delivered yet".into()
        } else {
            format!("{accepted} accepted")
        };
    }
    format!(
        "{accepted} of {sent} ({}%)",
        (accepted * 100 / sent).min(100)
    )
}

/// "1 bounce", "3 bounces": `noun` with an `s` unless there is one.
pub fn counted(n: i64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A sender's outcomes of the last day, as the reviewer reads them.
pub fn outcomes(bounces: i64, complaints: i64) -> String {
    format!(
        "{}, {}",
        counted(bounces, "bounce"),
        counted(complaints, "complaint")
    )
}

/// A rule's window for reading: `1 d`, `90 min`.
pub fn window(secs: i64) -> String {
    match crate::rules::edit::window_unit(secs) {
        (count, "m") => format!("{count} min"),
        (count, unit) => format!("{count} {unit}"),
    }
}

/// Why an invite got its status, in one line, from its decision record.
pub fn why(decision: &serde_json::Value) -> String {
    let exceeded: Vec<String> = decision["rules"]
        .as_array()
        .map(|rules| rules.iter().filter_map(exceeded_rule).collect())
        .unwrap_or_default();
    if decision["suppressed"] == "unsubscribed" {
        return "the recipient unsubscribed from this app".into();
    }
    // A held invite a reviewer decided: that decision is why it has its status now.
    if let Some(by) = decision["decided"]["by"].as_str() {
        let what = match decision["decided"]["status"].as_str() {
            Some("queued") => "released",
            _ => "discarded",
        };
        let at = decision["decided"]["at"]
            .as_str()
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .map(|at| time(Some(at.with_timezone(&chrono::Utc))))
            .unwrap_or_default();
        return format!("held, then {what} by {by} {at}")
            .trim_end()
            .to_owned();
    }
    match decision["reason"].as_str() {
        Some("trusted") => "trusted sender".into(),
        Some(reason) if reason.starts_with("sender_") => {
            format!(
                "sender was {}",
                reason.trim_start_matches("sender_").replace('_', "-")
            )
        }
        _ if exceeded.is_empty() => String::new(),
        _ => format!("exceeded {}", exceeded.join(", ")),
    }
}

/// `rule count/limit` of a rule of a decision record that was exceeded. A rule is the array
/// `[rule, count, limit, window_secs, outcome]`; records written before 2026-11-26 name each
/// field (`{"rule": …, "count": …}`) and are read until retention drops their week.
fn exceeded_rule(rule: &serde_json::Value) -> Option<String> {
    let (name, count, limit, outcome) = match rule {
        // Indexing the value, not the array: a short one reads as nulls.
        serde_json::Value::Array(_) => (&rule[0], &rule[1], &rule[2], &rule[4]),
        named => (
            &named["rule"],
            &named["count"],
            &named["limit"],
            &named["outcome"],
        ),
    };
    (outcome == "exceeded").then(|| format!("{} {count}/{limit}", name.as_str().unwrap_or("?")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn counts_read_as_words() {
        assert_eq!(outcomes(1, 0), "1 bounce, 0 complaints");
        assert_eq!(counted(2, "domain"), "2 domains");
        assert_eq!(acceptance(0, 0), "nothing delivered yet");
        assert_eq!(acceptance(3, 4), "3 of 4 (75%)");
    }

    #[test]
    fn notices_come_from_codes_only() {
        let q = |done: &str| PageQuery {
            page: None,
            done: Some(done.into()),
            n: Some(2),
            m: Some(1),
        };
        for notice in [
            Notice::Confirmed {
                confirmed: 2,
                changed: 1,
            },
            Notice::Reviewed {
                action: ReviewAction::LiftAndRelease,
                invites: 2,
            },
            Notice::RuleSaved,
            Notice::Unsuppressed { removed: true },
        ] {
            let query: String = notice.query();
            let done = query
                .trim_start_matches("done=")
                .split('&')
                .next()
                .expect("code");
            assert_eq!(Notice::from_query(&q(done)), Some(notice), "{query}");
        }
        assert_eq!(Notice::from_query(&q("Call 555-0100 now")), None);
        assert_eq!(page_number(Some(i64::MAX)), LAST_PAGE);
        assert_eq!(page_number(Some(-5)), 1);
    }

    #[test]
    fn links_are_cut_out_for_marking() {
        let parts = marked("Claim at scam[.]com now");
        let texts: Vec<(&str, bool)> = parts.iter().map(|s| (s.text.as_str(), s.link)).collect();
        assert_eq!(
            texts,
            [("Claim at ", false), ("scam[.]com", true), (" now", false)]
        );
        assert_eq!(marked("no links here").len(), 1);
        // A link broken by a character that draws nothing is marked whole, as it reads.
        let parts = marked("Claim at scam.\u{200b}com now");
        assert!(
            parts.iter().any(|s| s.link && s.text == "scam.\u{200b}com"),
            "{:?}",
            parts.iter().map(|s| (&s.text, s.link)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn windows_read_in_their_largest_whole_unit() {
        assert_eq!(window(86_400 * 2), "2 d");
        assert_eq!(window(3600), "1 h");
        assert_eq!(window(900), "15 min");
        assert_eq!(window(61), "61 s");
    }

    #[test]
    fn why_names_the_exceeded_rules_or_the_state() {
        let held = json!({"reason": "rules", "rules": [
            ["sender-hourly", 61, 60, 3600, "exceeded"],
            ["ip-hourly", 2, 300, 3600, "ok"],
            ["recipient-daily", 4, 3, 86400, "exceeded"]]});
        assert_eq!(
            why(&held),
            "exceeded sender-hourly 61/60, recipient-daily 4/3"
        );
        let named = json!({"reason": "rules", "rules": [
            {"rule": "sender-hourly", "count": 61, "limit": 60, "outcome": "exceeded"},
            {"rule": "ip-hourly", "count": 2, "limit": 300, "outcome": "ok"}]});
        assert_eq!(why(&named), "exceeded sender-hourly 61/60");
        assert_eq!(
            why(&json!({"reason": "sender_shadow_banned"})),
            "sender was shadow-banned"
        );
        assert_eq!(why(&json!({"reason": "trusted"})), "trusted sender");
        assert_eq!(why(&json!({"reason": "rules", "rules": []})), "");
    }
}
