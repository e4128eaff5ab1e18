//! Redis key names: `{prefix}:{subject}:{code}`, the code a hash of the rule's name, algorithm
//! family and window.
//!
//! The subject sits in a Redis Cluster hash tag, so every key of one subject lives in one slot and
//! one pipeline serves it. The algorithm and window are part of the code: changing either starts
//! fresh counters instead of misreading old ones; changing the limit keeps them. The code is
//! short because the name is a large part of a small key's bytes (docs/LIMITER.md).

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

    /// The key of one rule for one subject, e.g. `sg:{sender:u_1}:7M60W7`.
    /// `subject` is `scope:value`; the value is escaped so no input can close the hash tag early.
    pub fn key(&self, subject: &str, rule: &str, quota: &Quota) -> LimitKey {
        let mut name = String::with_capacity(self.0.len() + subject.len() + 4 + CODE_LEN);
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
        name.push_str("}:");
        push_rule_code(&mut name, rule, quota);
        LimitKey(name)
    }
}

/// Base-62 digits of a rule's code.
const CODE_LEN: usize = 6;

/// A rule's code in its keys: FNV-1a (64 bits) of its name, algorithm family and window, as six
/// base-62 digits (35.7 bits). Two rules of one scope would share keys if their codes collided
/// (about one deployment in 10^8 with 30 rules), which saving a rule refuses. Every instance and
/// every version must compute the same code, or counters start afresh: the tests pin it.
pub fn rule_code(rule: &str, quota: &Quota) -> String {
    let mut code = String::with_capacity(CODE_LEN);
    push_rule_code(&mut code, rule, quota);
    code
}

/// Appends [`rule_code`] to `out` without allocating: every invite builds a key per rule.
fn push_rule_code(out: &mut String, rule: &str, quota: &Quota) {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut hash = Fnv1a(0xcbf2_9ce4_8422_2325);
    // NUL separates the parts: no rule name holds one, so no two triples hash the same bytes.
    hash.add(rule.as_bytes());
    hash.add(b"\0");
    hash.add(quota.algorithm.key_code().as_bytes());
    hash.add(b"\0");
    let _ = write!(hash, "{}", quota.window_ms);
    let mut hash = hash.0;
    for _ in 0..CODE_LEN {
        out.push(char::from(DIGITS[(hash % 62) as usize]));
        hash /= 62;
    }
}

/// FNV-1a, 64 bits; `write!` feeds it a number's digits without a string.
struct Fnv1a(u64);

impl Fnv1a {
    fn add(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

impl Write for Fnv1a {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.add(s.as_bytes());
        Ok(())
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
        assert_eq!(k.as_str(), "sg:{sender:u_1}:7M60W7");
        assert_eq!(k.hash_tag(), "sender:u_1");
    }

    #[test]
    fn braces_in_a_subject_cannot_break_the_tag() {
        let q = Quota::new(5, 60, Algorithm::FixedWindow);
        let k = KeyPrefix::default().key("sender:a}b{%", "r", &q);
        assert_eq!(k.as_str(), "sg:{sender:a%7Db%7B%25}:G5kuq4");
        assert_eq!(k.hash_tag(), "sender:a%7Db%7B%25");
    }

    /// The codes of deployed keys, computed apart from this code (FNV-1a over `name`, NUL, the
    /// algorithm family's letters, NUL, the window in ms): a change would start every counter
    /// of every deployment afresh on upgrade.
    #[test]
    fn rule_codes_stay_what_deployments_have_in_redis() {
        let hourly = Algorithm::HashCounters(EdgeMode::Harsh);
        let cases = [
            ("sender-daily", Quota::new(500, 86_400, hourly), "gZE2A4"),
            ("ip-hourly", Quota::new(300, 3600, hourly), "f7QbBO"),
            (
                "sender-distinct-recipients-daily",
                Quota::new(100, 86_400, Algorithm::Distinct),
                "7hTyPW",
            ),
        ];
        for (rule, quota, code) in cases {
            assert_eq!(rule_code(rule, &quota), code, "{rule}");
        }
    }

    #[test]
    fn the_code_changes_with_the_window_and_the_algorithm_not_the_limit_or_edge() {
        let harsh = Algorithm::HashCounters(EdgeMode::Harsh);
        let code = |limit, secs, algorithm| {
            rule_code("sender-hourly", &Quota::new(limit, secs, algorithm))
        };
        assert_eq!(code(60, 3600, harsh), "7M60W7");
        assert_eq!(
            code(90, 3600, Algorithm::HashCounters(EdgeMode::Weighted)),
            "7M60W7"
        );
        assert_eq!(code(60, 86_400, harsh), "AgVH2X");
        assert_eq!(code(60, 3600, Algorithm::FixedWindow), "YoS9Ny");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(KeyPrefix::new("a{b").is_err());
        assert!(KeyPrefix::new("").is_err());
        assert!(KeyPrefix::new("test-1").is_ok());
    }
}
