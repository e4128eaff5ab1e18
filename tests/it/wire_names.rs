//! The names of the enums that are stored, typed in rules files and forms, and sent to apps:
//! derived from the variants, and pinned here so that renaming a variant renames none of them.

use std::str::FromStr;

use sendguard::admin::accounts::Role;
use sendguard::moderation::SenderState;
use sendguard::moderation::review::ReviewAction;
use sendguard::moderation::terms::Term;
use sendguard::outcomes::OutcomeType;
use sendguard::rules::{Action, Scope, Signal};

/// The names are stored, typed in rules files and forms, and sent to apps: a renamed
/// variant must not rename them.
fn names<T: FromStr<Err = String> + Copy + PartialEq + std::fmt::Debug>(
    variants: &[T],
    name: fn(T) -> &'static str,
    expected: &[&str],
    what: &str,
) {
    let names: Vec<&str> = variants.iter().map(|v| name(*v)).collect();
    assert_eq!(names, expected);
    for v in variants {
        assert_eq!(name(*v).parse::<T>(), Ok(*v));
    }
    assert_eq!(
        T::from_str("Nope"),
        Err(format!(
            "unknown {what} `Nope`; one of {}",
            expected.join(", ")
        ))
    );
}

#[test]
fn every_name_is_as_it_was() {
    use strum::VariantArray;
    names(
        Scope::VARIANTS,
        Scope::as_str,
        &[
            "sender",
            "ip",
            "recipient",
            "recipient_domain",
            "global",
            "fingerprint",
            "link_domain",
        ],
        "scope",
    );
    names(
        Signal::VARIANTS,
        Signal::as_str,
        &[
            "invites",
            "distinct_recipients",
            "distinct_domains",
            "links",
            "bounces",
            "complaints",
            "distinct_senders",
        ],
        "signal",
    );
    names(
        Action::VARIANTS,
        Action::as_str,
        &["monitor", "suppress", "hold", "reject", "shadow_ban"],
        "action",
    );
    assert_eq!(Action::ShadowBan.to_string(), "shadow_ban");
    names(
        OutcomeType::VARIANTS,
        OutcomeType::as_str,
        &["bounce", "complaint", "accepted"],
        "outcome type",
    );
    names(
        &[Role::Admin, Role::Moderator],
        Role::as_str,
        &["admin", "moderator"],
        "role",
    );
    names(
        &[
            SenderState::Active,
            SenderState::ShadowBanned,
            SenderState::Banned,
            SenderState::Trusted,
        ],
        SenderState::as_str,
        &["active", "shadow_banned", "banned", "trusted"],
        "sender state",
    );
    names(
        &[
            ReviewAction::ConfirmBan,
            ReviewAction::LiftAndRelease,
            ReviewAction::LiftAndDiscard,
            ReviewAction::MarkTrusted,
            ReviewAction::ShadowBan,
            ReviewAction::Ban,
            ReviewAction::ReleaseHeld,
            ReviewAction::DiscardHeld,
            ReviewAction::Dismiss,
        ],
        ReviewAction::as_str,
        &[
            "confirm_ban",
            "lift_and_release",
            "lift_and_discard",
            "mark_trusted",
            "shadow_ban",
            "ban",
            "release_held",
            "discard_held",
            "dismiss",
        ],
        "review action",
    );
    names(
        Term::VARIANTS,
        Term::as_str,
        &["1d", "7d", "30d", "permanent"],
        "ban term",
    );
}
