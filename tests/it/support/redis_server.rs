//! A private redis-server for tests that stop it: never the shared one.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let port = super::free_port();
        let mut server = RedisServer { port, child: None };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts it (again) on its port, empty.
    pub async fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        let url = self.url();
        let up = super::app::wait_for(Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                let Ok(client) = redis::Client::open(url.as_str()) else {
                    return false;
                };
                match client.get_multiplexed_async_connection().await {
                    Ok(mut conn) => redis::cmd("PING")
                        .query_async::<String>(&mut conn)
                        .await
                        .is_ok(),
                    Err(_) => false,
                }
            }
        })
        .await;
        assert!(up, "redis-server on port {} did not start", self.port);
    }

    /// Makes it answer no client for `ms` milliseconds, as a stalled server would.
    pub async fn pause(&self, ms: u64) {
        let mut conn = redis::Client::open(self.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("ALL")
            .query_async(&mut conn)
            .await
            .expect("pause");
    }

    /// Kills it at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
