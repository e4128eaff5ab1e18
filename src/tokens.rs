//! Random tokens handed out (API keys, session and setup tokens) and the hashes kept of them:
//! only a token's hash is stored, so the database alone gives no one a working token.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// 32 random bytes as 64 lower-case hexadecimal digits.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The hash of a token kept in place of the token.
pub fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}
