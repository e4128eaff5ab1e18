//! `sendguard bench groups`: the near-duplicate group script (`src/limiter/lua/group.lua`) next
//! to a plain `PING` from the same clients in the same run, for four kinds of text; the time
//! Redis spent in the script per call (`INFO commandstats`: on a server with other traffic,
//! theirs counts too); and the Redis bytes each text leaves in the group store (its bands and,
//! when it starts a group, its signature).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::fingerprint::{Signature, normalise};
use super::groups::{Groups, generation, store_key};
use crate::limiter::bench::{
    CommandStat, ROUND, cleanup, command_stats, join_clients, key_bytes, pings,
};
use crate::limiter::{KeyPrefix, Limiter, LimiterError, RedisSettings, RedisStore, RedisTarget};

/// The window of the default `campaign-text` rule: the group store's generation.
const WINDOW_SECS: u64 = 86_400;
/// Texts prepared for each kind that changes from call to call; a run stops early once they are
/// used up (at 40,000 calls a second, after 5 s).
const TEXTS: usize = 200_000;
/// Words of every generated text.
const WORDS: usize = 30;

#[derive(Debug, Clone)]
pub struct GroupsBenchRow {
    pub texts: &'static str,
    pub clients: usize,
    pub calls: u64,
    pub calls_per_sec: f64,
    pub ping_per_sec: f64,
    /// Microseconds Redis spent in scripts per call.
    pub redis_us_per_call: f64,
    /// Bytes of the generation's hash over the texts that went through it.
    pub bytes_per_text: u64,
}

impl GroupsBenchRow {
    pub fn ratio_to_ping(&self) -> f64 {
        self.calls_per_sec / self.ping_per_sec
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// One text, over and over: a campaign's payload sent as it is.
    Same,
    /// One text with one word changed at a time: a campaign's payload varied.
    Near,
    /// Every text its own, of random words: as unlike each other as texts get.
    Distinct,
    /// Short notes written from one template with a small vocabulary, in the slots and
    /// vocabulary sizes of `benches/invites.lua`'s notes: each its own, but sharing most of
    /// their words, so that a text's bands meet other texts' groups, whose signatures the
    /// script then compares and rejects.
    Notes,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Same => "same text",
            Kind::Near => "near-duplicates",
            Kind::Distinct => "distinct texts",
            Kind::Notes => "templated notes",
        }
    }
}

pub async fn run(
    redis: &RedisSettings,
    clients: usize,
    duration: Duration,
) -> Result<Vec<GroupsBenchRow>, LimiterError> {
    // PING and MEMORY USAGE each reach one node.
    if matches!(RedisTarget::parse(&redis.url)?, RedisTarget::Cluster(_)) {
        return Err(LimiterError::Config(
            "bench groups measures one Redis server, not a cluster".into(),
        ));
    }
    let mut stores = Vec::with_capacity(clients);
    for _ in 0..clients {
        stores.push(RedisStore::connect(redis).await?);
    }
    let mut rows = Vec::new();
    for kind in [Kind::Same, Kind::Near, Kind::Distinct, Kind::Notes] {
        // A prefix of its own for each kind: texts of one kind never meet another kind's groups.
        let prefix = KeyPrefix::new(&format!("sgbench{}g{}", std::process::id(), rows.len()))
            .map_err(LimiterError::InvalidQuota)?;
        let texts = Arc::new(signatures(kind));
        let groups: Vec<Groups> = stores
            .iter()
            .map(|s| Groups::new(&Limiter::Redis(s.clone()), &prefix))
            .collect();
        let next = Arc::new(AtomicUsize::new(0));
        let rounds = (duration.as_secs_f64() / ROUND.as_secs_f64())
            .ceil()
            .max(1.0) as u32;
        let span = duration / rounds;
        let (mut ping, mut calls, mut busy) = (0, 0, Duration::ZERO);
        let before = script_time(&stores[0]).await?;
        for _ in 0..rounds {
            ping += pings(&stores, span).await?;
            // Timed as they ran: a kind whose texts run out stops early.
            let began = Instant::now();
            calls += group_calls(&groups, &texts, &next, span).await?;
            busy += began.elapsed();
        }
        let after = script_time(&stores[0]).await?;
        let bytes = store_bytes(&stores[0], &prefix).await?;
        cleanup(&stores[0], &prefix).await?;
        rows.push(GroupsBenchRow {
            texts: kind.name(),
            clients,
            calls,
            calls_per_sec: calls as f64 / busy.as_secs_f64().max(f64::MIN_POSITIVE),
            ping_per_sec: ping as f64 / duration.as_secs_f64(),
            redis_us_per_call: after.usec.saturating_sub(before.usec) as f64
                / after.calls.saturating_sub(before.calls).max(1) as f64,
            bytes_per_text: bytes / calls.max(1),
        });
    }
    Ok(rows)
}

/// Calls completed in `span` by one task per client, each taking the next text (the same one
/// throughout when there is only one).
async fn group_calls(
    groups: &[Groups],
    texts: &Arc<Vec<Signature>>,
    next: &Arc<AtomicUsize>,
    span: Duration,
) -> Result<u64, LimiterError> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + span;
    let mut tasks = Vec::with_capacity(groups.len());
    for g in groups {
        let (g, texts, next, done) = (g.clone(), texts.clone(), next.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let n = if texts.len() == 1 {
                    0
                } else {
                    next.fetch_add(1, Ordering::Relaxed)
                };
                let Some(text) = texts.get(n) else { break };
                g.group_of(text, WINDOW_SECS).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), LimiterError>(())
        }));
    }
    join_clients(tasks).await?;
    Ok(done.load(Ordering::Relaxed))
}

/// The signatures a kind sends, made before any timing starts.
fn signatures(kind: Kind) -> Vec<Signature> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = move || {
        // xorshift64: the same texts in every run.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let base: Vec<String> = (0..WORDS).map(|_| word(random())).collect();
    let sign = |words: &[String]| Signature::of(&normalise(&words.join(" ")));
    match kind {
        Kind::Same => vec![sign(&base)],
        Kind::Near => (0..TEXTS)
            .map(|n| {
                let mut words = base.clone();
                words[n % WORDS] = word(random());
                sign(&words)
            })
            .collect(),
        Kind::Distinct => (0..TEXTS)
            .map(|_| sign(&(0..WORDS).map(|_| word(random())).collect::<Vec<_>>()))
            .collect(),
        Kind::Notes => (0..TEXTS)
            .map(|_| {
                // The slots and vocabulary sizes of the bench's personal notes: 6 openers, 9
                // verbs, 40 words, 7 days.
                let mut pick = |n: u64, offset: u64| word(random() % n + offset);
                let text = format!(
                    "{} can you {} the {} and the {} before {}? I also added {} {}.",
                    pick(6, 100),
                    pick(9, 200),
                    pick(40, 0),
                    pick(40, 0),
                    pick(7, 300),
                    pick(40, 0),
                    pick(40, 0)
                );
                Signature::of(&normalise(&text))
            })
            .collect(),
    }
}

/// A made-up word of three syllables (digits would be masked by the normalisation): 4,096 of
/// them.
fn word(n: u64) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "we", "ya", "zo", "be", "di", "fa",
        "go",
    ];
    (0..3)
        .map(|i| SYLLABLES[(n >> (i * 4)) as usize % SYLLABLES.len()])
        .collect()
}

/// `MEMORY USAGE` of the group store's hashes of this generation and the last.
async fn store_bytes(store: &RedisStore, prefix: &KeyPrefix) -> Result<u64, LimiterError> {
    let generation = generation(WINDOW_SECS);
    let mut bytes = 0;
    for g in [generation, generation.saturating_sub(1)] {
        bytes += key_bytes(store, &store_key(prefix.as_str(), g)).await?;
    }
    Ok(bytes)
}

/// The script calls Redis has run so far and the microseconds it spent in them.
async fn script_time(store: &RedisStore) -> Result<CommandStat, LimiterError> {
    let stats = command_stats(&store.connection()).await?;
    Ok(stats.get("evalsha").copied().unwrap_or_default())
}
