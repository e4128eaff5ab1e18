//! What an invite is made of for the rules beyond its volume (DESIGN.md §3c): links in its
//! text and the members distinct counts count. Pure functions: the rules and the invite path
//! use them, and they use nothing of the service.

pub mod bench;
pub mod links;

use sha2::{Digest, Sha256};

/// What a distinct count counts for a recipient address or domain: 4 bytes of its SHA-256,
/// the same on every instance and release. Two of a key's members collide in about one key in
/// 870,000 at 100 members (the default rule's limit), one in 540 at 4,001 (the most a key
/// keeps), and a collision only undercounts by one: a sender cannot choose its recipients'
/// addresses so that they collide, since each must reach a different person.
pub fn member(value: &str) -> u32 {
    let digest = Sha256::digest(value.as_bytes());
    let mut first = [0u8; 4];
    first.copy_from_slice(&digest[..4]);
    u32::from_le_bytes(first)
}

/// Whether any of an invite's texts carries a link.
pub fn any_link<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    texts.into_iter().flatten().any(links::has_link)
}
