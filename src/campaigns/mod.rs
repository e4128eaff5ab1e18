//! Campaigns: many accounts, one payload (docs/DESIGN.md §3d). The rules count senders per
//! text and per linked domain: here is what an invite's text counts under (its fingerprint
//! group, its link domains), what never counts (standard texts, benign marks), and the
//! campaigns themselves: detection, the sweep of their queued invites, and their reads.

pub mod bench;
pub mod fingerprint;
pub mod groups;
pub mod known;
pub mod link_domains;
pub mod store;

use groups::Groups;
use known::KnownTexts;

use crate::limiter::LimiterError;

/// The subject kind of a text's fingerprint group (`fingerprint:<group>`).
pub const FINGERPRINT: &str = "fingerprint";
/// The subject kind of a linked domain (`link_domain:<domain>`).
pub const LINK_DOMAIN: &str = "link_domain";

/// The notification channel of a campaign marked benign or unmarked: every instance reloads
/// what never counts ([`known`]).
pub const CHANGED: &str = "sendguard_campaigns";

/// The bucket of a campaign subject in the outbox's index (migration 0022): the first two
/// bytes of its SHA-256, one of 65,536. The index holds buckets, not subjects, because a GIN
/// index never drops a key and nearly every text is a subject of its own; the sweep checks the
/// subjects of the few invites of a bucket. The migration's `sendguard_campaign_bucket` gives
/// the same number in SQL.
pub fn bucket(subject: &str) -> i32 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(subject.as_bytes());
    i32::from(u16::from_be_bytes([digest[0], digest[1]]))
}

/// What the enabled rules count of a text's payload.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wanted {
    /// The longest window of a fingerprint rule, if any is enabled.
    pub fingerprint_window_secs: Option<u64>,
    /// A link-domain rule is enabled.
    pub link_domains: bool,
}

impl Wanted {
    pub fn any(&self) -> bool {
        self.fingerprint_window_secs.is_some() || self.link_domains
    }
}

/// The texts of an invite the payload is read from.
#[derive(Debug, Clone, Copy)]
pub struct Texts<'a> {
    pub message: Option<&'a str>,
    pub sender_name: Option<&'a str>,
    pub resource: Option<&'a str>,
}

#[derive(Clone)]
pub struct Campaigns {
    pub groups: Groups,
    pub known: KnownTexts,
}

/// An invite's campaign subjects, its text's group perhaps still to be looked up.
#[derive(Debug, Default)]
pub struct Subjects {
    pub keys: Vec<String>,
    /// The look-up of its text's group, to ride in the rules' call ([`Groups::fold`]): the
    /// first of `keys` names the group by the look-up's fresh id until the call answers.
    pub pending: Option<crate::limiter::GroupLookup>,
}

impl Subjects {
    /// The group's id as the rules' call answered it, in place of the fresh one.
    pub fn resolve(&mut self, group: &str) {
        if self.pending.take().is_some()
            && let Some(first) = self.keys.first_mut()
        {
            *first = format!("{FINGERPRINT}:{group}");
        }
    }
}

impl Campaigns {
    /// The campaign subjects of an invite of app `app_id`: its text's fingerprint group (none
    /// for a text too short, an app's standard text or one marked benign) and each domain it
    /// links to (not the app's own, not one marked benign), as far as the rules want them.
    /// On a single Redis server the group is left to the rules' call ([`Subjects::pending`]).
    pub async fn subjects(
        &self,
        app_id: i64,
        texts: Texts<'_>,
        wanted: Wanted,
    ) -> Result<Subjects, LimiterError> {
        let known = self.known.get();
        let mut out = Subjects::default();
        if let Some(window) = wanted.fingerprint_window_secs
            && let Some(f) = fingerprint::of_invite(texts.message, texts.sender_name)
            && !known.is_known_text(app_id, &f.signature)
        {
            let group = if self.groups.folds() {
                let lookup = self.groups.fold(&f.signature, window);
                let fresh = crate::limiter::group_id(lookup.fresh);
                out.pending = Some(lookup);
                fresh
            } else {
                self.groups.group_of(&f.signature, window).await?
            };
            out.keys.push(format!("{FINGERPRINT}:{group}"));
        }
        if wanted.link_domains {
            let hosts = known
                .apps
                .get(&app_id)
                .map_or(&[][..], |app| app.link_hosts.as_slice());
            let found = link_domains::link_domains(
                [texts.message, texts.sender_name, texts.resource],
                hosts,
            );
            out.keys.extend(
                found
                    .into_iter()
                    .filter(|d| !known.benign_domains.contains(d))
                    .map(|d| format!("{LINK_DOMAIN}:{d}")),
            );
        }
        Ok(out)
    }
}
