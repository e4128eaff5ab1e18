//! The `links` signal: finds links in user-written text.
//!
//! Spam in invitations hides its payload in free text (a message, a resource
//! name, a display name), often disguised: `scam[.]com`, `scam dot com`,
//! `hxxp://`, full-width dots. This scanner recognises:
//!
//! - URLs with a scheme (`http`, `https`, `ftp`, `ftps`, and the `hxxp`/`hxxps`
//!   disguise) and `www.` hosts. These count whatever the host is, since the
//!   prefix alone is evidence of a link.
//! - Bare domain names, only when they end in a suffix that is on the Public
//!   Suffix List (compiled in by the `psl` crate) and have a label in front
//!   of that suffix. Unknown endings (`report.pdf`, `v2.0`) never count.
//! - Email addresses whose domain passes the same test.
//!
//! The scan takes time linear in the text (adversarial input included) and
//! allocates only for the links it returns.
//!
//! Choices made for ambiguous text, all to keep ordinary prose unflagged:
//!
//! - Bare hosts are ASCII (punycode `xn--` labels included). Unicode hosts are
//!   found only after a scheme or `www.`: CJK text ends sentences with `。`,
//!   and words such as 中国 are themselves top-level domains.
//! - A plain dot joins labels only with no space around it, and a run of dots
//!   (`hello...world`) separates words.
//! - A bare name whose last label has capitals while the name is not all
//!   capitals (`sentence.Next`, `Socket.IO`) reads as a missing space after a
//!   full stop or as a product name, so it needs more evidence: a path, a
//!   port, or a disguised separator. `Paypal.com` and `EVIL.COM` count.
//! - The word `dot` joins labels unless the label before it is an article
//!   (`the dot com bubble`).
//! - Country codes that are far more often file extensions in resource names
//!   (`.md`, `.py`, `.rs`, `.sh`) need the same extra evidence. Other
//!   collisions (`.zip`, `.mov`) are real TLDs used for phishing and count.
//! - IP addresses count only after a scheme.

/// What kind of link was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Url,
    Domain,
    Email,
}

/// One link found in a text: its byte range in the ORIGINAL text (so a
/// dashboard can mark it), its kind, and the host it points to, normalised
/// (lower-case, disguises undone, e.g. "scam.example.com").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub start: usize,
    pub end: usize,
    pub kind: LinkKind,
    pub host: String,
}

/// Every link in `text`, in order, non-overlapping.
pub fn find(text: &str) -> Vec<Link> {
    Scanner::new(text)
        .map(|found| Link {
            start: found.start,
            end: found.end,
            kind: found.kind,
            host: host_string(text, found.host),
        })
        .collect()
}

/// Whether `text` has at least one link (may stop at the first), read as [`as_read`] reads it.
pub fn has_link(text: &str) -> bool {
    Scanner::new(&as_read(text)).next().is_some()
}

/// `text` as its reader sees it, for counting its links: characters that draw nothing (Unicode's
/// default-ignorable code points: zero-width space and joiners, word joiner, soft hyphen, byte
/// order mark, variation selectors, the combining grapheme joiner, Hangul fillers) dropped, and
/// the dot leaders read as dots. `evil-site.\u{200b}com` is the link it shows. Borrowed when
/// there is nothing to change, as in all ASCII text.
pub fn as_read(text: &str) -> Cow<'_, str> {
    let invisible = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    let changed = |c: char| !c.is_ascii() && (DOT_LEADERS.contains(&c) || invisible.contains(c));
    if text.is_ascii() || !text.chars().any(changed) {
        return Cow::Borrowed(text);
    }
    let read = text
        .chars()
        .filter(|&c| !invisible.contains(c))
        .map(|c| if DOT_LEADERS.contains(&c) { '.' } else { c })
        .collect();
    Cow::Owned(read)
}

/// Every link in `text` as [`as_read`] reads it, each with its byte range in `text` itself (the
/// characters that draw nothing inside it included), so that a page can mark a link its
/// reader sees however it was broken up.
pub fn find_read(text: &str) -> Vec<Link> {
    let Cow::Owned(read) = as_read(text) else {
        return find(text);
    };
    // Where each byte of the text as read came from in `text`, and the end.
    let invisible = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    let mut from = Vec::with_capacity(read.len() + 1);
    for (i, c) in text.char_indices() {
        if invisible.contains(c) {
            continue;
        }
        let len = if DOT_LEADERS.contains(&c) {
            1
        } else {
            c.len_utf8()
        };
        from.extend(std::iter::repeat_n(i, len));
    }
    from.push(text.len());
    find(&read)
        .into_iter()
        .filter_map(|link| {
            Some(Link {
                start: *from.get(link.start)?,
                end: *from.get(link.end)?,
                ..link
            })
        })
        .collect()
}

/// U+2024 one dot leader and U+FE52 small full stop, which draw a full stop.
const DOT_LEADERS: [char; 2] = ['\u{2024}', '\u{fe52}'];

const SCHEMES: [&[u8]; 6] = [b"http", b"https", b"hxxp", b"hxxps", b"ftp", b"ftps"];
/// Country-code TLDs that are mostly file extensions when written bare.
const FILE_EXTENSIONS: [&[u8]; 4] = [b"md", b"py", b"rs", b"sh"];
/// Labels after which the word `dot` is prose, not a disguised separator.
const DOT_STOPWORDS: [&[u8]; 4] = [b"a", b"an", b"the", b"dot"];
/// U+FF0E full-width full stop, U+3002 ideographic full stop, U+FF61
/// half-width ideographic full stop.
const WIDE_DOTS: [&[u8]; 3] = [
    "\u{ff0e}".as_bytes(),
    "\u{3002}".as_bytes(),
    "\u{ff61}".as_bytes(),
];
/// U+FF20 full-width commercial at.
const WIDE_AT: &[u8] = "\u{ff20}".as_bytes();
/// DNS limit on one label; longer runs are not host names.
const MAX_LABEL: usize = 63;
/// Labels kept for the suffix check: the deepest rule on the list has seven
/// (`*.us-east-1.r.cloud.int.apple`), plus the registrable label before it.
const TAIL_LABELS: usize = 8;

/// A position found by the scanner; the host string is built only on demand.
struct Found {
    start: usize,
    end: usize,
    kind: LinkKind,
    host: Host,
}

#[derive(Clone, Copy)]
enum Host {
    /// A dotted name starting here, parsed again to build the normalised host.
    Name { start: usize, charset: Charset },
    /// Text taken as is (a bracketed IPv6 address).
    Literal { start: usize, end: usize },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Charset {
    Ascii,
    Unicode,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sep {
    Plain,
    Word,
    Bracketed,
}

struct Scanner<'a> {
    text: &'a str,
    pos: usize,
    /// Word starts before this offset are known not to begin an email, which
    /// keeps runs like `a+b+c+d.e` linear.
    no_email_before: usize,
    /// Word starts before this offset lie in a run found worth a full look;
    /// past it, the scanner first searches for the next such run.
    full_look_before: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Scanner {
            text,
            pos: 0,
            no_email_before: 0,
            full_look_before: 0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// Tries every kind of link at a word start. On failure returns where to
    /// resume: past the dotted name. Its later labels are not tried on their
    /// own; they end the same way, and skipping them keeps the scan linear.
    fn at_word(&mut self, i: usize) -> Result<Found, usize> {
        if let Some(found) = self.url_with_scheme(i) {
            return Ok(found);
        }
        if let Some(found) = self.email(i) {
            return Ok(found);
        }
        if let Some(found) = self.www(i) {
            return Ok(found);
        }
        self.bare_domain(i)
    }

    fn url_with_scheme(&self, i: usize) -> Option<Found> {
        let b = self.bytes();
        if !matches!(byte(b, i) | 0x20, b'h' | b'f') {
            return None;
        }
        let mut j = i;
        while byte(b, j).is_ascii_alphabetic() && j - i <= 5 {
            j += 1;
        }
        let word = b.get(i..j)?;
        if !SCHEMES.iter().any(|s| word.eq_ignore_ascii_case(s)) {
            return None;
        }
        let after_colon = if byte(b, j) == b':' {
            j + 1
        } else if closing(byte(b, j)).is_some_and(|c| byte(b, j + 1) == b':' && byte(b, j + 2) == c)
        {
            j + 3
        } else {
            return None;
        };
        let slash = byte(b, after_colon);
        if !matches!(slash, b'/' | b'\\') || byte(b, after_colon + 1) != slash {
            return None;
        }
        let authority = after_colon + 2;

        // Skip `user:pass@`; the host is what follows the last `@`.
        let mut host_start = authority;
        let mut k = authority;
        loop {
            let c = byte(b, k);
            if c == 0 || c >= 0x80 || c.is_ascii_whitespace() || b"/?#<>\"'".contains(&c) {
                break;
            }
            if c == b'@' {
                host_start = k + 1;
            }
            k += 1;
        }

        let name = parse_name(self.text, host_start, Charset::Unicode, |_, _| {});
        let (host, end) = if name.labels > 0 {
            let host = Host::Name {
                start: host_start,
                charset: Charset::Unicode,
            };
            (host, name.end)
        } else if byte(b, host_start) == b'[' {
            let close = host_start + b.get(host_start..k)?.iter().position(|&c| c == b']')?;
            if close <= host_start + 1 {
                return None;
            }
            let host = Host::Literal {
                start: host_start + 1,
                end: close,
            };
            (host, close + 1)
        } else {
            return None;
        };
        Some(Found {
            start: i,
            end: extend_past_host(self.text, end, true),
            kind: LinkKind::Url,
            host,
        })
    }

    fn email(&mut self, i: usize) -> Option<Found> {
        if i < self.no_email_before {
            return None;
        }
        let b = self.bytes();
        let mut j = i;
        while is_local_part_byte(byte(b, j)) {
            j += 1;
        }
        let domain = at_sign(b, j).and_then(|d| {
            let name = parse_name(self.text, d, Charset::Ascii, |_, _| {});
            (name.labels >= 2 && has_public_suffix(b, &name.tail)).then_some((d, name.end))
        });
        let Some((start, end)) = domain else {
            self.no_email_before = j;
            return None;
        };
        Some(Found {
            start: i,
            end,
            kind: LinkKind::Email,
            host: Host::Name {
                start,
                charset: Charset::Ascii,
            },
        })
    }

    fn www(&self, i: usize) -> Option<Found> {
        let b = self.bytes();
        // The first label must be exactly `www`, not `wwwx` or `wwwé`.
        if !starts_with_ignore_case(b, i, b"www")
            || label_end(self.text, i, Charset::Unicode) != i + 3
        {
            return None;
        }
        let name = parse_name(self.text, i, Charset::Unicode, |_, _| {});
        if name.labels < 2 {
            return None;
        }
        Some(Found {
            start: i,
            end: extend_past_host(self.text, name.end, true),
            kind: LinkKind::Url,
            host: Host::Name {
                start: i,
                charset: Charset::Unicode,
            },
        })
    }

    fn bare_domain(&self, i: usize) -> Result<Found, usize> {
        let b = self.bytes();
        let name = parse_name(self.text, i, Charset::Ascii, |_, _| {});
        if name.labels < 2 || !has_public_suffix(b, &name.tail) {
            return Err(name.end);
        }
        let end = extend_past_host(self.text, name.end, false);
        let tld = b.get(name.last.0..name.last.1).unwrap_or_default();
        let odd_case = name.lowercase && tld.iter().any(u8::is_ascii_uppercase);
        let needs_evidence =
            odd_case || FILE_EXTENSIONS.iter().any(|e| tld.eq_ignore_ascii_case(e));
        if needs_evidence && !name.disguised && end == name.end {
            return Err(name.end);
        }
        Ok(Found {
            start: i,
            end,
            kind: LinkKind::Domain,
            host: Host::Name {
                start: i,
                charset: Charset::Ascii,
            },
        })
    }
}

impl Iterator for Scanner<'_> {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        let b = self.bytes();
        let mut i = self.pos;
        loop {
            if i >= b.len() {
                self.pos = b.len();
                return None;
            }
            if i >= self.full_look_before {
                let Some((start, end)) = next_run_worth_a_look(b, i) else {
                    self.pos = b.len();
                    return None;
                };
                i = start;
                self.full_look_before = end;
            }
            if !is_word_start(b, i) {
                i += 1;
                continue;
            }
            match self.at_word(i) {
                Ok(found) => {
                    self.pos = found.end.max(i + 1);
                    return Some(found);
                }
                Err(resume) => i = resume.max(i + 1),
            }
        }
    }
}

/// Most words cannot start a link. Every link lies in or starts in a run of
/// host and email characters (letters, digits, `.-_%+`) that holds a dot
/// before a label or is followed by what begins a scheme, an `@` or a
/// disguised separator.
/// Returns the next such run at or after `from`. It searches for the few
/// bytes that can begin that syntax and looks back from them, so plain prose
/// is passed over in one tight loop.
fn next_run_worth_a_look(b: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut t = from;
    loop {
        t += b.get(t..)?.iter().position(|&c| has_class(c, TRIGGER))?;
        let run_end = match byte(b, t) {
            // A dot that no label follows (a full stop) joins nothing; what
            // may come after it is a trigger of its own.
            b'.' if !(byte(b, t + 1).is_ascii_alphanumeric() || byte(b, t + 1) >= 0x80) => None,
            b'.' => {
                let end = b.get(t..).unwrap_or_default();
                let len = end.iter().take_while(|&&c| is_local_part_byte(c)).count();
                return Some((run_start(b, t, from), t + len));
            }
            // A scheme's colon, an `@`, a wide dot or a wide `@` (not every character of its
            // lead byte: full-width digits and letters share it).
            b'@' | b':' => Some(t),
            0xE3 | 0xEF => {
                let wide_at = b.get(t..).is_some_and(|rest| rest.starts_with(WIDE_AT));
                (wide_at || wide_dot_end(b, t).is_some()).then_some(t)
            }
            b'[' | b'(' | b'{' => Some(blanks_before(b, t, from)),
            // `d` or `D`: only the word ` dot ` counts.
            _ => {
                let before = blanks_before(b, t, from);
                let spaced_dot = before < t
                    && starts_with_ignore_case(b, t, b"dot")
                    && matches!(byte(b, t + 3), b' ' | b'\t');
                spaced_dot.then_some(before)
            }
        };
        let run_end = run_end.filter(|&end| end > from && is_local_part_byte(byte(b, end - 1)));
        if let Some(end) = run_end {
            return Some((run_start(b, end, from), end));
        }
        t += 1;
    }
}

/// Where the run of host and email characters that ends at `end` starts,
/// looking no further back than `from`.
fn run_start(b: &[u8], end: usize, from: usize) -> usize {
    let head = b.get(from..end).unwrap_or_default();
    let len = head
        .iter()
        .rev()
        .take_while(|&&c| is_local_part_byte(c))
        .count();
    end - len
}

/// Where the blanks that end at `end` start, looking no further back than
/// `from`.
fn blanks_before(b: &[u8], end: usize, from: usize) -> usize {
    let head = b.get(from..end).unwrap_or_default();
    end - head
        .iter()
        .rev()
        .take_while(|&&c| matches!(c, b' ' | b'\t'))
        .count()
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
mod text;

use std::borrow::Cow;

use icu_properties::CodePointSetData;
use icu_properties::props::DefaultIgnorableCodePoint;
use text::*;
