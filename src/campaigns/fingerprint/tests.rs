use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

#[test]
fn normalises_case_digits_links_and_punctuation() {
    assert_eq!(
        normalise(
            "Your parcel is WAITING!!  Call +1 (555) 0199, ref #4471 -> https://x.claim-now.co.uk/p?id=9"
        ),
        "your parcel is waiting call # # # ref # claim-now.co.uk"
    );
    assert_eq!(normalise("  ...  "), "");
    assert_eq!(normalise("abc123def 4,500.00"), "abc#def # # #");
    assert_eq!(
        normalise("mail ana@mail.example.org"),
        "mail example.org",
        "an email address is its domain too"
    );
}

#[test]
fn folds_look_alikes_full_width_and_marks() {
    // Cyrillic О, р, а, с, е; Greek ο; full-width Ｃａｌｌ; a zero-width space, a soft hyphen.
    assert_eq!(
        normalise("Оur раrсеl: Ｃａｌｌ ｎｏｗ, pa\u{200b}y to\u{ad}day b\u{3bf}nus"),
        "our parcel call now pay today bonus"
    );
    // Stacked combining marks are dropped; precomposed letters stay.
    assert_eq!(
        normalise("f\u{336}r\u{336}e\u{336}e\u{336} café"),
        "free café"
    );
    assert_eq!(normalise("İstanbul"), "istanbul");
    assert_eq!(normalise("ΣΟΣ, Straße"), normalise("σος strasse"));
}

#[test]
fn short_texts_get_no_fingerprint() {
    assert!(of_invite(Some("Join my doc!"), Some("Ana")).is_none());
    assert!(of_invite(None, None).is_none());
    assert!(of_invite(Some("Join my doc, please!"), None).is_none());
    let both = of_invite(Some("Join my doc, please!"), Some("Ana Lima")).expect("long enough");
    assert_eq!(both.normalised, "join my doc please ana lima");
}

#[test]
fn signatures_round_trip_through_bytes() {
    let signature = Signature::of("your parcel is waiting call # to claim it");
    let bytes = signature.to_bytes();
    assert_eq!(bytes.len(), 1 + 4 * VALUES);
    assert_eq!(Signature::from_bytes(&bytes), Some(signature));
    let mut other_version = bytes.clone();
    other_version[0] = VERSION.wrapping_add(1);
    assert_eq!(Signature::from_bytes(&other_version), None);
    assert_eq!(Signature::from_bytes(&bytes[..bytes.len() - 1]), None);
    assert_eq!(Signature::from_bytes(&[]), None);
}

#[test]
fn the_compact_form_keeps_each_values_low_byte() {
    let signature = Signature::of("your parcel is waiting call # to claim it");
    let (full, compact) = (signature.to_bytes(), signature.compact_bytes());
    assert_eq!(compact.len(), 1 + VALUES);
    assert_eq!(compact[0], VERSION);
    for n in 0..VALUES {
        assert_eq!(compact[1 + n], full[1 + 4 * n], "value {n}");
    }
}

#[test]
fn signatures_are_fixed_in_the_code() {
    // A change here changes every stored signature: bump VERSION.
    let signature = Signature::of("your parcel is waiting call # to claim it");
    assert_eq!(
        hex::encode(&signature.to_bytes()[..17]),
        "01db2e438337d78e92d0ff07885b841090",
        "{signature:?}"
    );
}

#[test]
fn a_standard_text_finds_its_near_duplicates_only() {
    let standard =
        "Hi! I'm using Drawbox to plan our trip and would love for you to join my board.";
    let mut index = Index::new();
    index.insert(
        of_invite(Some(standard), None).expect("long").signature,
        "standard",
    );
    let edited =
        "Hi! I'm using Drawbox to plan our summer trip and would love for you to join my board!!";
    let found = of_invite(Some(edited), Some("Ana")).expect("long");
    assert_eq!(index.find(&found.signature), Some(&"standard"));
    let other = "Your parcel is waiting, call +1 555 0199 to claim it today, ref 4471";
    let other = of_invite(Some(other), None).expect("long");
    assert_eq!(index.find(&other.signature), None);
}

const WORDS: [&str; 40] = [
    "parcel", "waiting", "claim", "today", "call", "board", "trip", "summer", "join", "please",
    "team", "review", "draft", "offer", "free", "prize", "account", "verify", "link", "below",
    "meeting", "notes", "friday", "budget", "design", "launch", "photos", "family", "album",
    "recipe", "dinner", "weekend", "project", "update", "invoice", "payment", "support", "winner",
    "bonus", "crypto",
];

/// A disguised copy of plain text: each letter maybe swapped for a Cyrillic or full-width
/// look-alike or upper-cased, maybe followed by a zero-width character.
fn disguise(text: &str, choices: &[u8]) -> String {
    let mut out = String::new();
    for (c, &choice) in text.chars().zip(choices.iter().cycle()) {
        let lookalike = match c {
            'a' => 'а',
            'e' => 'е',
            'o' => 'о',
            'p' => 'р',
            'c' => 'с',
            'x' => 'х',
            'y' => 'у',
            _ => c,
        };
        match choice % 5 {
            0 => out.push(lookalike),
            1 if c.is_ascii_alphanumeric() => {
                out.push(char::from_u32(c as u32 - 0x21 + 0xff01).unwrap_or(c))
            }
            2 => out.extend(c.to_uppercase()),
            _ => out.push(c),
        }
        if choice % 7 == 0 {
            out.push(['\u{200b}', '\u{200d}', '\u{feff}', '\u{ad}'][usize::from(choice % 4)]);
        }
    }
    out
}

/// ASCII, look-alikes, full-width digits and letters, and what composes, reorders or
/// decomposes around them under NFKC.
const MIXED: [char; 36] = [
    'a', 'e', 'o', 'Z', '7', ' ', ',', '-', 'а', 'е', 'о', 'ο', 'ς', 'ß', 'é', 'й', 'Ø', 'ı',
    '\u{0301}', '\u{0308}', '\u{0327}', '\u{0345}', '\u{0306}', '\u{ff11}', '\u{ff41}', '\u{ff21}',
    '\u{1100}', '\u{1161}', '\u{11a8}', '\u{200d}', '\u{fb01}', '\u{212b}', '\u{1e9b}', '\u{3164}',
    '\u{2460}', '\u{0d4}',
];

fn words() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(&WORDS[..]).prop_map(String::from),
        1..30,
    )
}

proptest! {
    #[test]
    fn disguises_normalise_alike(words in words(), choices in prop::collection::vec(any::<u8>(), 1..64)) {
        let text = words.join(" ");
        prop_assert_eq!(normalise(&disguise(&text, &choices)), normalise(&text));
        prop_assert_eq!(normalise(&text), text);
    }

    #[test]
    fn digits_are_masked(words in words(), a in 0u64..10_000_000, b in 0u64..10_000_000) {
        let with = |n: u64| format!("{} call +{n} or ref {n}-{n}", words.join(" "));
        prop_assert_eq!(normalise(&with(a)), normalise(&with(b)));
    }

    #[test]
    fn links_are_cut_to_their_domain(words in words(), sub in "[a-z]{1,8}", path in "[a-z0-9/]{0,12}", form in 0usize..5) {
        let link = match form {
            0 => format!("https://{sub}.scam.com/{path}"),
            1 => format!("hxxp://scam.com/{path}"),
            2 => "scam[.]com".to_string(),
            3 => format!("www.scam.com/{path}"),
            _ => "scam dot com".to_string(),
        };
        let text = format!("{} {link} now", words.join(" "));
        prop_assert_eq!(normalise(&text), format!("{} scam.com now", words.join(" ")));
    }

    /// Taking the simple characters one by one and NFKC for the rest gives what NFKC over
    /// the whole text gives, whatever follows what: marks after look-alikes, jamo, ligatures,
    /// full-width forms.
    #[test]
    fn simple_characters_skip_nfkc_and_change_nothing(chars in prop::collection::vec(prop::sample::select(&MIXED[..]), 0..40)) {
        let text: String = chars.into_iter().collect();
        let by_pieces = {
            let mut out = Normalised { text: Vec::new(), space: false };
            out.segment(&text);
            out.text
        };
        let whole = {
            let mut out = Normalised { text: Vec::new(), space: false };
            out.unicode(&text);
            out.text
        };
        prop_assert_eq!(String::from_utf8_lossy(&by_pieces), String::from_utf8_lossy(&whole), "{:?}", text);
    }

    /// Whichever instructions the CPU has, a signature is the same (here the baseline code
    /// against the one the machine picks).
    #[test]
    fn signatures_are_the_same_on_every_cpu(words in prop::collection::vec(prop::sample::select(&WORDS[..]).prop_map(String::from), 0..400)) {
        let text = words.join(" ");
        prop_assert_eq!(Signature::of(&text), signature::minhash(&text));
    }
}

/// A word of a vocabulary of 5,000, large enough that unrelated texts share few shingles
/// (letters only: digits would be masked).
fn random_word(rng: &mut StdRng) -> String {
    let mut n = rng.random_range(0..5_000u32);
    let mut word = String::from("w");
    while n > 0 {
        word.push(char::from(b'a' + (n % 26) as u8));
        n /= 26;
    }
    word
}

fn random_text(rng: &mut StdRng, len: usize) -> Vec<String> {
    (0..len).map(|_| random_word(rng)).collect()
}

/// `text` with `edits` random words replaced, inserted or deleted.
fn edited(rng: &mut StdRng, text: &[String], edits: usize) -> Vec<String> {
    let mut out = text.to_vec();
    for _ in 0..edits {
        let at = rng.random_range(0..out.len());
        match rng.random_range(0..3) {
            0 => out[at] = random_word(rng),
            1 => out.insert(at, random_word(rng)),
            _ if out.len() > 1 => {
                out.remove(at);
            }
            _ => {}
        }
    }
    out
}

/// Near-duplicates (Jaccard ≥ 0.7) are found at least 95% of the time, texts at ≤ 0.3 at most
/// 1%, through an index holding the first text: band candidates, then the confirmation.
#[test]
fn match_rates_on_generated_variants() {
    let mut rng = StdRng::seed_from_u64(40);
    let (mut high, mut high_found, mut low, mut low_found) = (0, 0, 0, 0);
    for _ in 0..4_000 {
        let len = rng.random_range(20..=120);
        let a = random_text(&mut rng, len);
        // Edits from none to half the words: pairs from identical to little shared.
        let edits = rng.random_range(0..=len / 2);
        let b = edited(&mut rng, &a, edits);
        let (a, b) = (a.join(" "), b.join(" "));
        let exact = jaccard(&a, &b);
        let mut index = Index::new();
        index.insert(Signature::of(&normalise(&a)), ());
        let found = index.find(&Signature::of(&normalise(&b))).is_some();
        if exact >= 0.7 {
            high += 1;
            high_found += usize::from(found);
        } else if exact <= 0.3 {
            low += 1;
            low_found += usize::from(found);
        }
    }
    let high_rate = high_found as f64 / high as f64;
    let low_rate = low_found as f64 / low as f64;
    println!(
        "pairs at >= 0.7: {high}, matched {high_found} ({:.2}%); pairs at <= 0.3: {low}, matched {low_found} ({:.2}%)",
        100.0 * high_rate,
        100.0 * low_rate
    );
    assert!(
        high >= 500 && low >= 500,
        "too few pairs: {high} high, {low} low"
    );
    assert!(high_rate >= 0.95, "near-duplicates matched {high_rate}");
    assert!(low_rate <= 0.01, "unrelated texts matched {low_rate}");
}
