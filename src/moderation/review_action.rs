//! The decisions a reviewer can take on a sender: what each does to the sender's state and its
//! held invites, where it applies, and how the dashboard names it.

use super::SenderState;
use crate::webhooks::EventType;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "snake_case", parse_err_ty = String, parse_err_fn = unknown_action)]
pub enum ReviewAction {
    /// The ban stands: held invites are discarded, the sender is `banned`.
    ConfirmBan,
    /// A legitimate sender: held invites go back to the queue and are sent.
    LiftAndRelease,
    /// Lift the ban but throw the held invites away.
    LiftAndDiscard,
    /// Allow-list: rules no longer apply.
    MarkTrusted,
    /// Hold this sender's invites from now on, pending review.
    ShadowBan,
    /// Ban by hand, for a term, without a flag to confirm (a user reported by other means):
    /// held invites are discarded, the sender is `banned`.
    Ban,
    /// Send the held invites; the sender's state stays (invites held by a `hold` rule).
    ReleaseHeld,
    /// Throw the held invites away; the sender's state stays.
    DiscardHeld,
    /// Nothing to do: the sender stays as it is, its held invites too, and it leaves the queue
    /// it was in for a flag with nothing held (bounces or complaints over a `hold` rule).
    Dismiss,
}

impl ReviewAction {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The sender's state after the decision; `None` keeps it.
    pub(super) fn new_state(self) -> Option<SenderState> {
        match self {
            ReviewAction::ConfirmBan | ReviewAction::Ban => Some(SenderState::Banned),
            ReviewAction::LiftAndRelease | ReviewAction::LiftAndDiscard => {
                Some(SenderState::Active)
            }
            ReviewAction::MarkTrusted => Some(SenderState::Trusted),
            ReviewAction::ShadowBan => Some(SenderState::ShadowBanned),
            ReviewAction::ReleaseHeld | ReviewAction::DiscardHeld | ReviewAction::Dismiss => None,
        }
    }

    /// What happens to the held invites.
    pub(super) fn held_become(self) -> Option<&'static str> {
        match self {
            ReviewAction::ConfirmBan
            | ReviewAction::Ban
            | ReviewAction::LiftAndDiscard
            | ReviewAction::DiscardHeld => Some("discarded"),
            ReviewAction::LiftAndRelease
            | ReviewAction::MarkTrusted
            | ReviewAction::ReleaseHeld => Some("queued"),
            ReviewAction::ShadowBan | ReviewAction::Dismiss => None,
        }
    }

    pub(super) fn lifts(self) -> bool {
        matches!(
            self,
            ReviewAction::LiftAndRelease | ReviewAction::LiftAndDiscard
        )
    }

    pub(super) fn bans(self) -> bool {
        matches!(
            self,
            ReviewAction::ConfirmBan | ReviewAction::Ban | ReviewAction::ShadowBan
        )
    }

    /// Whether the decision confirms a ban: it takes a term and is a strike.
    pub fn confirms(self) -> bool {
        matches!(self, ReviewAction::ConfirmBan | ReviewAction::Ban)
    }

    /// What the sender's app hears through its webhook.
    pub(super) fn event(self) -> Option<EventType> {
        match self {
            ReviewAction::ConfirmBan | ReviewAction::Ban => Some(EventType::SenderBanned),
            ReviewAction::LiftAndRelease | ReviewAction::LiftAndDiscard => {
                Some(EventType::SenderLifted)
            }
            ReviewAction::MarkTrusted => Some(EventType::SenderTrusted),
            ReviewAction::ShadowBan => Some(EventType::SenderShadowBanned),
            ReviewAction::ReleaseHeld | ReviewAction::DiscardHeld | ReviewAction::Dismiss => None,
        }
    }
}

impl ReviewAction {
    /// Whether the decision means anything for a sender in `state` with `held` invites held,
    /// awaiting review for a flag or not: the dashboard offers only these, and refuses the
    /// others.
    pub fn applies_to(self, state: SenderState, held: i64, review_requested: bool) -> bool {
        match self {
            ReviewAction::ConfirmBan => state == SenderState::ShadowBanned,
            // A lift with nothing held is offered once, as the discarding one.
            ReviewAction::LiftAndRelease => state.holds_invites() && held > 0,
            ReviewAction::LiftAndDiscard => state.holds_invites(),
            ReviewAction::MarkTrusted => state != SenderState::Trusted,
            ReviewAction::ShadowBan => !state.holds_invites(),
            ReviewAction::Ban => !state.holds_invites(),
            ReviewAction::ReleaseHeld | ReviewAction::DiscardHeld => {
                !state.holds_invites() && held > 0
            }
            // Nothing to dismiss unless the sender waits in the queue for a flag.
            ReviewAction::Dismiss => state == SenderState::Active && held == 0 && review_requested,
        }
    }

    /// Whether the decision sends mail or throws invites away for good, so a reviewer confirms
    /// it before it is applied.
    pub fn needs_confirming(self, held: i64) -> bool {
        held > 0 && self.held_become().is_some()
    }

    /// What the decision does, in the words of the button that takes it, `held` invites held.
    pub fn label(self, held: i64) -> String {
        let invites = if held == 1 { "invite" } else { "invites" };
        match self {
            ReviewAction::ConfirmBan if held > 0 => {
                format!("Confirm ban and discard {held} held {invites}")
            }
            ReviewAction::ConfirmBan => "Confirm ban".into(),
            ReviewAction::LiftAndRelease => {
                format!("Lift ban and release {held} held {invites}")
            }
            ReviewAction::LiftAndDiscard if held > 0 => {
                format!("Lift ban and discard {held} held {invites}")
            }
            ReviewAction::LiftAndDiscard => "Lift ban".into(),
            ReviewAction::MarkTrusted if held > 0 => {
                format!("Mark trusted and release {held} held {invites}")
            }
            ReviewAction::MarkTrusted => "Mark trusted".into(),
            ReviewAction::ShadowBan => "Shadow-ban".into(),
            ReviewAction::Ban if held > 0 => format!("Ban and discard {held} held {invites}"),
            ReviewAction::Ban => "Ban".into(),
            ReviewAction::ReleaseHeld => format!("Release {held} held {invites}"),
            ReviewAction::DiscardHeld => format!("Discard {held} held {invites}"),
            ReviewAction::Dismiss => "Dismiss: nothing to do".into(),
        }
    }

    /// Once taken: what can still be undone, and how.
    pub fn afterwards(self) -> &'static str {
        match self {
            ReviewAction::ConfirmBan | ReviewAction::Ban => {
                "The ban ends with its term; it can be lifted, or its term changed, from this \
                 page. Discarded invites cannot be restored."
            }
            ReviewAction::ShadowBan => {
                "Lift the ban from this page to undo it; what it holds meanwhile can be released."
            }
            ReviewAction::LiftAndRelease
            | ReviewAction::ReleaseHeld
            | ReviewAction::MarkTrusted => {
                "Released invites are on their way and cannot be recalled; the sender can be \
                 shadow-banned again from this page."
            }
            ReviewAction::LiftAndDiscard | ReviewAction::DiscardHeld => {
                "Discarded invites cannot be restored."
            }
            ReviewAction::Dismiss => "",
        }
    }

    /// Whether the decision sends held invites to their recipients.
    pub fn releases(self) -> bool {
        self.held_become() == Some("queued")
    }

    /// What confirming the decision sets in motion, and what can still be undone after it.
    pub fn consequence(self) -> &'static str {
        match self.held_become() {
            Some("queued") => {
                "The held invites go back to the queue and are emailed to their recipients \
                 within seconds. Once sent they cannot be recalled."
            }
            Some(_) => {
                "The held invites are discarded: they will never be sent, and this cannot be \
                 undone."
            }
            None => "No invite is sent or discarded.",
        }
    }
}

fn unknown_action(s: &str) -> String {
    crate::names::unknown::<ReviewAction>("review action", s)
}
