//! The fingerprint of an invite's sender-written text (docs/DESIGN.md §3d): the text
//! normalised, so that disguises and changed names or numbers fall away, and a MinHash
//! [`Signature`] of its word shingles, so that near-duplicates fall in one group. Pure.

pub mod bench;
mod confusables;
pub mod groups;
mod index;
mod signature;

use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::props::{DefaultIgnorableCodePoint, GeneralCategory};
use icu_properties::{CodePointMapData, CodePointSetData};

use super::link_domains::registrable_domain;
use crate::signals::links;

pub use index::Index;
pub use signature::{BANDS, ROWS, Signature, VALUES, VERSION, jaccard};

/// Texts shorter than this once normalised ("join my doc") say too little to group.
pub const MIN_CHARS: usize = 20;

/// An invite's text as campaigns count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub normalised: String,
    pub signature: Signature,
}

/// The fingerprint of the text a sender wrote (the message, then the sender's name), or `None`
/// when it is under [`MIN_CHARS`] once normalised.
pub fn of_invite(message: Option<&str>, sender_name: Option<&str>) -> Option<Fingerprint> {
    let parts: Vec<String> = [message, sender_name]
        .into_iter()
        .flatten()
        .map(normalise)
        .filter(|p| !p.is_empty())
        .collect();
    let normalised = parts.join(" ");
    if normalised.chars().count() < MIN_CHARS {
        return None;
    }
    let signature = Signature::of(&normalised);
    Some(Fingerprint {
        normalised,
        signature,
    })
}

/// `text` as fingerprints compare it: Unicode NFKC, look-alike letters folded to the Latin
/// letter they imitate, invisible characters and combining marks dropped, lower case, each run
/// of digits one `#` (a changed phone number or reference is the same text), each link its
/// registrable domain (a changed path or a disguise is the same link), and everything else
/// (punctuation, symbols, spacing) one space between words.
pub fn normalise(text: &str) -> String {
    let mut out = Normalised {
        text: String::with_capacity(text.len()),
        space: false,
    };
    let mut rest = 0;
    for link in links::find(text) {
        out.segment(text.get(rest..link.start).unwrap_or_default());
        out.word(&registrable_domain(&link.host));
        rest = link.end;
    }
    out.segment(text.get(rest..).unwrap_or_default());
    out.text
}

/// The text being built, and whether a space is due before the next word character.
struct Normalised {
    text: String,
    space: bool,
}

impl Normalised {
    fn segment(&mut self, segment: &str) {
        if segment.is_ascii() {
            // NFKC, the look-alikes and the marks leave ASCII as it is.
            for &b in segment.as_bytes() {
                self.ascii(b);
            }
            return;
        }
        let segment = ComposingNormalizerBorrowed::new_nfkc().normalize(segment);
        let category = CodePointMapData::<GeneralCategory>::new();
        let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
        // A mark or an invisible character inside a word leaves the word whole.
        let dropped = |c: char| {
            ignorable.contains(c)
                || matches!(
                    category.get(c),
                    GeneralCategory::NonspacingMark | GeneralCategory::EnclosingMark
                )
        };
        for c in segment.chars().filter(|&c| !dropped(c)) {
            if c.is_ascii() {
                self.ascii(c as u8);
            } else if c.is_numeric() {
                self.digit();
            } else if let Some(letter) = confusables::fold(c) {
                self.push(letter);
            } else {
                for l in c.to_lowercase() {
                    if l.is_alphanumeric() {
                        self.push(l);
                    } else if !dropped(l) {
                        self.space = true;
                    }
                }
            }
        }
    }

    fn ascii(&mut self, b: u8) {
        if b.is_ascii_alphabetic() {
            self.push(char::from(b.to_ascii_lowercase()));
        } else if b.is_ascii_digit() {
            self.digit();
        } else {
            self.space = true;
        }
    }

    fn digit(&mut self) {
        if self.space || !self.text.ends_with('#') {
            self.push('#');
        }
    }

    fn push(&mut self, c: char) {
        if self.space && !self.text.is_empty() {
            self.text.push(' ');
        }
        self.space = false;
        self.text.push(c);
    }

    /// A word of its own, taken as it is (a domain keeps its dots and digits).
    fn word(&mut self, word: &str) {
        self.space = true;
        for c in word.chars() {
            self.push(c);
        }
        self.space = true;
    }
}

#[cfg(test)]
mod tests;
