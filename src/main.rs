//! The `sendguard` command line: parses arguments and calls into the library.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sendguard::limiter::{RedisSettings, bench, simulate};

#[derive(Parser)]
#[command(
    name = "sendguard",
    version,
    about = "Spam and abuse guard for invitation emails"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay generated traffic through every algorithm and compare each with an exact window.
    Simulate(SimulateArgs),
    /// Measure the service's parts against their ceilings.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Csv,
}

#[derive(Args)]
struct SimulateArgs {
    /// Requests allowed per window.
    #[arg(long, default_value_t = 100)]
    limit: u64,
    /// Window length in seconds.
    #[arg(long, default_value_t = 3600)]
    window: u64,
    /// How many windows each trace lasts.
    #[arg(long, default_value_t = 6)]
    windows: u64,
    /// Seed of the random traces.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Decisions per second of each algorithm's Redis script next to a plain PING.
    Limiter(BenchLimiterArgs),
}

#[derive(Args)]
struct BenchLimiterArgs {
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

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => {
            run_simulate(&args);
            Ok(())
        }
        Command::Bench(BenchCommand::Limiter(args)) => run_bench_limiter(&args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sendguard: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_simulate(args: &SimulateArgs) {
    let cfg = simulate::SimConfig {
        limit: args.limit,
        window_secs: args.window,
        windows: args.windows,
        seed: args.seed,
    };
    let rows = simulate::run(&cfg);
    match args.format {
        Format::Csv => print!("{}", simulate::to_csv(&rows)),
        Format::Table => print!("{}", simulate::to_text(&rows)),
    }
}

async fn run_bench_limiter(args: &BenchLimiterArgs) -> Result<(), Box<dyn std::error::Error>> {
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
