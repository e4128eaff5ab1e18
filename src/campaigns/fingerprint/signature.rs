//! MinHash over word 3-shingles: for each of 64 hash functions, the least value it gives any of
//! the text's shingles. Two texts' minima are equal with probability the Jaccard index of their
//! shingle sets, so the share of equal minima estimates it. Everything is fixed in the code
//! (hash, seeds, layout), so a signature computed anywhere, any time, compares with one stored
//! in Redis or Postgres; [`VERSION`] names it.

/// Bumped whenever anything that changes a signature changes (normalisation included):
/// stored keys and signatures carry it, so old ones are never compared with new ones.
pub const VERSION: u8 = 1;
/// Minima per signature.
pub const VALUES: usize = 64;
/// Bands of [`ROWS`] minima each, over the first `BANDS * ROWS` minima: two texts become
/// candidates when one band is equal in full. With 10 × 3, texts at a Jaccard index of 0.7
/// share a band with probability 0.985, texts at 0.3 with 0.24 (then the confirmation against
/// the whole signature turns them away). 16 × 4 finds the same near-duplicates (0.988 at 0.7),
/// but each band is a field of the group store in Redis, 70-80 bytes of its memory a text.
pub const BANDS: usize = 10;
pub const ROWS: usize = 3;
const _: () = assert!(BANDS * ROWS <= VALUES);
/// The fewest equal minima of two near-duplicates: 43 of 64, an estimated Jaccard index of
/// about 0.67. On generated variants it still finds 98% of the pairs at 0.7 or more (96% at
/// 44, 94% at 45). Lower thresholds matched ordinary messages alike in layout only: against
/// the SpamAssassin corpus, 39 held 7 of 4,150 (items of one daily mailer), and "more than
/// half" twice as many.
pub const AGREEING: usize = 43;
/// The bytes of a band key the group store keeps: a field of 6 bytes fits Redis' smallest
/// allocation of a string (8 bytes, its header and terminator included) where 8 bytes take 16,
/// and two unrelated bands of a store of a billion share a key once in 280,000 look-ups, which
/// only costs a comparison (the confirmation turns them away).
pub const BAND_BYTES: usize = 6;

/// Words in a shingle.
const SHINGLE: usize = 3;
/// The seed of a shingle's hash, and of the bands' keys (fixed for ever at this [`VERSION`]).
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The MinHash signature of a normalised text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Signature([u32; VALUES]);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature({:08x}…)", self.0[0])
    }
}

impl Signature {
    /// The signature of a normalised text (words separated by single spaces). A text of fewer
    /// than three words is one shingle of its words.
    pub fn of(normalised: &str) -> Signature {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU running this has just been found to have AVX2.
            return unsafe { minhash_avx2(normalised) };
        }
        minhash(normalised)
    }

    /// Each band's minima hashed to one key (the band's number included, so equal minima in
    /// two different bands are two keys). The group store keeps its low 6 bytes
    /// ([`BAND_BYTES`]).
    pub fn bands(&self) -> [u64; BANDS] {
        let mut keys = [0; BANDS];
        let banded = self.0[..BANDS * ROWS].chunks_exact(ROWS);
        for (band, (key, rows)) in keys.iter_mut().zip(banded).enumerate() {
            let mut h = mix(band as u64 ^ SEED);
            for &v in rows {
                h = mix(h ^ u64::from(v));
            }
            *key = h;
        }
        keys
    }

    /// Whether two texts are near-duplicates: at least [`AGREEING`] minima agree.
    pub fn matches(&self, other: &Signature) -> bool {
        self.equal(other) >= AGREEING
    }

    fn equal(&self, other: &Signature) -> usize {
        self.0.iter().zip(&other.0).filter(|(a, b)| a == b).count()
    }

    /// [`VERSION`], then the minima, little-endian: 257 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + 4 * VALUES);
        bytes.push(VERSION);
        for v in self.0 {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes
    }

    /// The group store's form in Redis: [`VERSION`], then each minimum's low byte: 65 bytes
    /// where [`Signature::to_bytes`] takes 257. Two texts' low bytes agree wherever their minima
    /// do, and elsewhere by chance once in 256 values: a quarter of a value of 64 for unrelated
    /// texts, and a near-duplicate's estimate raised by under a tenth of a value, against the 43
    /// of [`AGREEING`].
    pub fn compact_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + VALUES);
        bytes.push(VERSION);
        bytes.extend(self.0.iter().map(|&v| v as u8));
        bytes
    }

    /// A signature from [`Signature::to_bytes`]; `None` for anything else, a signature of
    /// another version included.
    pub fn from_bytes(bytes: &[u8]) -> Option<Signature> {
        let (&version, values) = bytes.split_first()?;
        if version != VERSION || values.len() != 4 * VALUES {
            return None;
        }
        let mut minima = [0; VALUES];
        for (m, chunk) in minima.iter_mut().zip(values.chunks_exact(4)) {
            *m = u32::from_le_bytes(chunk.try_into().ok()?);
        }
        Some(Signature(minima))
    }
}

/// [`minhash`] compiled for AVX2, which takes the minimum of eight minima in one instruction;
/// the baseline x86-64 has no such instruction at all and takes five. Same values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn minhash_avx2(normalised: &str) -> Signature {
    minhash(normalised)
}

/// The minima of a normalised text's shingles. Inlined into each caller, so that it is
/// compiled for that caller's instruction set.
#[inline(always)]
pub(super) fn minhash(normalised: &str) -> Signature {
    let mut minima = [i32::MAX as u32; VALUES];
    for_each_shingle(normalised, |shingle| {
        // Value i is h1 + i·h2 (mod 2^32), the pair the two halves of one mixed hash: for a
        // fixed i a value uniform and independent across shingles, which is all MinHash needs
        // of a permutation. The order is that of i32 (any fixed order does), which the
        // vectorised loop compares in fewer instructions than u32's.
        let h = mix(shingle ^ SEED);
        let (h1, h2) = (h as u32, (h >> 32) as u32);
        let mut value = h1;
        for m in &mut minima {
            *m = ((*m as i32).min(value as i32)) as u32;
            value = value.wrapping_add(h2);
        }
    });
    Signature(minima)
}

/// The Jaccard index of two texts' sets of word 3-shingles after [`super::normalise`]; for
/// evaluations. Shingles compare by a 64-bit hash: with a few hundred shingles a text, two
/// different ones collide about once in 10^14 comparisons.
pub fn jaccard(a: &str, b: &str) -> f64 {
    shingle_set_jaccard(
        &shingle_set(&super::normalise(a)),
        &shingle_set(&super::normalise(b)),
    )
}

/// The distinct shingles of a normalised text, sorted.
pub(super) fn shingle_set(normalised: &str) -> Vec<u64> {
    let mut set = Vec::new();
    for_each_shingle(normalised, |s| set.push(s));
    set.sort_unstable();
    set.dedup();
    set
}

/// The Jaccard index of two sorted sets; two empty sets are equal.
pub(super) fn shingle_set_jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut i, mut j, mut both) = (0, 0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                both += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - both;
    if union == 0 {
        1.0
    } else {
        both as f64 / union as f64
    }
}

/// Calls `f` with the hash of each word 3-shingle of a normalised text, in order (a text of
/// fewer words: one shingle of them all; no words: none). Each word is hashed once. Inlined,
/// like [`minhash`].
#[inline(always)]
fn for_each_shingle(normalised: &str, mut f: impl FnMut(u64)) {
    let mut window = [0u64; SHINGLE];
    let mut words = 0;
    // Split as bytes: a space is one byte, and a search for a `char` costs more than a word.
    for word in normalised
        .as_bytes()
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
    {
        window.rotate_left(1);
        window[SHINGLE - 1] = word_hash(word);
        words += 1;
        if words >= SHINGLE {
            f(combine(&window));
        }
    }
    if (1..SHINGLE).contains(&words) {
        f(combine(&window[SHINGLE - words..]));
    }
}

/// The hash of a sequence of word hashes (each already mixed): order matters, and its length
/// does.
fn combine(words: &[u64]) -> u64 {
    words.iter().fold(words.len() as u64, |h, &w| {
        (h.rotate_left(23) ^ w).wrapping_mul(0x9fb2_1c65_1e98_df25)
    })
}

/// The word's bytes eight at a time, multiplied in, then mixed: stable everywhere, unlike std's
/// hasher, and one step for most words.
fn word_hash(word: &[u8]) -> u64 {
    let h = word.chunks(8).fold(word.len() as u64, |h, chunk| {
        let block = chunk
            .iter()
            .fold(0u64, |b, &byte| (b << 8) | u64::from(byte));
        (h ^ block)
            .wrapping_mul(0x9fb2_1c65_1e98_df25)
            .rotate_left(29)
    });
    mix(h)
}

/// A 64-bit finaliser (xor-shift, multiply, xor-shift): every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^= x >> 32;
    x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
    x ^ (x >> 32)
}
