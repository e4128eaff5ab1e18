//! `sendguard bench`: the limiter's and the campaign groups' scripts next to a plain PING, link
//! detection, fingerprints, the SMTP transport and the writer's batch statement.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use sendguard::campaigns::fingerprint::groups;
use sendguard::config::Database;
use sendguard::limiter::simulate::to_table;
use sendguard::limiter::{RedisSettings, bench, replay};

use super::{Failure, Format};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Decisions per second of each algorithm's Redis script next to a plain PING.
    Limiter(BenchLimiterArgs),
    /// Calls per second of the near-duplicate group script next to a plain PING, for one text
    /// sent over and over, near-duplicates, distinct texts and notes written from one template,
    /// and the Redis bytes each text leaves in the group store.
    Groups(RedisLoad),
    /// The script calls of a `MONITOR` capture, sent again one at a time to an idle Redis that
    /// holds the data they were captured on (`benches/redis-replay.sh` makes both): each
    /// script's time a call in Redis, split into the call with its arguments, the commands it
    /// runs and its own Lua (`INFO commandstats`: nothing else may use the server meanwhile).
    Replay {
        #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
        redis_url: String,
        /// The output of `redis-cli monitor` while the traffic ran.
        #[arg(long)]
        capture: PathBuf,
        /// Times each call is sent again.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// Time to find the links in a 2,000-character message (the longest an invite carries).
    Links {
        /// Calls measured per row; the median is printed.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
    },
    /// Time to fingerprint a 2,000-character message (normalise and sign it); with `--groups`,
    /// a corpus's groups instead.
    Fingerprint {
        /// Calls measured per row; the median is printed.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
        /// A file of texts, one JSON string a line: prints, as CSV, each line's group of
        /// near-duplicates (Jaccard index of normalised word 3-shingles at least 0.7) and the
        /// fingerprint group it joins when the texts arrive in order (empty: no fingerprint).
        /// Each group is named by its first line (from 0).
        #[arg(long)]
        groups: Option<PathBuf>,
    },
    /// Emails a second through the SMTP transport, as the outbox sends them, and the mean send.
    /// Against a server that takes every message at once (Postfix's `smtp-sink`), the client's
    /// own cost.
    Smtp {
        /// The server, as `SENDGUARD_SMTP_URL` names it (`smtp://127.0.0.1:25250`).
        #[arg(long)]
        url: String,
        /// Connections in the pool, as `SENDGUARD_SMTP_CONNECTIONS`.
        #[arg(long, default_value_t = 8)]
        connections: u32,
        #[arg(long, default_value_t = 2_000)]
        emails: u32,
    },
    /// Postgres' CPU for the writer's batch statement by the invites it carries, next to a bare
    /// single-row insert, on a scratch database (one holding invites is refused): it writes
    /// invites (to `bench.invalid`), then deletes them. CPU is read from the server's `/proc`,
    /// so only when it runs here.
    Writer {
        #[command(flatten)]
        database: Database,
        /// Invites written per row (and single-row inserts); at least 50 statements a row.
        #[arg(long, default_value_t = 2_000)]
        invites: usize,
        /// The batch sizes measured, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,2,8,64")]
        sizes: Vec<usize>,
    },
}

/// The Redis a bench measures and the load it puts on it.
#[derive(Args)]
pub struct RedisLoad {
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Seconds per measurement (each row, and as long again of PING, in turns).
    #[arg(long, default_value_t = 2.5)]
    seconds: f64,
}

impl RedisLoad {
    /// The server, the clients and the time of each row, checked.
    fn checked(&self) -> Result<(RedisSettings, usize, Duration), Failure> {
        if self.clients == 0 {
            return Err("--clients must be at least 1".into());
        }
        let duration = Duration::try_from_secs_f64(self.seconds)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or("--seconds must be a positive number")?;
        Ok((RedisSettings::new(&self.redis_url), self.clients, duration))
    }
}

#[derive(Args)]
pub struct BenchLimiterArgs {
    #[command(flatten)]
    load: RedisLoad,
    /// Distinct senders the decisions are spread over.
    #[arg(long, default_value_t = 10_000)]
    subjects: u64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

impl BenchCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            BenchCommand::Limiter(args) => limiter(&args).await,
            BenchCommand::Groups(load) => group_calls(&load).await,
            BenchCommand::Replay {
                redis_url,
                capture,
                repeat,
            } => replay(&redis_url, &capture, repeat).await,
            BenchCommand::Links { iterations } => {
                let rows: Vec<Vec<String>> = sendguard::signals::bench::run(iterations)
                    .into_iter()
                    .map(|r| {
                        vec![
                            r.call.into(),
                            format!("{:.2}", r.median_us),
                            r.links.to_string(),
                        ]
                    })
                    .collect();
                print!("{}", to_table(&["call", "median_us", "links_found"], &rows));
                Ok(())
            }
            BenchCommand::Fingerprint {
                groups: Some(file), ..
            } => fingerprint_groups(&file),
            BenchCommand::Fingerprint { iterations, .. } => {
                let rows: Vec<Vec<String>> =
                    sendguard::campaigns::fingerprint::bench::run(iterations)
                        .into_iter()
                        .map(|r| vec![r.call.into(), format!("{:.2}", r.median_us)])
                        .collect();
                print!("{}", to_table(&["call", "median_us"], &rows));
                Ok(())
            }
            BenchCommand::Smtp {
                url,
                connections,
                emails,
            } => {
                if connections == 0 || emails == 0 {
                    return Err("--connections and --emails must be at least 1".into());
                }
                let run = sendguard::mail::bench::run(&url, connections, emails).await?;
                let row = vec![
                    run.emails.to_string(),
                    format!("{:.2}", run.elapsed.as_secs_f64()),
                    format!("{:.0}", run.per_second()),
                    format!("{:.2}", run.mean_send_ms()),
                ];
                let header = ["emails", "seconds", "emails_per_s", "mean_send_ms"];
                print!("{}", to_table(&header, &[row]));
                Ok(())
            }
            BenchCommand::Writer {
                database,
                invites,
                sizes,
            } => {
                if invites == 0 || sizes.contains(&0) {
                    return Err("--invites and every size must be at least 1".into());
                }
                use sendguard::invites::bench as writer;
                if !writer::is_scratch(&database.database_url).await? {
                    return Err("the database holds invites: give `bench writer` a scratch \
                                database (it writes and deletes invites)"
                        .into());
                }
                super::database(&database).await?;
                let measured = writer::run(&database.database_url, invites, &sizes).await?;
                let header = [
                    "statement",
                    "invites_per_call",
                    "calls",
                    "wall_us_per_call",
                    "pg_cpu_us_per_call",
                    "pg_cpu_us_per_invite",
                ];
                print!("{}", to_table(&header, &writer::to_rows(&measured)));
                for line in writer::summary(&measured) {
                    println!("{line}");
                }
                Ok(())
            }
        }
    }
}

async fn limiter(args: &BenchLimiterArgs) -> Result<(), Failure> {
    let (redis, clients, duration) = args.load.checked()?;
    if args.subjects < clients as u64 {
        return Err("--clients must be at most --subjects".into());
    }
    let cfg = bench::BenchConfig {
        redis,
        clients,
        duration,
        subjects: args.subjects,
    };
    let rows = bench::run(&cfg).await?;
    match args.format {
        Format::Csv => print!("{}", bench::to_csv(&rows)),
        Format::Table => print!("{}", bench::to_text(&rows)),
    }
    Ok(())
}

async fn replay(redis_url: &str, capture: &std::path::Path, repeat: usize) -> Result<(), Failure> {
    let capture =
        std::fs::read_to_string(capture).map_err(|e| format!("{}: {e}", capture.display()))?;
    let limiter = sendguard::limiter::script_source();
    let known = [
        replay::Known {
            name: "limiter",
            source: &limiter,
        },
        replay::Known {
            name: "campaign groups",
            source: sendguard::limiter::GROUP_SCRIPT,
        },
    ];
    let rows = replay::run(&RedisSettings::new(redis_url), &capture, &known, repeat).await?;
    if rows.is_empty() {
        return Err("the capture holds no call of sendguard's scripts".into());
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.script.clone(),
                r.calls.to_string(),
                format!("{:.1}", r.call_us),
                format!("{:.1}", r.bare_call_us),
                format!("{:.1}", r.commands),
                format!("{:.1}", r.commands_us),
                format!("{:.1}", r.lua_us()),
                format!("{:.1}", r.cpu_us),
            ]
        })
        .collect();
    let header = [
        "script",
        "calls",
        "us_a_call",
        "bare_call_us",
        "commands_a_call",
        "commands_us",
        "lua_us",
        "redis_cpu_us_a_call",
    ];
    print!("{}", to_table(&header, &body));
    Ok(())
}

async fn group_calls(load: &RedisLoad) -> Result<(), Failure> {
    let (redis, clients, duration) = load.checked()?;
    let rows: Vec<Vec<String>> = sendguard::campaigns::bench::run(&redis, clients, duration)
        .await?
        .into_iter()
        .map(|r| {
            vec![
                r.texts.into(),
                r.clients.to_string(),
                r.calls.to_string(),
                format!("{:.0}", r.calls_per_sec),
                format!("{:.0}", r.ping_per_sec),
                format!("{:.2}", r.ratio_to_ping()),
                format!("{:.1}", r.redis_us_per_call),
                r.bytes_per_text.to_string(),
            ]
        })
        .collect();
    let header = [
        "texts",
        "clients",
        "calls",
        "calls_per_sec",
        "ping_per_sec",
        "ratio_to_ping",
        "redis_us_per_call",
        "bytes_per_text",
    ];
    print!("{}", to_table(&header, &rows));
    Ok(())
}

/// The near-duplicate threshold of the evaluations (DESIGN §3d): a Jaccard index of 0.7.
const NEAR_DUPLICATE: f64 = 0.7;

fn fingerprint_groups(file: &PathBuf) -> Result<(), Failure> {
    let content = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let texts = content
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str::<String>(line)
                .map_err(|e| format!("line {}: not a JSON string: {e}", i + 1))
        })
        .collect::<Result<Vec<String>, String>>()?;
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let exact = groups::near_duplicates(&texts, NEAR_DUPLICATE);
    let joined = groups::fingerprint_groups(&texts);
    let mut out = String::from("line,near_duplicate_group,fingerprint_group\n");
    for (line, (exact, joined)) in exact.iter().zip(&joined).enumerate() {
        let joined = joined.map(|g| g.to_string()).unwrap_or_default();
        out.push_str(&format!("{line},{exact},{joined}\n"));
    }
    print!("{out}");
    Ok(())
}
