//! The subcommands: what each one parses, and the one place that dispatches them.

mod admin;
mod api_key;
mod app;
mod bench;
mod healthcheck;
mod migrate;
mod rules;
mod sender;
mod serve;
mod simulate;

use clap::{Parser, Subcommand, ValueEnum};
use sendguard::config::{Config, Database};
use sqlx::PgPool;

/// What a subcommand fails with, as printed.
pub type Failure = Box<dyn std::error::Error>;

#[derive(Parser)]
#[command(
    name = "sendguard",
    version,
    about = "Spam and abuse guard for invitation emails"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API and the mail worker; applies migrations first.
    Serve(Box<Config>),
    /// Apply migrations and exit.
    Migrate(Database),
    /// Manage the API keys apps authenticate with.
    #[command(subcommand)]
    ApiKey(api_key::ApiKeyCommand),
    /// Manage the apps: products calling sendguard, their links, branding and webhooks.
    #[command(subcommand)]
    App(app::AppCommand),
    /// Manage dashboard admins.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Rules as code: export them as TOML, apply a file.
    #[command(subcommand)]
    Rules(rules::RulesCommand),
    /// Ban or lift a sender by hand, audited under the operator's name.
    #[command(subcommand)]
    Sender(sender::SenderCommand),
    /// Replay generated traffic through every algorithm and compare each with an exact window.
    Simulate(simulate::SimulateArgs),
    /// Measure the service's parts against their ceilings.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Exit 0 when the instance at SENDGUARD_LISTEN is ready (for container health checks).
    Healthcheck(healthcheck::HealthcheckArgs),
}

/// How tables are printed.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Table,
    Csv,
}

impl Cli {
    pub async fn run(self) -> Result<(), Failure> {
        match self.command {
            Command::Serve(cfg) => serve::run(cfg).await,
            Command::Migrate(db) => migrate::run(&db).await,
            Command::ApiKey(command) => command.run().await,
            Command::App(command) => command.run().await,
            Command::Admin(command) => command.run().await,
            Command::Rules(command) => command.run().await,
            Command::Sender(command) => command.run().await,
            Command::Simulate(args) => {
                simulate::run(&args);
                Ok(())
            }
            Command::Bench(command) => command.run().await,
            Command::Healthcheck(args) => healthcheck::run(&args).await,
        }
    }
}

/// A pool on a database that exists and is migrated, for one command. Only `serve` and
/// `migrate` create a missing database: for the others a missing one is a mistyped name, which
/// would otherwise show an empty database.
async fn database(db: &Database) -> Result<PgPool, Failure> {
    if let Some(name) = sendguard::db::missing(&db.database_url).await? {
        return Err(format!(
            "database `{name}` does not exist: check DATABASE_URL (`sendguard migrate` \
             creates it)"
        )
        .into());
    }
    Ok(sendguard::db::connect_and_migrate(&db.database_url).await?)
}
