//! What an invite is made of for the rules beyond its volume (DESIGN.md §3c): links in its
//! text and the members distinct counts count. Pure functions: the rules and the invite path
//! use them, and they use nothing of the service.

pub mod bench;
pub mod links;

use sha2::{Digest, Sha256};

/// What a distinct count counts for a recipient address or domain: 8 bytes of its SHA-256,
/// the same on every instance and release. Collisions among the few hundred members of one
/// key are vanishingly rare, and could only undercount.
pub fn member(value: &str) -> u64 {
    let digest = Sha256::digest(value.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// Whether any of an invite's texts carries a link.
pub fn any_link<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    texts.into_iter().flatten().any(links::has_link)
}
