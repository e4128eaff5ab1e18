//! What an invite is made of for the rules beyond its volume (docs/DESIGN.md §3c): links in its
//! text and the members distinct counts count. Pure functions: the rules and the invite path
//! use them, and they use nothing of the service.

pub mod bench;
pub mod links;

use std::sync::LazyLock;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The key of the hashes a distinct count counts: a recipient address or domain is counted as
/// 4 bytes of its HMAC-SHA-256 under the deployment's secret, the same on every instance that
/// shares it. Keyed, because a public hash cut to 4 bytes can be searched offline: a list of a
/// million addresses holds about a hundred pairs that collide, each of which would count once,
/// and enough of them would double a sender's limit. Without the key no one can tell which
/// addresses collide; by chance, two of a key's members do in about one key in 870,000 at 100
/// members (the default rule's limit), and that undercounts by one.
#[derive(Clone)]
pub struct MemberKey(Hmac<Sha256>);

impl MemberKey {
    pub fn new(secret: &[u8]) -> MemberKey {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        // Apart from every other use of the secret (the links' tokens).
        mac.update(b"member:");
        MemberKey(mac)
    }

    /// What a distinct count counts for `value`.
    pub fn member(&self, value: &str) -> u32 {
        let mut mac = self.0.clone();
        mac.update(value.as_bytes());
        let digest = mac.finalize().into_bytes();
        u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
    }
}

/// A key of this process's own, for counts that only it compares (backtests, simulations).
pub fn offline_members() -> &'static MemberKey {
    static KEY: LazyLock<MemberKey> = LazyLock::new(|| MemberKey::new(&rand::random::<[u8; 32]>()));
    &KEY
}

/// Whether any of an invite's texts carries a link.
pub fn any_link<'a>(texts: impl IntoIterator<Item = Option<&'a str>>) -> bool {
    texts.into_iter().flatten().any(links::has_link)
}
