//! Near-duplicate groups of invite texts, the same on every instance: a text joins the group
//! of an earlier text it matches (a candidate found by a shared MinHash band, confirmed against
//! the group's own signature), or starts a group of its own. Senders are then counted on one
//! key per group, not per band.
//!
//! In Redis, one script call per text (`src/limiter/lua/group.lua`) keeps the lookup and the
//! claim atomic: two instances seeing the first two copies of a text at once put them in one
//! group. On a single server the look-up rides in the limiter's call that counts the invite's
//! rules ([`Groups::fold`]): one round trip an invite instead of two. Bands and signatures live
//! in one hash per generation as long as the longest fingerprint rule's window, read for this
//! generation and the last: a group lives while its texts keep coming. The generations' hashes
//! share one hash tag, so on a cluster they sit on one node.

use std::sync::{Arc, Mutex};

use redis::Script;

use super::fingerprint::{AGREEING, BAND_BYTES, Index, Signature};
use crate::limiter::{
    GROUP_SCRIPT, GroupLookup, KeyPrefix, Limiter, LimiterError, RedisConnection, group_id,
    group_id_of, now_ms,
};

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
                Store::Redis(redis.connection(), Arc::new(Script::new(GROUP_SCRIPT)))
            }
            Limiter::Memory(_) => Store::Memory(Arc::new(Mutex::new((Index::new(), 0)))),
        };
        Groups {
            store,
            prefix: keys.as_str().to_owned(),
        }
    }

    /// Whether a text's look-up rides in the limiter's call ([`Groups::fold`]): on a single
    /// Redis server, where one script may touch the keys of any subject. A cluster keeps the
    /// group store on one node and each subject's counts on its own, so there it is a call of
    /// its own ([`Groups::group_of`]).
    pub fn folds(&self) -> bool {
        matches!(&self.store, Store::Redis(conn, _) if !conn.is_cluster())
    }

    /// The look-up of a text of `signature` as arguments for the limiter's call, which answers
    /// the group's id ([`group_id`] names it). Until then, [`GroupLookup::fresh`] stands for it.
    pub fn fold(&self, signature: &Signature, window_secs: u64) -> GroupLookup {
        let window = window_secs.max(1);
        let current = generation(window);
        let fresh: [u8; 8] = rand::random();
        let mut args = vec![
            signature.compact_bytes(),
            fresh.to_vec(),
            expires_at(current, window).to_string().into_bytes(),
            AGREEING.to_string().into_bytes(),
        ];
        args.extend(
            signature
                .bands()
                .map(|band| band.to_le_bytes()[..BAND_BYTES].to_vec()),
        );
        GroupLookup {
            stores: [
                store_key(&self.prefix, current),
                store_key(&self.prefix, current.saturating_sub(1)),
            ],
            args,
            fresh,
        }
    }

    /// The group of a text of `signature`, its groups kept for `window_secs` (the longest
    /// fingerprint rule's window), looked up on its own.
    pub async fn group_of(
        &self,
        signature: &Signature,
        window_secs: u64,
    ) -> Result<String, LimiterError> {
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
                let id = group_id(rand::random());
                index.insert(signature.clone(), id.clone());
                *texts += 1;
                Ok(id)
            }
            Store::Redis(conn, script) => {
                let lookup = self.fold(signature, window_secs);
                let mut call = script.key(&lookup.stores[0]);
                call.key(&lookup.stores[1]);
                for arg in &lookup.args {
                    call.arg(arg.as_slice());
                }
                let id: Vec<u8> = call.invoke_async(&mut conn.clone()).await?;
                group_id_of(&id)
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

/// The group store's hash of a generation: its bands' groups and its groups' signatures. Its
/// name carries the store's layout (`v2`: 10 bands of 6 bytes, a byte a value), so an upgraded
/// instance never reads a hash of the form before: a campaign under way at the upgrade is
/// counted anew from it.
pub fn store_key(prefix: &str, generation: u64) -> String {
    format!("{prefix}:{{campaign-groups}}:store-v2:{generation}")
}
