//! Who a sender is: the account `id` the calling app names, within that app. Two apps' `u_123`
//! are two senders (docs/DESIGN.md §2); every row, key, cache entry and page names both.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderKey {
    pub app_id: i64,
    /// The app's own id for the account (`sender_id` in the API).
    pub id: String,
}

impl SenderKey {
    pub fn new(app_id: i64, id: impl Into<String>) -> Self {
        SenderKey {
            app_id,
            id: id.into(),
        }
    }

    /// The form the change notifications carry: `app_id:id` (an app id has no colon, so the
    /// first one splits).
    pub fn parse_notification(payload: &str) -> Option<SenderKey> {
        let (app, id) = payload.split_once(':')?;
        Some(SenderKey::new(app.parse().ok()?, id))
    }
}

impl fmt::Display for SenderKey {
    /// `app_id:id`, as in Redis keys and notifications.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.app_id, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_splits_at_the_first_colon() {
        let key = SenderKey::new(7, "team:u:1");
        assert_eq!(SenderKey::parse_notification(&key.to_string()), Some(key));
        assert_eq!(SenderKey::parse_notification("x:u"), None);
        assert_eq!(SenderKey::parse_notification("u"), None);
    }
}
