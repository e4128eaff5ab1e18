//! One connection type for a single Redis server and for a Redis Cluster.
//!
//! `REDIS_URL` names a single server (`redis://host:port`), or a cluster either as
//! `redis+cluster://host:port,host:port,…` (`rediss+cluster://` for TLS) or as a comma-separated
//! list of node URLs. Any one reachable node is enough: the client learns the rest of the
//! topology from it and follows MOVED/ASK redirects when slots move. TLS (`rediss://`) trusts
//! the system's certificate authorities, or those of the file `SSL_CERT_FILE` names.

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::LimiterError;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// A single server or a cluster ([`RedisTarget`]).
    pub url: String,
    /// Bound on every call: a slow Redis turns into an error instead of a stuck request.
    pub timeout: Duration,
}

impl RedisSettings {
    pub fn new(url: impl Into<String>) -> Self {
        RedisSettings {
            url: url.into(),
            timeout: Duration::from_millis(500),
        }
    }
}

/// Where `REDIS_URL` points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    /// The seed nodes of a cluster, each as a `redis://` URL.
    Cluster(Vec<String>),
}

impl RedisTarget {
    pub fn parse(url: &str) -> Result<RedisTarget, LimiterError> {
        let url = url.trim();
        for (scheme, node_scheme) in [
            ("redis+cluster://", "redis://"),
            ("rediss+cluster://", "rediss://"),
        ] {
            if let Some(rest) = url.strip_prefix(scheme) {
                // Credentials, when given once before the host list, apply to every node.
                let (userinfo, hosts) = match rest.rsplit_once('@') {
                    Some((user, hosts)) => (format!("{user}@"), hosts),
                    None => (String::new(), rest),
                };
                let (hosts, path) = match hosts.split_once('/') {
                    Some((hosts, path)) => (hosts, format!("/{path}")),
                    None => (hosts, String::new()),
                };
                let nodes: Vec<String> = hosts
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(|h| format!("{node_scheme}{userinfo}{h}{path}"))
                    .collect();
                if nodes.is_empty() {
                    return Err(LimiterError::Config(format!("{scheme} names no node")));
                }
                return Ok(RedisTarget::Cluster(nodes));
            }
        }
        if url.contains(',') {
            let nodes: Vec<String> = url.split(',').map(|n| n.trim().to_owned()).collect();
            if nodes
                .iter()
                .any(|n| !n.starts_with("redis://") && !n.starts_with("rediss://"))
            {
                return Err(LimiterError::Config(
                    "a node list is comma-separated redis:// URLs".into(),
                ));
            }
            return Ok(RedisTarget::Cluster(nodes));
        }
        Ok(RedisTarget::Single(url.to_owned()))
    }
}

/// A multiplexed connection, cheap to clone; reconnects by itself.
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConnection {
    pub async fn open(settings: &RedisSettings) -> Result<RedisConnection, LimiterError> {
        match RedisTarget::parse(&settings.url)? {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(settings.timeout))
                    .set_response_timeout(Some(settings.timeout))
                    .set_number_of_retries(1);
                let conn = ConnectionManager::new_with_config(client, config).await?;
                Ok(RedisConnection::Single(conn))
            }
            RedisTarget::Cluster(nodes) => {
                // Retries cover redirects while a slot moves; each try is bounded by the timeout.
                let client = ClusterClient::builder(nodes)
                    .connection_timeout(settings.timeout)
                    .response_timeout(settings.timeout)
                    .retries(3)
                    .build()?;
                Ok(RedisConnection::Cluster(
                    client.get_async_connection().await?,
                ))
            }
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConnection::Cluster(_))
    }

    /// Sends independent commands and answers one result per command, in order. A single server
    /// gets them as one pipeline; a cluster gets them concurrently, since the keys of different
    /// subjects live in different slots and a pipeline may only touch one.
    pub async fn send_all(&self, cmds: Vec<Cmd>) -> RedisResult<Vec<RedisResult<Value>>> {
        match self {
            RedisConnection::Single(conn) => {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query_async(&mut conn.clone()).await
            }
            RedisConnection::Cluster(conn) => Ok(join_all(cmds.into_iter().map(|cmd| {
                let mut conn = conn.clone();
                async move { cmd.query_async::<Value>(&mut conn).await }
            }))
            .await),
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Single(c) => c.req_packed_command(cmd),
            RedisConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Single(c) => c.get_db(),
            RedisConnection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RedisTarget;

    #[test]
    fn names_of_a_cluster() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001").unwrap(),
            RedisTarget::Cluster(vec![
                "redis://:pw@10.0.0.1:7000".into(),
                "redis://:pw@10.0.0.2:7001".into()
            ])
        );
        assert_eq!(
            RedisTarget::parse("redis://a:1, redis://b:2").unwrap(),
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        assert_eq!(
            RedisTarget::parse("redis://127.0.0.1:6379/2").unwrap(),
            RedisTarget::Single("redis://127.0.0.1:6379/2".into())
        );
        assert!(RedisTarget::parse("redis+cluster://").is_err());
        assert!(RedisTarget::parse("redis://a:1,b:2").is_err());
    }
}
