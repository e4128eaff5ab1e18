//! Redis key names: `{prefix}:{subject}:{rule}:{algorithm}{window_ms}`.
//!
//! The subject sits in a Redis Cluster hash tag, so every key of one subject lives in one slot and
//! one pipeline serves it. The algorithm and window are part of the name: changing either starts
//! fresh counters instead of misreading old ones; changing the limit keeps them.

use std::fmt::Write;

use super::Quota;

/// A key prefix shared by all keys of one deployment (or test, or tenant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Braces would open a second hash tag; they are not allowed in a prefix.
    pub fn new(prefix: &str) -> Result<Self, String> {
        if prefix.is_empty() || prefix.contains(['{', '}']) || prefix.len() > 64 {
            return Err(format!(
                "key prefix `{prefix}` must be 1-64 characters without braces"
            ));
        }
        Ok(KeyPrefix(prefix.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of one rule for one subject, e.g. `sg:{sender:u_1}:sender-hourly:hr3600000`.
    /// `subject` is `scope:value`; the value is escaped so no input can close the hash tag early.
    pub fn key(&self, subject: &str, rule: &str, quota: &Quota) -> LimitKey {
        let mut name = String::with_capacity(self.0.len() + subject.len() + rule.len() + 20);
        name.push_str(&self.0);
        name.push_str(":{");
        for ch in subject.chars() {
            match ch {
                '{' | '}' | '%' => {
                    let _ = write!(name, "%{:02X}", ch as u32);
                }
                _ => name.push(ch),
            }
        }
        let _ = write!(
            name,
            "}}:{rule}:{}{}",
            quota.algorithm.key_code(),
            quota.window_ms
        );
        LimitKey(name)
    }
}

impl Default for KeyPrefix {
    fn default() -> Self {
        KeyPrefix("sg".to_owned())
    }
}

/// A fully built counter key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitKey(String);

impl LimitKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The subject's hash tag: keys with the same tag live in one cluster slot.
    pub fn hash_tag(&self) -> &str {
        let open = self.0.find('{').map_or(0, |n| n + 1);
        let close = self.0[open..].find('}').map_or(self.0.len(), |n| open + n);
        &self.0[open..close]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Algorithm, EdgeMode};

    #[test]
    fn key_carries_the_subject_as_hash_tag() {
        let q = Quota::new(60, 3600, Algorithm::HashCounters(EdgeMode::Harsh));
        let k = KeyPrefix::default().key("sender:u_1", "sender-hourly", &q);
        assert_eq!(k.as_str(), "sg:{sender:u_1}:sender-hourly:hr3600000");
        assert_eq!(k.hash_tag(), "sender:u_1");
    }

    #[test]
    fn braces_in_a_subject_cannot_break_the_tag() {
        let q = Quota::new(5, 60, Algorithm::FixedWindow);
        let k = KeyPrefix::default().key("sender:a}b{%", "r", &q);
        assert_eq!(k.as_str(), "sg:{sender:a%7Db%7B%25}:r:fw60000");
        assert_eq!(k.hash_tag(), "sender:a%7Db%7B%25");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(KeyPrefix::new("a{b").is_err());
        assert!(KeyPrefix::new("").is_err());
        assert!(KeyPrefix::new("test-1").is_ok());
    }
}
