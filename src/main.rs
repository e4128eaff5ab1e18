//! The `sendguard` command line: parses arguments and calls into the library.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sendguard::config::{Config, Database};
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
    /// Run the API and the mail worker; applies migrations first.
    Serve(Box<Config>),
    /// Apply migrations and exit.
    Migrate(Database),
    /// Manage the API keys the calling app authenticates with.
    #[command(subcommand)]
    ApiKey(ApiKeyCommand),
    /// Manage dashboard admins.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Replay generated traffic through every algorithm and compare each with an exact window.
    Simulate(SimulateArgs),
    /// Measure the service's parts against their ceilings.
    #[command(subcommand)]
    Bench(BenchCommand),
}

#[derive(Subcommand)]
enum ApiKeyCommand {
    /// Create a key; it is printed once, only its hash is stored.
    Create {
        name: String,
        #[command(flatten)]
        database: Database,
    },
    /// Revoke a key: requests carrying it get 401 from then on.
    Revoke {
        name: String,
        #[command(flatten)]
        database: Database,
    },
    /// List the keys (names and dates; the keys themselves are not stored).
    List {
        #[command(flatten)]
        database: Database,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Add an admin; the password comes from SENDGUARD_ADMIN_PASSWORD, else it is asked for on
    /// the terminal without echo.
    Add {
        username: String,
        #[command(flatten)]
        database: Database,
    },
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
        Command::Serve(cfg) => serve(&cfg).await,
        Command::Migrate(db) => migrate(&db).await,
        Command::ApiKey(ApiKeyCommand::Create { name, database }) => {
            create_api_key(&name, &database).await
        }
        Command::ApiKey(ApiKeyCommand::Revoke { name, database }) => {
            revoke_api_key(&name, &database).await
        }
        Command::ApiKey(ApiKeyCommand::List { database }) => list_api_keys(&database).await,
        Command::Admin(AdminCommand::Add { username, database }) => {
            add_admin(&username, &database).await
        }
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

type Failure = Box<dyn std::error::Error>;

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
}

async fn serve(cfg: &Config) -> Result<(), Failure> {
    init_logs(cfg.log_json);
    let running = sendguard::start(cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn migrate(db: &Database) -> Result<(), Failure> {
    let pool = sendguard::db::connect_and_migrate(&db.database_url).await?;
    pool.close().await;
    println!("migrations applied");
    Ok(())
}

async fn create_api_key(name: &str, db: &Database) -> Result<(), Failure> {
    let pool = sendguard::db::connect_and_migrate(&db.database_url).await?;
    let key = sendguard::api_keys::create(&pool, name).await?;
    pool.close().await;
    println!("{key}");
    eprintln!("API key `{name}` created. It is shown only now: store it safely.");
    Ok(())
}

async fn add_admin(username: &str, db: &Database) -> Result<(), Failure> {
    let password = match std::env::var("SENDGUARD_ADMIN_PASSWORD") {
        Ok(p) => p,
        Err(_) => {
            let first = rpassword::prompt_password(format!("Password for {username}: "))?;
            let again = rpassword::prompt_password("Same password again: ")?;
            if first != again {
                return Err("the two passwords differ".into());
            }
            first
        }
    };
    let pool = sendguard::db::connect_and_migrate(&db.database_url).await?;
    sendguard::admin::accounts::add(&pool, username, &password).await?;
    pool.close().await;
    println!("admin `{username}` added");
    Ok(())
}

async fn revoke_api_key(name: &str, db: &Database) -> Result<(), Failure> {
    let pool = sendguard::db::connect_and_migrate(&db.database_url).await?;
    let revoked = sendguard::api_keys::revoke(&pool, name).await?;
    pool.close().await;
    if !revoked {
        return Err(format!("no live API key named `{name}`").into());
    }
    println!("API key `{name}` revoked");
    Ok(())
}

async fn list_api_keys(db: &Database) -> Result<(), Failure> {
    let pool = sendguard::db::connect_and_migrate(&db.database_url).await?;
    let keys = sendguard::api_keys::list(&pool).await?;
    pool.close().await;
    let rows: Vec<Vec<String>> = keys
        .into_iter()
        .map(|k| {
            vec![
                k.name,
                k.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                k.revoked_at
                    .map(|t| format!("revoked {}", t.format("%Y-%m-%d %H:%M UTC")))
                    .unwrap_or_else(|| "live".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        simulate::to_table(&["name", "created", "state"], &rows)
    );
    Ok(())
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

async fn run_bench_limiter(args: &BenchLimiterArgs) -> Result<(), Failure> {
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
