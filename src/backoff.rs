//! Exponential backoff, shared by the outbox's retries of an email and the webhooks' retries of
//! an event; each adds its own jitter.

use std::time::Duration;

/// `base` × 2^(attempts − 1), attempts counted from 1, at most `cap`.
pub fn exponential(base: Duration, attempts: i32, cap: Duration) -> Duration {
    // Within 0..=31 after the clamp: the conversion cannot fail.
    let exp = u32::try_from(attempts.clamp(1, 32) - 1).unwrap_or(0);
    base.saturating_mul(2u32.saturating_pow(exp)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_then_stays_at_the_cap() {
        let (base, cap) = (Duration::from_secs(2), Duration::from_secs(3600));
        assert_eq!(exponential(base, 0, cap), base);
        assert_eq!(exponential(base, 1, cap), base);
        assert_eq!(exponential(base, 4, cap), 8 * base);
        assert_eq!(exponential(base, 11, cap), 1024 * base);
        assert_eq!(exponential(base, 12, cap), cap);
        assert_eq!(exponential(base, i32::MAX, cap), cap);
    }
}
