use super::*;

const HOUR: Duration = Duration::from_secs(3600);

/// Replays the schedule of an event that fails every attempt: (attempts made, age at the last).
fn replay(settings: &WebhookSettings, first_at: Duration, jitter: f64) -> (i32, Duration) {
    let mut at = first_at;
    for attempts in 1..=1000 {
        if gives_up(at, attempts, settings.give_up_after) {
            return (attempts, at);
        }
        let gap = backoff(settings.retry_base, attempts, jitter);
        assert!(
            gap <= MAX_DELAY.mul_f64(jitter),
            "attempt {attempts}: {gap:?}"
        );
        at += gap;
    }
    panic!("never gave up");
}

#[test]
fn the_schedule_covers_more_than_a_day_before_giving_up() {
    let settings = WebhookSettings::default();
    for jitter in [0.8, 1.0, 1.2] {
        let (attempts, last) = replay(&settings, Duration::ZERO, jitter);
        assert!(last > 24 * HOUR, "jitter {jitter}: gave up after {last:?}");
        assert!(last >= settings.give_up_after, "jitter {jitter}: {last:?}");
        assert!(last < settings.give_up_after + 5 * HOUR, "{last:?}");
        // Over a day, without hammering a receiver that is down.
        assert!(
            (MIN_ATTEMPTS..=25).contains(&attempts),
            "{attempts} attempts"
        );
    }
}

#[test]
fn events_found_late_still_get_their_attempts() {
    // Written two days ago while no worker ran: still tried MIN_ATTEMPTS times.
    let settings = WebhookSettings::default();
    let (attempts, last) = replay(&settings, 48 * HOUR, 1.0);
    assert_eq!(attempts, MIN_ATTEMPTS);
    assert!(last - 48 * HOUR > HOUR, "{:?}", last - 48 * HOUR);
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
fn an_event_is_given_up_only_when_old_and_tried_enough() {
    let after = 26 * HOUR;
    assert!(!gives_up(27 * HOUR, MIN_ATTEMPTS - 1, after));
    assert!(!gives_up(25 * HOUR, 40, after));
    assert!(gives_up(26 * HOUR, MIN_ATTEMPTS, after));
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
