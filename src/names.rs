//! Enums spelled by one fixed name per variant (scopes, actions, states) derive their names
//! with strum; what they share is the error for a name that no variant has.

pub(crate) fn unknown<T>(what: &str, name: &str) -> String
where
    T: strum::VariantArray + Copy + Into<&'static str>,
{
    let known: Vec<&'static str> = T::VARIANTS.iter().map(|v| (*v).into()).collect();
    format!("unknown {what} `{name}`; one of {}", known.join(", "))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use crate::admin::accounts::Role;
    use crate::moderation::SenderState;
    use crate::moderation::review::ReviewAction;
    use crate::outcomes::OutcomeType;
    use crate::rules::{Action, Scope, Signal};

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
            &["sender", "ip", "recipient", "recipient_domain", "global"],
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
                "release_held",
                "discard_held",
                "dismiss",
            ],
            "review action",
        );
    }
}
