//! A private three-master Redis Cluster on loopback, for tests that change its topology.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct RedisCluster {
    pub ports: Vec<u16>,
    children: Vec<Child>,
    dir: std::path::PathBuf,
}

/// A port whose cluster bus port (port + 10000) is free too.
fn cluster_port(taken: &[u16]) -> u16 {
    for _ in 0..100 {
        let port = super::free_port();
        let bus_free = port < 55_000
            && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
            && !taken.contains(&port);
        if bus_free {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!(
            "sendguard-cluster-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let mut ports = Vec::new();
        let mut children = Vec::new();
        for _ in 0..3 {
            let port = cluster_port(&ports);
            let child = Command::new("redis-server")
                .current_dir(&dir)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed");
            ports.push(port);
            children.push(child);
        }
        let cluster = RedisCluster {
            ports,
            children,
            dir,
        };
        let c = &cluster;
        for &port in &c.ports {
            let up = super::app::wait_for(Duration::from_secs(10), || async move {
                c.node_query::<String>(port, &redis::cmd("PING"))
                    .await
                    .is_ok()
            })
            .await;
            assert!(up, "cluster node {port} did not start");
        }
        let nodes: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let status = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli is installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        let ok = super::app::wait_for(Duration::from_secs(20), || cluster.all_ok()).await;
        assert!(ok, "the cluster did not reach cluster_state:ok");
        cluster
    }

    async fn all_ok(&self) -> bool {
        for port in &self.ports {
            let info: Result<String, _> = self
                .node_query(*port, redis::cmd("CLUSTER").arg("INFO"))
                .await;
            if !info.is_ok_and(|i| i.contains("cluster_state:ok")) {
                return false;
            }
        }
        true
    }

    /// `redis+cluster://` naming every master.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Runs one command on one node, bypassing cluster routing.
    pub async fn node_query<T: redis::FromRedisValue>(
        &self,
        port: u16,
        cmd: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        cmd.query_async(&mut conn).await
    }

    pub async fn node_id(&self, port: u16) -> String {
        self.node_query(port, redis::cmd("CLUSTER").arg("MYID"))
            .await
            .expect("CLUSTER MYID")
    }

    /// The port of the master that serves `slot`.
    pub async fn owner_of(&self, slot: u16) -> u16 {
        let nodes: String = self
            .node_query(self.ports[0], redis::cmd("CLUSTER").arg("NODES"))
            .await
            .expect("CLUSTER NODES");
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields
                .get(1)
                .and_then(|a| a.split(['@', ':']).nth(1))
                .and_then(|p| p.parse::<u16>().ok());
            for range in fields.iter().skip(8) {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                if let (Ok(lo), Ok(hi), Some(port)) = (lo.parse::<u16>(), hi.parse::<u16>(), port)
                    && (lo..=hi).contains(&slot)
                {
                    return port;
                }
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// Moves one slot and its keys to another master, the way `redis-cli --cluster reshard` does:
    /// IMPORTING/MIGRATING, MIGRATE in batches, then the new owner announced to every node.
    pub async fn move_slot(&self, slot: u16, to: u16) {
        let from = self.owner_of(slot).await;
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let (from_id, to_id) = (self.node_id(from).await, self.node_id(to).await);
        let setslot = |state: &str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
            cmd
        };
        let _: redis::Value = self
            .node_query(to, &setslot("IMPORTING", &from_id))
            .await
            .expect("IMPORTING");
        let _: redis::Value = self
            .node_query(from, &setslot("MIGRATING", &to_id))
            .await
            .expect("MIGRATING");
        for _ in 0..10_000 {
            let keys: Vec<String> = self
                .node_query(
                    from,
                    redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10),
                )
                .await
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            // A short pause between batches leaves requests time to meet the half-moved slot.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _: redis::Value = self
                .node_query(
                    from,
                    redis::cmd("MIGRATE")
                        .arg("127.0.0.1")
                        .arg(to)
                        .arg("")
                        .arg(0)
                        .arg(5000)
                        .arg("KEYS")
                        .arg(&keys),
                )
                .await
                .expect("MIGRATE");
        }
        for port in [to, from] {
            let _: redis::Value = self
                .node_query(port, &setslot("NODE", &to_id))
                .await
                .expect("SETSLOT NODE");
        }
        for port in &self.ports {
            if *port != to && *port != from {
                let _: redis::Value = self
                    .node_query(*port, &setslot("NODE", &to_id))
                    .await
                    .expect("SETSLOT NODE");
            }
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
