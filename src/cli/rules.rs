//! `sendguard rules export|apply`: rules as code (docs/DESIGN.md §4).

use std::path::PathBuf;

use clap::Subcommand;
use sendguard::audit;
use sendguard::config::Database;
use sendguard::rules::{self, file};

use super::Failure;

#[derive(Subcommand)]
pub enum RulesCommand {
    /// Print every rule as TOML.
    Export {
        #[command(flatten)]
        database: Database,
    },
    /// Make the rules of FILE the rules in force: validated whole, the changes printed, then
    /// applied all or nothing in one transaction, audited under SENDGUARD_OPERATOR (else the
    /// OS user). Every instance picks them up within a second.
    Apply {
        /// The rules file, as `rules export` prints it.
        file: PathBuf,
        /// Print what would change and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Also delete the rules the file does not name.
        #[arg(long)]
        prune: bool,
        #[command(flatten)]
        database: Database,
    },
}

impl RulesCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            RulesCommand::Export { database } => {
                let pool = super::database(&database).await?;
                let rules = rules::load_all(&pool).await?;
                pool.close().await;
                print!("{}", file::export(&rules)?);
            }
            RulesCommand::Apply {
                file: path,
                dry_run,
                prune,
                database,
            } => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                let wanted = file::parse(&text)?;
                let pool = super::database(&database).await?;
                let current = rules::load_all(&pool).await?;
                let changes = file::plan(&current, &wanted, prune);
                for change in &changes {
                    println!("{change}");
                }
                if changes.is_empty() {
                    println!("no change");
                } else if dry_run {
                    println!("dry run: nothing changed");
                } else {
                    file::apply(&pool, &current, &wanted, &changes, &audit::operator()).await?;
                    println!("{} change(s) applied", changes.len());
                }
                pool.close().await;
            }
        }
        Ok(())
    }
}
