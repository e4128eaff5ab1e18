//! PLACEHOLDER until the real fingerprint lands (same interface).

use std::hash::{Hash, Hasher};

pub const MIN_CHARS: usize = 20;
pub const VERSION: u8 = 1;
pub const BANDS: usize = 16;
const ROWS: usize = 4;
const LEN: usize = BANDS * ROWS;

pub fn normalise(text: &str) -> String {
    let mut out = String::new();
    let mut digit = false;
    for c in text.to_lowercase().chars() {
        if c.is_ascii_digit() {
            if !digit {
                out.push('#');
            }
            digit = true;
            continue;
        }
        digit = false;
        if c.is_alphanumeric() {
            out.push(c);
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    out.trim().to_owned()
}

pub struct Fingerprint {
    pub normalised: String,
    pub signature: Signature,
}

pub fn of_invite(message: Option<&str>, sender_name: Option<&str>) -> Option<Fingerprint> {
    let text = [sender_name, message]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let normalised = normalise(&text);
    if normalised.chars().count() < MIN_CHARS {
        return None;
    }
    let signature = Signature::of(&normalised);
    Some(Fingerprint {
        normalised,
        signature,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature([u32; LEN]);

fn h(x: &impl Hash) -> u64 {
    let mut s = std::collections::hash_map::DefaultHasher::new();
    x.hash(&mut s);
    s.finish()
}

impl Signature {
    fn of(text: &str) -> Signature {
        let words: Vec<&str> = text.split(' ').collect();
        let mut mins = [u32::MAX; LEN];
        for w in words.windows(3.min(words.len())) {
            let x = h(&w);
            let (a, b) = (x as u32, (x >> 32) as u32 | 1);
            for (i, m) in mins.iter_mut().enumerate() {
                let v = a
                    .wrapping_add((i as u32).wrapping_mul(b))
                    .wrapping_mul(0x9E37_79B1);
                *m = (*m).min(v);
            }
        }
        Signature(mins)
    }
    pub fn bands(&self) -> [u64; BANDS] {
        let mut out = [0; BANDS];
        for (i, b) in out.iter_mut().enumerate() {
            *b = h(&(i, &self.0[i * ROWS..(i + 1) * ROWS]));
        }
        out
    }
    pub fn agreement(&self, other: &Signature) -> f64 {
        self.0.iter().zip(&other.0).filter(|(a, b)| a == b).count() as f64 / LEN as f64
    }
    pub fn matches(&self, other: &Signature) -> bool {
        self.agreement(other) > 0.5
    }
    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().flat_map(|v| v.to_le_bytes()).collect()
    }
    pub fn from_bytes(bytes: &[u8]) -> Option<Signature> {
        if bytes.len() != LEN * 4 {
            return None;
        }
        let mut out = [0u32; LEN];
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            out[i] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        Some(Signature(out))
    }
}

pub struct Index<T> {
    items: Vec<(Signature, T)>,
}

impl<T> Default for Index<T> {
    fn default() -> Self {
        Index { items: Vec::new() }
    }
}

impl<T> Index<T> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn insert(&mut self, signature: Signature, value: T) {
        self.items.push((signature, value));
    }
    pub fn find(&self, signature: &Signature) -> Option<&T> {
        self.items
            .iter()
            .find(|(s, _)| s.matches(signature))
            .map(|(_, v)| v)
    }
}
