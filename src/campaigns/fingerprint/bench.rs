//! `sendguard bench fingerprint`: what fingerprinting costs per invite, on the 2,000-character
//! message of `bench links` (the longest the API accepts), as written and disguised.

use crate::signals::bench::{median_micros, sample_message};

use super::{Signature, normalise};

/// One measured row: what was called and the median per call.
#[derive(Debug, Clone)]
pub struct FingerprintBench {
    pub call: &'static str,
    pub median_us: f64,
}

pub fn run(iterations: usize) -> Vec<FingerprintBench> {
    let iterations = iterations.max(1);
    let message = sample_message();
    // Every vowel a Cyrillic look-alike, every digit full-width: the slow path throughout.
    let disguised: String = message
        .chars()
        .map(|c| match c {
            'a' => 'а',
            'e' => 'е',
            'o' => 'о',
            '0'..='9' => char::from_u32(c as u32 - 0x30 + 0xff10).unwrap_or(c),
            _ => c,
        })
        .collect();
    let normalised = normalise(&message);
    let row = |call, text: &str| FingerprintBench {
        call,
        median_us: median_micros(iterations, || {
            Signature::of(&normalise(text)).bands()[0] as usize
        })
        .0,
    };
    vec![
        row("normalise + signature, 2,000 chars", &message),
        FingerprintBench {
            call: "normalise only",
            median_us: median_micros(iterations, || normalise(&message).len()).0,
        },
        FingerprintBench {
            call: "signature only",
            median_us: median_micros(iterations, || {
                Signature::of(&normalised).bands()[0] as usize
            })
            .0,
        },
        row("normalise + signature, 2,000 chars disguised", &disguised),
        FingerprintBench {
            call: "normalise only, disguised",
            median_us: median_micros(iterations, || normalise(&disguised).len()).0,
        },
        FingerprintBench {
            call: "link detection only, disguised",
            median_us: median_micros(iterations, || crate::signals::links::find(&disguised).len())
                .0,
        },
    ]
}
