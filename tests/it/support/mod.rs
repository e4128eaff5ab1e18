//! Helpers shared by the integration tests.

pub mod api;
pub mod app;
pub mod browser;
pub mod dashboard;
pub mod html;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_server;
pub mod reference;
pub mod rules;
pub mod serve;
pub mod smtp;
pub mod webhook_receiver;

use std::sync::atomic::{AtomicU64, Ordering};

use sendguard::limiter::{KeyPrefix, RedisSettings, RedisStore, RedisTarget};

/// The shared Redis of the test run (`scripts/test` makes sure it answers), or the cluster that
/// `scripts/test` starts for its second pass.
pub fn redis_url() -> String {
    std::env::var("SENDGUARD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub async fn redis_store() -> RedisStore {
    RedisStore::connect(&RedisSettings::new(redis_url()))
        .await
        .expect("the test Redis answers (scripts/test starts it)")
}

/// A key prefix no other test or run shares. Keys outlive their test in the shared Redis (a
/// day for daily rules) and process ids come round again within a run, so the process id and
/// a counter alone were seen to collide: a test then counted an earlier run's invites.
pub fn unique_prefix(test: &str) -> KeyPrefix {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    KeyPrefix::new(&format!(
        "sgtest-{test}-{pid}-{:08x}-{n}",
        rand::random::<u32>()
    ))
    .expect("valid prefix")
}

/// Every key under a prefix, via SCAN on the server or on every node of the cluster.
pub async fn keys_under(store: &RedisStore, prefix: &KeyPrefix) -> Vec<String> {
    let pattern = format!("{}:*", prefix.as_str());
    match RedisTarget::parse(&redis_url()).expect("test Redis URL") {
        RedisTarget::Single(_) => scan(&mut store.connection(), &pattern).await,
        RedisTarget::Cluster(nodes) => {
            let mut found = Vec::new();
            for node in nodes {
                let client = redis::Client::open(node.as_str()).expect("node URL");
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("cluster node");
                found.extend(scan(&mut conn, &pattern).await);
            }
            found
        }
    }
}

async fn scan(conn: &mut impl redis::aio::ConnectionLike, pattern: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..100_000 {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .expect("SCAN");
        found.extend(keys);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    found
}

/// Runs one command on the store's connection.
pub async fn query<T: redis::FromRedisValue>(store: &RedisStore, cmd: &redis::Cmd) -> T {
    cmd.query_async(&mut store.connection())
        .await
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
