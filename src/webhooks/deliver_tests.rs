use super::*;

const HOUR: Duration = Duration::from_secs(3600);

/// The gaps of an event that fails every attempt, from its first: doubling, then every
/// `MAX_DELAY` (times the jitter) for as long as it fails, with no end.
#[test]
fn a_failing_event_is_retried_at_most_four_hours_apart_however_long_it_fails() {
    let settings = WebhookSettings::default();
    for jitter in [0.8, 1.0, 1.2] {
        let mut at = Duration::ZERO;
        for attempts in 1..=1000 {
            let gap = backoff(settings.retry_base, attempts, jitter);
            assert!(
                gap <= MAX_DELAY.mul_f64(jitter),
                "attempt {attempts}: {gap:?}"
            );
            at += gap;
        }
        // A thousand failures span months, tried six times a day at the end.
        assert!(at > 100 * 24 * HOUR, "jitter {jitter}: {at:?}");
        assert_eq!(
            backoff(settings.retry_base, 1000, jitter),
            MAX_DELAY.mul_f64(jitter)
        );
    }
}

#[test]
fn backoff_doubles_then_stays_at_the_cap() {
    let base = Duration::from_secs(30);
    assert_eq!(backoff(base, 1, 1.0), base);
    assert_eq!(backoff(base, 2, 1.0), 2 * base);
    assert_eq!(backoff(base, 5, 1.0), 16 * base);
    assert_eq!(backoff(base, 12, 1.0), MAX_DELAY);
    assert_eq!(backoff(base, i32::MAX, 1.0), MAX_DELAY);
    assert_eq!(backoff(base, 0, 1.0), base);
    assert_eq!(backoff(base, 3, 0.8), (4 * base).mul_f64(0.8));
}

#[test]
fn settings_are_checked() {
    assert!(validate(&WebhookSettings::default()).is_ok());
    let bad = [
        WebhookSettings {
            lease: Duration::from_secs(5),
            ..WebhookSettings::default()
        },
        WebhookSettings {
            batch: 0,
            ..WebhookSettings::default()
        },
        WebhookSettings {
            retry_base: Duration::ZERO,
            ..WebhookSettings::default()
        },
        WebhookSettings {
            poll: Duration::ZERO,
            ..WebhookSettings::default()
        },
    ];
    for settings in bad {
        let e = validate(&settings).expect_err("refused");
        assert!(e.to_string().starts_with("invalid webhook settings"), "{e}");
    }
}
