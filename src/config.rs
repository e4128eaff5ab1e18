//! Typed configuration of `serve`: every setting from a flag or its environment variable.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use ipnet::IpNet;

/// What the API does when Redis cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedisPolicy {
    /// Record the invite as deferred and answer 200; check it against the rules, with its own
    /// timestamp, once Redis answers again. Nothing is sent unchecked, nothing is lost.
    Defer,
    /// Send without counting.
    Open,
    /// Answer 503 with Retry-After.
    Closed,
}

#[derive(Debug, Clone, Args)]
pub struct Database {
    /// PostgreSQL; `serve` and `migrate` create the database when it is missing, other
    /// commands stop with an error.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/sendguard"
    )]
    pub database_url: String,
}

/// The service's secret key: it signs the unsubscribe and report links of emails and seals the
/// webhook secrets kept in Postgres (docs/SECURITY.md).
#[derive(Clone, Default, Args)]
pub struct SecretKeys {
    /// The key (at least 32 characters), the same on every instance; unset: a key generated at
    /// the first migration and kept in Postgres. An argument is visible to every local user
    /// (/proc): prefer the environment or `--secret-key-file`.
    #[arg(long, env = "SENDGUARD_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,

    /// A file holding the key (its contents trimmed), instead of `SENDGUARD_SECRET_KEY`.
    #[arg(long, env = "SENDGUARD_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,

    /// The key links were signed with before `SENDGUARD_SECRET_KEY` changed: links already in
    /// inboxes still verify with it, and webhook secrets sealed with it still open. Unset while
    /// a key is configured: the key kept in Postgres is the previous one.
    #[arg(long, env = "SENDGUARD_PREVIOUS_SECRET_KEY", hide_env_values = true)]
    pub previous_secret_key: Option<String>,
}

/// Says whether a key is set, never the key.
impl std::fmt::Debug for SecretKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |key: &Option<String>| key.as_ref().map(|_| "<set>");
        f.debug_struct("SecretKeys")
            .field("secret_key", &set(&self.secret_key))
            .field("secret_key_file", &self.secret_key_file)
            .field("previous_secret_key", &set(&self.previous_secret_key))
            .finish()
    }
}

/// Flags whose value a command line shows to every local user (in /proc/PID/cmdline).
const SECRET_FLAGS: [&str; 2] = ["--secret-key", "--previous-secret-key"];

impl SecretKeys {
    /// The configured key: `--secret-key`, else the trimmed contents of `--secret-key-file`;
    /// both given is an error, as it is unclear which one is meant.
    pub fn current(&self) -> Result<Option<String>, String> {
        let given = self.secret_key.as_deref().filter(|k| !k.is_empty());
        match (given, &self.secret_key_file) {
            (Some(_), Some(_)) => Err(
                "SENDGUARD_SECRET_KEY and SENDGUARD_SECRET_KEY_FILE are both set; set one".into(),
            ),
            (key, None) => Ok(key.map(str::to_owned)),
            (None, Some(path)) => {
                let named = |e: &dyn std::fmt::Display| {
                    format!("SENDGUARD_SECRET_KEY_FILE {}: {e}", path.display())
                };
                let key = std::fs::read_to_string(path).map_err(|e| named(&e))?;
                // An empty file would silently fall back to the key kept in Postgres.
                match key.trim() {
                    "" => Err(named(&"the file is empty")),
                    key => Ok(Some(key.to_owned())),
                }
            }
        }
    }
}

/// The secret-key flags among `args` (a process's arguments): each is worth a warning.
pub fn secret_flags_in<I, S>(args: I) -> Vec<&'static str>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let args: Vec<S> = args.into_iter().collect();
    SECRET_FLAGS
        .into_iter()
        .filter(|flag| {
            args.iter().any(|arg| {
                let arg = arg.as_ref().to_string_lossy();
                arg == *flag || arg.strip_prefix(flag).is_some_and(|r| r.starts_with('='))
            })
        })
        .collect()
}

#[derive(Debug, Clone, Args)]
pub struct Config {
    #[command(flatten)]
    pub database: Database,

    /// Redis for the counters (`memory://` keeps them in this process: one instance only).
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Prefix of every Redis key, so deployments sharing a Redis do not collide.
    #[arg(long, env = "SENDGUARD_KEY_PREFIX", default_value = "sg")]
    pub key_prefix: String,

    /// What to do with an invite when Redis does not answer.
    #[arg(long, env = "SENDGUARD_ON_REDIS_ERROR", value_enum, default_value_t = RedisPolicy::Defer)]
    pub on_redis_error: RedisPolicy,

    /// Bound on every Redis call, in milliseconds.
    #[arg(long, env = "SENDGUARD_REDIS_TIMEOUT_MS", default_value_t = 500)]
    pub redis_timeout_ms: u64,

    /// How often each instance sends its count of `global` rules to Redis, in milliseconds;
    /// 0 counts every invite in Redis (exact, but one hot key). See docs/SCALING.md.
    #[arg(long, env = "SENDGUARD_GLOBAL_FLUSH_MS", default_value_t = 200)]
    pub global_flush_ms: u64,

    #[arg(long, env = "SENDGUARD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Where `/metrics` is served; never on the public listener, whose answers must tell a
    /// sender nothing about counts.
    #[arg(
        long,
        env = "SENDGUARD_METRICS_LISTEN",
        default_value = "127.0.0.1:9464"
    )]
    pub metrics_listen: SocketAddr,

    /// Proxies (addresses or CIDR blocks, comma-separated) whose `X-Forwarded-For` names the
    /// client; from anyone else the header is ignored.
    #[arg(long, env = "SENDGUARD_TRUSTED_PROXIES", value_delimiter = ',', value_parser = network)]
    pub trusted_proxies: Vec<IpNet>,

    /// Connections one client address may hold open at once (IPv6 by /64); trusted proxies
    /// are exempt. 0: no limit.
    #[arg(
        long,
        env = "SENDGUARD_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 256
    )]
    pub max_connections_per_client: usize,

    /// How long a client may take to send a request's headers, and an invite's body, in
    /// milliseconds: a slow client cannot hold a connection forever.
    #[arg(long, env = "SENDGUARD_READ_TIMEOUT_MS", default_value_t = 10_000)]
    pub read_timeout_ms: u64,

    /// SMTP server, e.g. smtp://127.0.0.1:2525 or smtps://user:pass@mail.example.com; unset
    /// writes each message as an .eml file into the mail directory.
    #[arg(long, env = "SENDGUARD_SMTP_URL")]
    pub smtp_url: Option<String>,

    /// Sends to the SMTP server at once, at most, and the connections kept open between them:
    /// a round's other sends wait for one instead of opening their own.
    #[arg(long, env = "SENDGUARD_SMTP_CONNECTIONS", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub smtp_connections: u32,

    #[arg(long, env = "SENDGUARD_MAIL_DIR", default_value = "./mail-out")]
    pub mail_dir: PathBuf,

    #[arg(
        long,
        env = "SENDGUARD_MAIL_FROM",
        default_value = "sendguard <no-reply@localhost>"
    )]
    pub mail_from: String,

    /// Used in the links of emails and the first admin's link; unset: `http://` and the
    /// listen address, an unspecified address (0.0.0.0, ::) written as 127.0.0.1.
    #[arg(
        long,
        env = "SENDGUARD_PUBLIC_URL",
        default_value = "",
        hide_default_value = true
    )]
    pub public_url: String,

    #[command(flatten)]
    pub keys: SecretKeys,

    /// Allow webhook URLs that resolve to private addresses, and http (internal receivers).
    #[arg(long, env = "SENDGUARD_WEBHOOK_ALLOW_PRIVATE", default_value_t = false)]
    pub webhook_allow_private: bool,

    /// Days a sender counts as new for `new_senders_only` rules (age from the invite's
    /// `sender_created_at`, else from when sendguard first saw the sender).
    #[arg(long, env = "SENDGUARD_NEW_SENDER_DAYS", default_value_t = 7,
          value_parser = clap::value_parser!(i64).range(0..=3650))]
    pub new_sender_days: i64,

    /// Seconds a queued invite of a sender who is not trusted waits before it is sent, so that
    /// a campaign detected meanwhile holds it (docs/DESIGN.md §3d). 0 sends at once.
    #[arg(long, env = "SENDGUARD_SETTLE_SECS", default_value_t = 0)]
    pub settle_secs: u64,

    /// Confirm the ban of a repeat offender (banned again within 30 days of a lift) without
    /// waiting for review.
    #[arg(long, env = "SENDGUARD_REPEAT_AUTO_CONFIRM", default_value_t = false)]
    pub repeat_auto_confirm: bool,

    /// The default terms of confirmed bans by the sender's strikes in the last 90 days,
    /// comma-separated, each `1d`, `7d`, `30d` or `permanent`: the first strike takes the
    /// first term, every strike past the list the last.
    #[arg(long, env = "SENDGUARD_BAN_LADDER", default_value = "7d,30d,permanent")]
    pub ban_ladder: String,

    /// Held invites stored per sender; beyond this they are counted, not stored.
    #[arg(long, env = "SENDGUARD_HELD_CAP", default_value_t = 1000)]
    pub held_cap: i64,

    /// Batches of invites written at once (group commit): fewer make larger batches and less
    /// Postgres work per invite, more overlap one batch's commit with the next.
    #[arg(long, env = "SENDGUARD_DB_WRITERS", default_value_t = 1)]
    pub db_writers: usize,

    /// Delivery attempts before an invite is marked failed. With the default base, sixteen
    /// attempts span about 2.5 to 5 hours (the wait doubles up to an hour): a mail server's
    /// outage, or a relay set-up being fixed, fails no invite in that time.
    #[arg(long, env = "SENDGUARD_MAIL_MAX_ATTEMPTS", default_value_t = 16)]
    pub mail_max_attempts: i32,

    /// First retry delay in milliseconds; it doubles with each attempt (with jitter).
    #[arg(long, env = "SENDGUARD_MAIL_RETRY_BASE_MS", default_value_t = 2000)]
    pub mail_retry_base_ms: u64,

    /// First retry delay of a webhook delivery in milliseconds; it doubles with each attempt
    /// (capped at 4 hours). An event is never given up by age, only when its app has no
    /// webhook any more.
    #[arg(
        long,
        env = "SENDGUARD_WEBHOOK_RETRY_BASE_MS",
        default_value_t = 30_000
    )]
    pub webhook_retry_base_ms: u64,

    /// Make the outbox's commits (claims, `sent` marks, retries) wait for their WAL flush as the
    /// invites' own do. Off, a crash of Postgres (not of sendguard) can undo the last ~600 ms
    /// of them, and those invites are sent again; nothing accepted is lost either way.
    #[arg(
        long,
        env = "SENDGUARD_OUTBOX_FLUSHED_COMMITS",
        default_value_t = false
    )]
    pub outbox_flushed_commits: bool,

    /// How long a worker may hold a claimed invite before another instance takes it over.
    #[arg(long, env = "SENDGUARD_MAIL_LEASE_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub mail_lease_secs: u64,

    /// Days of history kept: a week of invites wholly older is dropped (its invites still
    /// waiting kept), and older audit entries and Idempotency-Keys are removed in batches
    /// every hour; 0 keeps everything.
    #[arg(long, env = "SENDGUARD_RETENTION_DAYS", default_value_t = 90)]
    pub retention_days: i32,

    /// Log lines as JSON.
    #[arg(long, env = "SENDGUARD_LOG_JSON", default_value_t = false)]
    pub log_json: bool,
}

/// An address block (`10.0.0.0/8`), or one address as a block of its own.
fn network(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{s}` is neither an address nor an address block"))
}

impl Config {
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    pub fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.read_timeout_ms.max(1))
    }

    /// Sets an unset public URL to [`local_url`] of the listen address, so links follow the
    /// port; true when it did so for a listener that is not on loopback, whose links then
    /// reach only this machine.
    pub fn default_public_url(&mut self) -> bool {
        if !self.public_url.is_empty() {
            return false;
        }
        self.public_url = local_url(self.listen);
        !self.listen.ip().is_loopback()
    }
}

/// `http://` and `listen`, an unspecified address written as 127.0.0.1: where this machine
/// reaches the listener.
pub fn local_url(listen: SocketAddr) -> String {
    let ip = if listen.ip().is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        listen.ip()
    };
    format!("http://{}", SocketAddr::new(ip, listen.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_url_is_where_this_machine_reaches_the_listener() {
        let url = |a: &str| local_url(a.parse().expect("address"));
        assert_eq!(url("0.0.0.0:9000"), "http://127.0.0.1:9000");
        assert_eq!(url("[::]:9000"), "http://127.0.0.1:9000");
        assert_eq!(url("[::1]:9000"), "http://[::1]:9000");
        assert_eq!(url("192.0.2.7:80"), "http://192.0.2.7:80");
    }

    #[test]
    fn secret_flags_are_found_in_either_form() {
        assert_eq!(
            secret_flags_in(["sendguard", "serve", "--secret-key", "k"]),
            ["--secret-key"]
        );
        assert_eq!(
            secret_flags_in(["serve", "--secret-key=k", "--previous-secret-key=p"]),
            ["--secret-key", "--previous-secret-key"]
        );
        assert!(secret_flags_in(["serve", "--secret-key-file", "/run/key"]).is_empty());
    }

    #[test]
    fn debug_output_shows_no_key() {
        let keys = SecretKeys {
            secret_key: Some("k".repeat(40)),
            previous_secret_key: Some("p".repeat(40)),
            ..SecretKeys::default()
        };
        let shown = format!("{keys:?}");
        assert!(
            !shown.contains("kkkk") && !shown.contains("pppp"),
            "{shown}"
        );
    }

    fn from_file(path: &std::path::Path) -> SecretKeys {
        SecretKeys {
            secret_key_file: Some(path.to_owned()),
            ..SecretKeys::default()
        }
    }

    #[test]
    fn a_key_file_is_trimmed_and_one_source_only() {
        let path = std::env::temp_dir().join(format!("sendguard-key-test-{}", std::process::id()));
        std::fs::write(&path, "  the key \n").expect("write");
        assert_eq!(from_file(&path).current(), Ok(Some("the key".into())));
        let both = SecretKeys {
            secret_key: Some("k".into()),
            ..from_file(&path)
        };
        assert!(both.current().is_err(), "a key and a file");
        std::fs::write(&path, " \n").expect("write");
        assert!(from_file(&path).current().is_err(), "an empty file");
        std::fs::remove_file(&path).expect("remove");
        assert!(from_file(&path).current().is_err(), "a missing file");
    }
}
