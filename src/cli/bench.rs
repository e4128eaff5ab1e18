//! `sendguard bench limiter`: decisions per second of each script next to a plain PING.

use std::time::Duration;

use clap::{Args, Subcommand};
use sendguard::limiter::simulate::to_table;
use sendguard::limiter::{RedisSettings, bench};

use super::{Failure, Format};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Decisions per second of each algorithm's Redis script next to a plain PING.
    Limiter(BenchLimiterArgs),
    /// Time to find the links in a 2,000-character message (the longest an invite carries).
    Links {
        /// Calls measured per row; the median is printed.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
    },
}

#[derive(Args)]
pub struct BenchLimiterArgs {
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Seconds per measurement (each algorithm and each PING run).
    #[arg(long, default_value_t = 2.5)]
    seconds: f64,
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
        }
    }
}

async fn limiter(args: &BenchLimiterArgs) -> Result<(), Failure> {
    if args.clients == 0 || args.subjects < args.clients as u64 {
        return Err("--clients must be at least 1 and at most --subjects".into());
    }
    let cfg = bench::BenchConfig {
        redis: RedisSettings::new(&args.redis_url),
        clients: args.clients,
        duration: Duration::from_secs_f64(args.seconds),
        subjects: args.subjects,
    };
    let rows = bench::run(&cfg).await?;
    match args.format {
        Format::Csv => print!("{}", bench::to_csv(&rows)),
        Format::Table => print!("{}", bench::to_text(&rows)),
    }
    Ok(())
}
