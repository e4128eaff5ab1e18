//! Near-duplicate groups of invite texts, the same on every instance: a text joins the group
//! of an earlier text it matches (a candidate found by a shared MinHash band, confirmed against
//! the group's own signature), or starts a group of its own. Senders are then counted on one
//! key per group, not per band.
//!
//! In Redis, one script call per text (`lua/group.lua`) keeps the lookup and the claim atomic:
//! two instances seeing the first two copies of a text at once put them in one group. Bands and
//! signatures live in one hash per generation as long as the longest fingerprint rule's window,
//! read for this generation and the last: a group lives while its texts keep coming. The
//! generations' hashes share one hash tag, so on a cluster they sit on one node.

use std::sync::{Arc, Mutex};

use redis::Script;

use super::fingerprint::{AGREEING, BAND_BYTES, Index, Signature};
use crate::limiter::{KeyPrefix, Limiter, LimiterError, RedisConnection, now_ms};

/// The group script (`lua/group.lua`).
pub const SCRIPT: &str = include_str!("lua/group.lua");

/// Texts an in-process store keeps before it starts again (one instance, no Redis).
const MEMORY_TEXTS: usize = 100_000;
/// How far past the end of its last generation read a generation's hash lives: instances take
/// the generation from their own clocks, and Redis expires keys by its own.
const CLOCK_SLACK_SECS: u64 = 60;

#[derive(Clone)]
pub struct Groups {
    store: Store,
    prefix: String,
}

#[derive(Clone)]
enum Store {
    Redis(RedisConnection, Arc<Script>),
    /// The index and how many texts it holds.
    Memory(Arc<Mutex<(Index<String>, usize)>>),
}

impl Groups {
    pub fn new(limiter: &Limiter, keys: &KeyPrefix) -> Groups {
        let store = match limiter {
            Limiter::Redis(redis) => {
                Store::Redis(redis.connection(), Arc::new(Script::new(SCRIPT)))
            }
            Limiter::Memory(_) => Store::Memory(Arc::new(Mutex::new((Index::new(), 0)))),
        };
        Groups {
            store,
            prefix: keys.as_str().to_owned(),
        }
    }

    /// The group of a text of `signature`, its groups kept for `window_secs` (the longest
    /// fingerprint rule's window).
    pub async fn group_of(
        &self,
        signature: &Signature,
        window_secs: u64,
    ) -> Result<String, LimiterError> {
        let fresh = rand::random::<u64>();
        match &self.store {
            Store::Memory(index) => {
                let mut guard = index.lock().unwrap_or_else(|e| e.into_inner());
                let (index, texts) = &mut *guard;
                if let Some(id) = index.find(signature) {
                    return Ok(id.clone());
                }
                if *texts >= MEMORY_TEXTS {
                    *index = Index::new();
                    *texts = 0;
                }
                let id = group_id(fresh);
                index.insert(signature.clone(), id.clone());
                *texts += 1;
                Ok(id)
            }
            Store::Redis(conn, script) => {
                let window = window_secs.max(1);
                let current = generation(window);
                let mut call = script.key(store_key(&self.prefix, current));
                call.key(store_key(&self.prefix, current.saturating_sub(1)))
                    .arg(signature.compact_bytes())
                    .arg(&fresh.to_be_bytes()[..])
                    .arg(expires_at(current, window))
                    .arg(AGREEING);
                for band in signature.bands() {
                    call.arg(&band.to_le_bytes()[..BAND_BYTES]);
                }
                let id: Vec<u8> = call.invoke_async(&mut conn.clone()).await?;
                let id = <[u8; 8]>::try_from(id.as_slice())
                    .map_err(|_| LimiterError::BadReply(format!("a group id of {id:?}")))?;
                Ok(group_id(u64::from_be_bytes(id)))
            }
        }
    }
}

/// The generation of the group store at this time, for groups kept `window_secs`.
pub fn generation(window_secs: u64) -> u64 {
    now_ms() / 1000 / window_secs.max(1)
}

/// When the hash of generation `g` expires (Unix seconds): once the generation after it, which
/// reads it as the last one, is over. Every write sets the same time, so a generation's texts
/// live one to two windows, however late in it they came.
fn expires_at(g: u64, window_secs: u64) -> u64 {
    (g + 2) * window_secs + CLOCK_SLACK_SECS
}

/// A group's id as counts and campaigns name it: 16 hexadecimal digits.
fn group_id(id: u64) -> String {
    format!("{id:016x}")
}

/// The group store's hash of a generation: its bands' groups and its groups' signatures. Its
/// name carries the store's layout (`v2`: 10 bands of 6 bytes, a byte a value), so an upgraded
/// instance never reads a hash of the form before: a campaign under way at the upgrade is
/// counted anew from it.
pub fn store_key(prefix: &str, generation: u64) -> String {
    format!("{prefix}:{{campaign-groups}}:store-v2:{generation}")
}
