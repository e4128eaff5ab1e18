//! The fingerprint of an invite's sender-written text (docs/DESIGN.md §3d): the text
//! normalised, so that disguises and changed names or numbers fall away, and a MinHash
//! [`Signature`] of its word shingles, so that near-duplicates fall in one group. Pure.

pub mod bench;
mod confusables;
pub mod groups;
mod index;
mod signature;

use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::CodePointMapData;
use icu_properties::props::GeneralCategory;

use super::link_domains::registrable_domain;
use crate::signals::links;

pub use index::Index;
pub use signature::{AGREEING, BAND_BYTES, BANDS, ROWS, Signature, VALUES, VERSION, jaccard};

/// Texts shorter than this once normalised ("join my doc") say too little to group.
pub const MIN_CHARS: usize = 20;

/// Letters that draw nothing (Hangul fillers), used as invisible separators and names.
const HANGUL_FILLERS: [char; 4] = ['\u{115f}', '\u{1160}', '\u{3164}', '\u{ffa0}'];

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
/// letter they imitate, invisible characters and combining marks dropped, case folded, each run
/// of digits one `#` (a changed phone number or reference is the same text), each link its
/// registrable domain (a changed path or a disguise is the same link), and everything else
/// (punctuation, symbols, spacing) one space between words.
pub fn normalise(text: &str) -> String {
    // Its links as their reader sees them, which the dropping below would come too late for.
    let text = &*links::as_read(text);
    let mut out = Normalised {
        text: Vec::with_capacity(text.len()),
        space: false,
    };
    let mut rest = 0;
    for link in links::find(text) {
        out.segment(text.get(rest..link.start).unwrap_or_default());
        out.word(&registrable_domain(&link.host));
        rest = link.end;
    }
    out.segment(text.get(rest..).unwrap_or_default());
    // Only whole characters were written.
    String::from_utf8(out.text)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A character NFKC leaves as it is (or, a full-width digit, makes one ASCII digit) whatever
/// comes before or after it: ASCII, the look-alikes of Latin, Greek and Cyrillic letters, which
/// a disguised text has in every word, and the full-width digits. None is the second of a
/// composition or reordered, so a run of other characters ends before one; a combining mark
/// after one joins it, so such a run starts with the character before it.
enum Simple {
    Ascii(u8),
    LookAlike(u8),
    Digit,
}

impl Simple {
    fn of(c: char) -> Option<Simple> {
        if c.is_ascii() {
            return Some(Simple::Ascii(c as u8));
        }
        if ('\u{ff10}'..='\u{ff19}').contains(&c) {
            return Some(Simple::Digit);
        }
        confusables::fold_direct(c).map(|letter| Simple::LookAlike(letter as u8))
    }
}

/// The text being built (UTF-8, as bytes: most of it is ASCII, written a byte at a time), and
/// whether a space is due before the next word character.
struct Normalised {
    text: Vec<u8>,
    space: bool,
}

impl Normalised {
    /// A piece of text without links. The characters NFKC leaves alone, whatever is around
    /// them, are taken one by one ([`Simple`]); each run of the others goes through NFKC with the
    /// character before it, which a combining mark may join ([`Normalised::unicode`]).
    fn segment(&mut self, segment: &str) {
        if segment.is_ascii() {
            // NFKC, the look-alikes and the marks leave ASCII as it is.
            for &b in segment.as_bytes() {
                self.ascii(b);
            }
            return;
        }
        let mut rest = segment;
        while let Some((start, _)) = rest.char_indices().find(|&(_, c)| Simple::of(c).is_none()) {
            let before = rest
                .get(..start)
                .and_then(|head| head.char_indices().next_back())
                .map_or(start, |(i, _)| i);
            let end = rest
                .get(start..)
                .and_then(|tail| tail.char_indices().find(|&(_, c)| Simple::of(c).is_some()))
                .map_or(rest.len(), |(i, _)| start + i);
            self.simple(rest.get(..before).unwrap_or_default());
            self.unicode(rest.get(before..end).unwrap_or_default());
            rest = rest.get(end..).unwrap_or_default();
        }
        self.simple(rest);
    }

    /// Characters that are all [`Simple`].
    fn simple(&mut self, text: &str) {
        for c in text.chars() {
            match Simple::of(c) {
                Some(Simple::Ascii(b)) => self.ascii(b),
                Some(Simple::LookAlike(letter)) => self.push_byte(letter),
                Some(Simple::Digit) => self.digit(),
                None => {}
            }
        }
    }

    /// Text through NFKC, then character by character.
    fn unicode(&mut self, segment: &str) {
        let segment = ComposingNormalizerBorrowed::new_nfkc().normalize(segment);
        let category = CodePointMapData::<GeneralCategory>::new();
        for c in segment.chars() {
            if c.is_ascii() {
                self.ascii(c as u8);
                continue;
            }
            match category.get(c) {
                // Dropped, leaving a word whole: invisible characters (what the
                // Default_Ignorable_Code_Point property lists is these categories, the Hangul
                // fillers and unassigned code points) and combining marks.
                GeneralCategory::Format
                | GeneralCategory::NonspacingMark
                | GeneralCategory::EnclosingMark => {}
                _ if HANGUL_FILLERS.contains(&c) => {}
                GeneralCategory::DecimalNumber
                | GeneralCategory::LetterNumber
                | GeneralCategory::OtherNumber => self.digit(),
                _ => match confusables::fold(c) {
                    Some(letter) => self.push(letter),
                    None => {
                        for l in c.to_lowercase() {
                            // Case folding where it differs from lower case: ß is ss, a final
                            // sigma a sigma. The look-alikes once more: Σ is σ, which is o.
                            let l = if l == 'ς' { 'σ' } else { l };
                            if l == 'ß' {
                                self.push('s');
                                self.push('s');
                            } else if let Some(letter) = confusables::fold(l) {
                                self.push(letter);
                            } else if l.is_alphanumeric() {
                                self.push(l);
                            } else if category.get(l) != GeneralCategory::NonspacingMark {
                                self.space = true;
                            }
                        }
                    }
                },
            }
        }
    }

    // Called for each byte of a text: inlined into the loops.
    #[inline(always)]
    fn ascii(&mut self, b: u8) {
        if b.is_ascii_alphabetic() {
            self.push_byte(b.to_ascii_lowercase());
        } else if b.is_ascii_digit() {
            self.digit();
        } else {
            self.space = true;
        }
    }

    fn digit(&mut self) {
        if self.space || self.text.last() != Some(&b'#') {
            self.push_byte(b'#');
        }
    }

    fn push(&mut self, c: char) {
        let mut buf = [0; 4];
        // Once its first byte is in, no space is due: the character stays whole.
        c.encode_utf8(&mut buf)
            .bytes()
            .for_each(|b| self.push_byte(b));
    }

    #[inline(always)]
    fn push_byte(&mut self, b: u8) {
        if self.space && !self.text.is_empty() {
            self.text.push(b' ');
        }
        self.space = false;
        self.text.push(b);
    }

    /// A word of its own, taken as it is (a domain keeps its dots and digits).
    fn word(&mut self, word: &str) {
        if !self.text.is_empty() {
            self.text.push(b' ');
        }
        self.text.extend_from_slice(word.as_bytes());
        self.space = true;
    }
}

#[cfg(test)]
mod tests;
