//! How an instance reaches Postgres and Redis: encrypted when their URLs ask for it, as managed
//! databases and caches require.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::api::Api;
use crate::support::app::{Stage, admin, api_key, migrated, wait_for};
use crate::support::serve::ServeProcess;
use crate::support::{free_port, unique_prefix};

/// With `sslmode=require` in `DATABASE_URL`, every connection of the instance (requests'
/// reads, the writer's batches, the outbox) is encrypted, and an invite goes through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_requires_tls_reaches_postgres_only_over_tls() {
    let mut admin = admin().await;
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(&mut admin)
        .await
        .expect("ssl setting");
    assert_eq!(
        ssl, "on",
        "this test needs a Postgres server with ssl = on (Debian's default)"
    );
    let stage = Stage::start_with("tls", &[], |cfg| {
        cfg.database.database_url.push_str("?sslmode=require");
    })
    .await;
    let id = Api::new(stage.base(), api_key(&stage.pool).await)
        .accepted("u_tls", "r@example.com")
        .await;
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM invites WHERE id::text = $1")
        .bind(&id)
        .fetch_one(&stage.pool)
        .await
        .expect("count");
    assert_eq!(recorded, 1);

    let connections: Vec<(String, bool)> = sqlx::query_as(
        "SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
         WHERE a.datname = $1 AND a.application_name LIKE 'sendguard%'",
    )
    .bind(&stage.db.name)
    .fetch_all(&mut admin)
    .await
    .expect("the instance's connections");
    for part in ["sendguard", "sendguard-batches", "sendguard-outbox"] {
        assert!(
            connections.iter().any(|(name, _)| name == part),
            "no {part} connection among {connections:?}"
        );
    }
    assert!(
        connections.iter().all(|(_, ssl)| *ssl),
        "unencrypted connections: {connections:?}"
    );
}

/// A private redis-server that speaks TLS only, with a certificate for 127.0.0.1 signed by a CA
/// made for it (`openssl`, in a folder of its own, removed on drop).
struct TlsRedis {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl TlsRedis {
    async fn start() -> TlsRedis {
        let dir = std::env::temp_dir().join(format!(
            "sendguard-tls-redis-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("certificate folder");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &dir,
            &["req", "-x509"],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=sendguard test CA",
                "-days",
                "2",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign",
            ],
        );
        openssl(
            &dir,
            &["req"],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        );
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("extensions");
        openssl(
            &dir,
            &["x509", "-req"],
            &[],
            &[
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        let port = free_port();
        let child = Command::new("redis-server")
            .current_dir(&dir)
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .args([
                "--tls-cert-file",
                "server.pem",
                "--tls-key-file",
                "server.key",
            ])
            .args(["--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "no"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let redis = TlsRedis { port, dir, child };
        let up = wait_for(Duration::from_secs(10), || async {
            redis.cli(&["PING"]).is_some_and(|out| out.trim() == "PONG")
        })
        .await;
        assert!(up, "redis-server with TLS on port {port} did not start");
        redis
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// `redis-cli` over TLS, trusting the test CA: its output, or `None` when it failed.
    fn cli(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert"])
            .arg(self.ca())
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `openssl` in `dir` with its arguments in three parts.
fn openssl(dir: &Path, command: &[&str], key: &[&str], rest: &[&str]) {
    let status = Command::new("openssl")
        .current_dir(dir)
        .args(command)
        .args(key)
        .args(rest)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl is installed");
    assert!(status.success(), "openssl {command:?} failed");
}

/// With `rediss://` in `REDIS_URL`, an instance counts its rules in a Redis that speaks only
/// TLS, trusting its CA through `SSL_CERT_FILE` as it would a private CA: the invite is decided
/// by the rules (queued, not deferred for want of Redis) and its counters are in that Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_counts_in_a_redis_reached_over_tls() {
    let redis = TlsRedis::start().await;
    let (db, pool) = migrated("tlsredis", &[]).await;
    let prefix = unique_prefix("tls");
    let serve = ServeProcess::start(
        &db.url,
        prefix.as_str(),
        &[
            ("REDIS_URL", format!("rediss://127.0.0.1:{}", redis.port)),
            ("SSL_CERT_FILE", redis.ca().display().to_string()),
        ],
    )
    .await;
    let id = Api::new(serve.base.clone(), api_key(&pool).await)
        .accepted("u_tls", "r@example.com")
        .await;
    let status: String = sqlx::query_scalar("SELECT status FROM invites WHERE id::text = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .expect("the invite");
    assert_ne!(status, "deferred", "the rules were not counted");
    let keys = redis
        .cli(&["--scan", "--pattern", &format!("{}:*", prefix.as_str())])
        .expect("scan");
    assert!(
        keys.lines()
            .any(|k| k.contains("{sender:") && k.contains(":u_tls}")),
        "no counter of the sender in the TLS Redis: {keys:?}"
    );
}
