//! The `sendguard serve` binary as its own process, on a free port, ready to answer.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct ServeProcess {
    pub child: Child,
    pub base: String,
}

impl ServeProcess {
    /// Starts `sendguard serve` on `database_url` with the test Redis under `prefix`, plus `env`,
    /// and waits until /readyz answers 200.
    pub async fn start(database_url: &str, prefix: &str, env: &[(&str, String)]) -> ServeProcess {
        Self::start_with(database_url, prefix, env, &[], Stdio::null()).await
    }

    /// As `start`, with `args` after `serve` and its log lines (stdout) written to `log`.
    pub async fn start_with(
        database_url: &str,
        prefix: &str,
        env: &[(&str, String)],
        args: &[&str],
        log: Stdio,
    ) -> ServeProcess {
        let port = super::free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sendguard"));
        command
            .arg("serve")
            .args(args)
            .env("DATABASE_URL", database_url)
            .env("REDIS_URL", super::redis_url())
            .env("SENDGUARD_KEY_PREFIX", prefix)
            .env("SENDGUARD_LISTEN", format!("127.0.0.1:{port}"))
            .env("SENDGUARD_METRICS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(log)
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("spawn sendguard serve");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let up = super::app::wait_for(Duration::from_secs(30), || async {
            http.get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        assert!(up, "sendguard serve on port {port} did not become ready");
        ServeProcess { child, base }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
