//! The checks of one field of an invite: strings present or absent, single lines without
//! controls that could deceive a reader or a mail server, and the recipient as it is counted and
//! sent to.

use std::net::IpAddr;

use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::props::{
    CanonicalCombiningClass, EmojiModifier, ExtendedPictographic, GeneralCategory, JoiningType,
};
use icu_properties::{CodePointMapData, CodePointSetData};
use serde_json::{Map, Value};

use super::{InvalidBody, RECIPIENT_MAX};

pub(super) fn field_error(field: &'static str, detail: impl Into<String>) -> InvalidBody {
    InvalidBody::Field {
        field,
        detail: detail.into(),
    }
}

/// A string field; `null` counts as absent.
pub(super) fn text(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, InvalidBody> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(field_error(field, "must be a string")),
    }
}

pub(super) fn required(
    obj: &Map<String, Value>,
    field: &'static str,
) -> Result<String, InvalidBody> {
    text(obj, field)?.ok_or_else(|| field_error(field, "is required"))
}

/// Characters that reorder what follows them (bidi embeddings, overrides and isolates): text
/// that reads one way to a reviewer and another in a mail client.
pub(super) fn reorders(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Single-line text: no control characters (no header can be injected through it), no bidi
/// controls, no line or paragraph separators, no invisible format characters.
pub(super) fn single_line(field: &'static str, value: &str, max: usize) -> Result<(), InvalidBody> {
    if value.chars().count() > max {
        return Err(field_error(
            field,
            format!("must be at most {max} characters"),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(field_error(field, "must not contain control characters"));
    }
    if value.chars().any(reorders) {
        return Err(field_error(
            field,
            "must not contain bidirectional controls",
        ));
    }
    if value.contains(['\u{2028}', '\u{2029}']) {
        return Err(field_error(field, "must be a single line"));
    }
    if let Some(c) = invisible(value) {
        return Err(field_error(
            field,
            format!(
                "must not contain invisible format characters (U+{:04X})",
                u32::from(c)
            ),
        ));
    }
    Ok(())
}

/// The first format character (category Cf: soft hyphen, zero-width space, word joiner, byte
/// order mark, ...) in `value` that no script needs there: such characters make look-alikes of
/// names and ids. The joiners pass where IDNA's ContextJ rules (RFC 5892, appendix A) allow
/// them, after a virama or, for U+200C, between letters that join (Persian, Arabic), and
/// U+200D also between two emoji of a sequence (👩‍💻); tag characters only in an emoji tag
/// sequence (a subdivision flag).
fn invisible(value: &str) -> Option<char> {
    let category = CodePointMapData::<GeneralCategory>::new();
    value.char_indices().find_map(|(i, c)| {
        if category.get(c) != GeneralCategory::Format {
            return None;
        }
        let before = value.get(..i).unwrap_or_default().chars().rev();
        let after = value.get(i + c.len_utf8()..).unwrap_or_default().chars();
        let allowed = match c {
            '\u{200C}' => after_virama(before.clone()) || joins(before, after),
            '\u{200D}' => after_virama(before.clone()) || between_emoji(before, after),
            TAG_FIRST..=TAG_CANCEL => in_tag_sequence(before),
            _ => false,
        };
        (!allowed).then_some(c)
    })
}

/// The tag characters of an emoji tag sequence (UTS #51): the subdivision flags, e.g. the flag
/// of Scotland, are a pictographic base, tags, and the cancel tag.
const TAG_FIRST: char = '\u{E0020}';
const TAG_CANCEL: char = '\u{E007F}';

/// Whether a tag character follows an emoji base, other tags aside.
fn in_tag_sequence(before: impl Iterator<Item = char>) -> bool {
    let pictographic = CodePointSetData::new::<ExtendedPictographic>();
    let mut before = before.skip_while(|c| (TAG_FIRST..TAG_CANCEL).contains(c));
    before.next().is_some_and(|c| pictographic.contains(c))
}

fn after_virama(mut before: impl Iterator<Item = char>) -> bool {
    let class = CodePointMapData::<CanonicalCombiningClass>::new();
    before
        .next()
        .is_some_and(|c| class.get(c) == CanonicalCombiningClass::Virama)
}

/// ContextJ's rule for U+200C: a left- or dual-joining letter before it and a right- or
/// dual-joining one after it, transparent marks aside.
fn joins(before: impl Iterator<Item = char>, after: impl Iterator<Item = char>) -> bool {
    let joining = CodePointMapData::<JoiningType>::new();
    let mut before = before
        .map(|c| joining.get(c))
        .skip_while(|&t| t == JoiningType::Transparent);
    let mut after = after
        .map(|c| joining.get(c))
        .skip_while(|&t| t == JoiningType::Transparent);
    before
        .next()
        .is_some_and(|t| matches!(t, JoiningType::LeftJoining | JoiningType::DualJoining))
        && after
            .next()
            .is_some_and(|t| matches!(t, JoiningType::RightJoining | JoiningType::DualJoining))
}

/// An emoji before U+200D (with its variation selector or skin tone) and one after it.
fn between_emoji(
    before: impl Iterator<Item = char>,
    mut after: impl Iterator<Item = char>,
) -> bool {
    let pictographic = CodePointSetData::new::<ExtendedPictographic>();
    let modifier = CodePointSetData::new::<EmojiModifier>();
    let mut before = before.skip_while(|&c| c == '\u{FE0F}' || modifier.contains(c));
    before.next().is_some_and(|c| pictographic.contains(c))
        && after.next().is_some_and(|c| pictographic.contains(c))
}

/// Whether a name reads as a domain, URL or address once normalised as a reader's eye takes it:
/// NFKC (full-width and styled letters are plain ones), lower case (`PayPal.Com` is the domain
/// it imitates), and the look-alike dots read as dots: middle dots, a dot with blanks before it
/// (`paypal . com`) and a comma with no blank after it (`paypal,com`; `Acme, Inc` is a name).
pub(super) fn reads_as_link(name: &str) -> bool {
    let name = ComposingNormalizerBorrowed::new_nfkc()
        .normalize(name)
        .to_lowercase();
    let mut read = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' | '·' | '\u{2027}' | '\u{2219}' | '\u{22C5}' | '\u{30FB}' => {
                let joined = read.trim_end_matches([' ', '\t']).len();
                if joined < read.len() {
                    read.truncate(joined);
                    while chars.next_if(|&n| n == ' ' || n == '\t').is_some() {}
                }
                read.push('.');
            }
            ',' if chars.peek().is_some_and(|n| !n.is_whitespace()) => read.push('.'),
            _ => read.push(c),
        }
    }
    crate::signals::links::has_link(&read)
}

/// A recipient as it is counted and sent to: the domain lower-cased and IDNA-encoded, the local
/// part ASCII (lower-cased, as mailbox providers treat it), and never an IP literal. Returns the
/// address and its domain; whatever it accepts, lettre can send to.
pub(super) fn recipient(raw: &str) -> Result<(String, String), InvalidBody> {
    let invalid = || field_error("recipient", "is not a valid email address");
    let too_long = || {
        field_error(
            "recipient",
            format!("must be at most {RECIPIENT_MAX} characters"),
        )
    };
    if raw.len() > RECIPIENT_MAX {
        return Err(too_long());
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(invalid());
    }
    let (local, domain) = raw.rsplit_once('@').ok_or_else(invalid)?;
    if domain.starts_with('[') || domain.parse::<IpAddr>().is_ok() {
        return Err(field_error(
            "recipient",
            "must have a domain name, not an IP address",
        ));
    }
    if !local.is_ascii() {
        return Err(field_error(
            "recipient",
            "must have a local part (before the @) of ASCII characters",
        ));
    }
    // A dot-atom only (RFC 5322): a quoted local part names the mailbox of its unquoted form
    // (`"ana"@` is `ana@`), so it would be counted and matched against unsubscribes as another
    // address, and some quoted forms cannot be written into a message at all.
    let atext = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b);
    if local
        .split('.')
        .any(|atom| atom.is_empty() || !atom.bytes().all(atext))
    {
        return Err(field_error(
            "recipient",
            "must have a local part of letters, digits and !#$%&'*+-/=?^_`{|}~, dots between \
             them (a quoted local part is not accepted)",
        ));
    }
    let domain = idna::domain_to_ascii(domain).map_err(|_| invalid())?;
    // No top-level domain is numeric: `a@127.1` and the like are addresses in disguise.
    let tld = domain.rsplit('.').next().unwrap_or_default();
    if tld.is_empty() || tld.bytes().all(|b| b.is_ascii_digit()) {
        return Err(field_error(
            "recipient",
            "must have a domain name, not an IP address",
        ));
    }
    if !domain.contains('.') {
        return Err(field_error(
            "recipient",
            "must have a domain with a dot, like example.com",
        ));
    }
    let local = local.to_ascii_lowercase();
    let address = lettre::Address::new(&local, &domain).map_err(|_| invalid())?;
    let address = address.to_string();
    if address.len() > RECIPIENT_MAX {
        return Err(too_long());
    }
    Ok((address, domain))
}

/// An optional single-line field; empty counts as absent.
pub(super) fn optional_line(
    field: &'static str,
    value: Option<String>,
    max: usize,
) -> Result<Option<String>, InvalidBody> {
    if let Some(v) = &value {
        single_line(field, v, max)?;
    }
    Ok(value.filter(|v| !v.is_empty()))
}
