//! The byte-level pieces of the scanner: character classes, separators (plain and disguised),
//! dotted names and their public suffix, and where a link ends.

use std::sync::LazyLock;

use super::*;

/// The byte at `i`, or 0 past the end (0 never matches anything we look for).
pub(super) fn byte(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

// Byte classes, looked up in one table since the scanner asks for every byte.
pub(super) const ALNUM: u8 = 1;
/// Letters, digits, `_`: a link cannot start right after one of these.
pub(super) const WORD: u8 = 2;
/// Letters, digits, `-`, `_`.
pub(super) const LABEL: u8 = 4;
/// What an email's local part may hold.
pub(super) const LOCAL: u8 = 8;
/// Bytes that can begin link syntax after a word: `.`, `@`, `:`, brackets,
/// `d` (of ` dot `), and the UTF-8 lead bytes of the wide dots and `@`.
pub(super) const TRIGGER: u8 = 16;

pub(super) static CLASSES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < table.len() {
        let c = i as u8;
        table[i] = if c == b'd' || c == b'D' {
            ALNUM | WORD | LABEL | LOCAL | TRIGGER
        } else if c.is_ascii_alphanumeric() {
            ALNUM | WORD | LABEL | LOCAL
        } else if c == b'.' {
            LOCAL | TRIGGER
        } else if matches!(c, b'@' | b':' | b'[' | b'(' | b'{' | 0xE3 | 0xEF) {
            TRIGGER
        } else if c == b'_' {
            WORD | LABEL | LOCAL
        } else if c == b'-' {
            LABEL | LOCAL
        } else if c == b'%' || c == b'+' {
            LOCAL
        } else {
            0
        };
        i += 1;
    }
    table
};

pub(super) fn has_class(c: u8, class: u8) -> bool {
    CLASSES[usize::from(c)] & class != 0
}

pub(super) fn is_label_byte(c: u8) -> bool {
    has_class(c, LABEL)
}

pub(super) fn is_local_part_byte(c: u8) -> bool {
    has_class(c, LOCAL)
}

/// A link can only begin at an ASCII letter or digit that does not continue a
/// word. Non-ASCII text before it is a boundary, so `访问scam.com` is found.
pub(super) fn is_word_start(b: &[u8], i: usize) -> bool {
    has_class(byte(b, i), ALNUM) && (i == 0 || !has_class(byte(b, i - 1), WORD))
}

pub(super) fn starts_with_ignore_case(b: &[u8], i: usize, pattern: &[u8]) -> bool {
    b.get(i..)
        .and_then(|rest| rest.get(..pattern.len()))
        .is_some_and(|head| head.eq_ignore_ascii_case(pattern))
}

pub(super) fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while matches!(byte(b, i), b' ' | b'\t') {
        i += 1;
    }
    i
}

pub(super) fn closing(open: u8) -> Option<u8> {
    match open {
        b'[' => Some(b']'),
        b'(' => Some(b')'),
        b'{' => Some(b'}'),
        _ => None,
    }
}

pub(super) fn wide_dot_end(b: &[u8], i: usize) -> Option<usize> {
    let rest = b.get(i..)?;
    WIDE_DOTS
        .iter()
        .find(|dot| rest.starts_with(dot))
        .map(|dot| i + dot.len())
}

/// If a label separator starts at `i`, right after the label `prev`, where the
/// text after it resumes. Accepts `.`, the wide dots, `[.]`, `(dot)`, `{ . }`
/// (with blanks around or inside the brackets) and ` dot `.
pub(super) fn separator(b: &[u8], i: usize, prev: &[u8]) -> Option<(usize, Sep)> {
    if byte(b, i) == b'.' {
        return Some((i + 1, Sep::Plain));
    }
    if let Some(end) = wide_dot_end(b, i) {
        return Some((end, Sep::Plain));
    }
    let j = skip_blanks(b, i);
    if let Some(close) = closing(byte(b, j)) {
        let k = skip_blanks(b, j + 1);
        let k = if byte(b, k) == b'.' {
            k + 1
        } else if let Some(end) = wide_dot_end(b, k) {
            end
        } else if starts_with_ignore_case(b, k, b"dot") {
            k + 3
        } else {
            return None;
        };
        let k = skip_blanks(b, k);
        return (byte(b, k) == close).then(|| (skip_blanks(b, k + 1), Sep::Bracketed));
    }
    let spaced_word = j > i
        && starts_with_ignore_case(b, j, b"dot")
        && matches!(byte(b, j + 3), b' ' | b'\t')
        && !DOT_STOPWORDS.iter().any(|w| prev.eq_ignore_ascii_case(w));
    spaced_word.then(|| (skip_blanks(b, j + 3), Sep::Word))
}

/// If an `@` (or a disguise such as ` [at] `) starts at `i`, where the domain
/// starts.
pub(super) fn at_sign(b: &[u8], i: usize) -> Option<usize> {
    if byte(b, i) == b'@' {
        return Some(i + 1);
    }
    if b.get(i..).is_some_and(|rest| rest.starts_with(WIDE_AT)) {
        return Some(i + WIDE_AT.len());
    }
    let j = skip_blanks(b, i);
    let close = closing(byte(b, j))?;
    let k = skip_blanks(b, j + 1);
    if !starts_with_ignore_case(b, k, b"at") {
        return None;
    }
    let k = skip_blanks(b, k + 2);
    (byte(b, k) == close).then(|| skip_blanks(b, k + 1))
}

/// The last labels of a name whose length fits a DNS label, enough to
/// decide its public suffix without allocating.
#[derive(Default)]
pub(super) struct Tail {
    labels: [(usize, usize); TAIL_LABELS],
    len: usize,
}

impl Tail {
    fn push(&mut self, start: usize, end: usize) {
        if end - start > MAX_LABEL {
            self.len = 0;
            return;
        }
        if self.len == TAIL_LABELS {
            self.labels.copy_within(1.., 0);
            self.len -= 1;
        }
        self.labels[self.len] = (start, end);
        self.len += 1;
    }

    fn labels(&self) -> &[(usize, usize)] {
        &self.labels[..self.len]
    }
}

pub(super) struct Name {
    /// End of the last label.
    pub(super) end: usize,
    pub(super) labels: usize,
    pub(super) last: (usize, usize),
    /// Whether a disguised separator (`[.]`, ` dot `) joined two labels:
    /// deliberate, so strong evidence of a link.
    pub(super) disguised: bool,
    /// Whether any label has a lower-case ASCII letter.
    pub(super) lowercase: bool,
    pub(super) tail: Tail,
}

pub(super) fn starts_label(text: &str, i: usize, charset: Charset) -> bool {
    let c = byte(text.as_bytes(), i);
    c.is_ascii_alphanumeric()
        || (c >= 0x80
            && charset == Charset::Unicode
            && next_char(text, i).is_some_and(is_alphanumeric))
}

/// `char::is_alphanumeric`, from a bitmap below U+0800 (Latin, Greek, Cyrillic and the other
/// alphabets a disguised host mixes in, a letter in every word), where the standard library's
/// search costs more than the rest of a label's scan.
pub(super) fn is_alphanumeric(ch: char) -> bool {
    static BELOW_0800: LazyLock<[u64; 32]> = LazyLock::new(|| {
        let mut bits = [0u64; 32];
        for c in (0..0x800).filter_map(char::from_u32) {
            if c.is_alphanumeric() {
                bits[c as usize / 64] |= 1 << (c as usize % 64);
            }
        }
        bits
    });
    match BELOW_0800.get(ch as usize / 64) {
        Some(word) => (word >> (ch as usize % 64)) & 1 == 1,
        None => ch.is_alphanumeric(),
    }
}

pub(super) fn next_char(text: &str, i: usize) -> Option<char> {
    text.get(i..).and_then(|rest| rest.chars().next())
}

pub(super) fn label_end(text: &str, mut i: usize, charset: Charset) -> usize {
    let b = text.as_bytes();
    loop {
        let c = byte(b, i);
        if is_label_byte(c) {
            i += 1;
        } else if c >= 0x80 && charset == Charset::Unicode {
            match next_char(text, i) {
                Some(ch) if is_alphanumeric(ch) => i += ch.len_utf8(),
                _ => return i,
            }
        } else {
            return i;
        }
    }
}

/// Parses a dotted name (labels joined by plain or disguised separators)
/// starting at `start`, calling `visit` with each label's range. A separator
/// counts only when a label follows it, so trailing punctuation stays out.
pub(super) fn parse_name(
    text: &str,
    start: usize,
    charset: Charset,
    mut visit: impl FnMut(usize, usize),
) -> Name {
    let b = text.as_bytes();
    let mut name = Name {
        end: start,
        labels: 0,
        last: (start, start),
        disguised: false,
        lowercase: false,
        tail: Tail::default(),
    };
    if !starts_label(text, start, charset) {
        return name;
    }
    let mut i = start;
    loop {
        let end = label_end(text, i, charset);
        visit(i, end);
        name.labels += 1;
        name.last = (i, end);
        name.end = end;
        name.tail.push(i, end);
        let prev = b.get(i..end).unwrap_or_default();
        name.lowercase |= prev.iter().any(u8::is_ascii_lowercase);
        match separator(b, end, prev) {
            Some((next, sep)) if starts_label(text, next, charset) => {
                name.disguised |= sep != Sep::Plain;
                i = next;
            }
            _ => return name,
        }
    }
}

/// Whether the name ends in a suffix from the Public Suffix List with a label
/// in front of it. `psl` answers every name through its `*` rule, so the
/// suffix must be known. A name that is itself a private suffix
/// (`github.io`, `blogspot.com`) is a host registered under an ICANN suffix,
/// so it counts; one that is itself an ICANN suffix (`co.uk`) does not.
pub(super) fn has_public_suffix(b: &[u8], tail: &Tail) -> bool {
    // Every top-level domain has two or more characters and a letter; this
    // settles numbers (`3.14`, `v2.0`) and abbreviations (`e.g`) cheaply.
    let tld = match tail.labels().last() {
        Some(&(start, end)) => b.get(start..end).unwrap_or_default(),
        None => return false,
    };
    if tld.len() < 2 || !tld.iter().any(u8::is_ascii_alphabetic) {
        return false;
    }
    let mut buf = [0u8; TAIL_LABELS * (MAX_LABEL + 1)];
    let mut len = 0;
    for &(start, end) in tail.labels() {
        if len > 0 {
            buf[len] = b'.';
            len += 1;
        }
        let label = b.get(start..end).unwrap_or_default();
        buf[len..len + label.len()].copy_from_slice(label);
        len += label.len();
    }
    let name = &mut buf[..len];
    name.make_ascii_lowercase();
    match psl::suffix(name) {
        Some(suffix) if suffix.is_known() => {
            suffix.as_bytes().len() < len || suffix.typ() == Some(psl::Type::Private)
        }
        _ => false,
    }
}

/// Extends a link past its host over a port and a path (and, after a scheme
/// or `www.`, a bare query or fragment).
pub(super) fn extend_past_host(text: &str, end: usize, prefixed: bool) -> usize {
    let b = text.as_bytes();
    let mut j = end;
    if byte(b, j) == b':' {
        let digits = b
            .get(j + 1..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if (1..=5).contains(&digits) {
            j += 1 + digits;
        }
    }
    match byte(b, j) {
        b'/' => path_end(text, j),
        b'?' | b'#' if prefixed => path_end(text, j),
        _ => j,
    }
}

/// The end of a path starting at `start`: up to white space, quotes or
/// non-alphanumeric Unicode (CJK punctuation), less trailing punctuation
/// that belongs to the sentence, such as a closing bracket with no opener.
pub(super) fn path_end(text: &str, start: usize) -> usize {
    let b = text.as_bytes();
    let mut j = start;
    let mut opened = [0usize; 3];
    let mut closed = [0usize; 3];
    loop {
        let c = byte(b, j);
        if c >= 0x80 {
            match next_char(text, j) {
                Some(ch) if is_alphanumeric(ch) => j += ch.len_utf8(),
                _ => break,
            }
            continue;
        }
        if c.is_ascii_whitespace() || c.is_ascii_control() || b"<>\"'`".contains(&c) {
            break;
        }
        if let Some(k) = b"([{".iter().position(|&o| o == c) {
            opened[k] += 1;
        }
        if let Some(k) = b")]}".iter().position(|&o| o == c) {
            closed[k] += 1;
        }
        j += 1;
    }
    while j > start {
        let c = byte(b, j - 1);
        if let Some(k) = b")]}".iter().position(|&o| o == c) {
            if closed[k] <= opened[k] {
                break;
            }
            closed[k] -= 1;
        } else if !b".,;:!?*".contains(&c) {
            break;
        }
        j -= 1;
    }
    j
}

pub(super) fn host_string(text: &str, host: Host) -> String {
    match host {
        Host::Literal { start, end } => text.get(start..end).unwrap_or_default().to_lowercase(),
        Host::Name { start, charset } => {
            let mut out = String::new();
            parse_name(text, start, charset, |s, e| {
                if !out.is_empty() {
                    out.push('.');
                }
                for ch in text.get(s..e).unwrap_or_default().chars() {
                    out.extend(ch.to_lowercase());
                }
            });
            out
        }
    }
}
