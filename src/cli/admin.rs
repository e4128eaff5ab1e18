//! `sendguard admin add|disable|list`: dashboard accounts from the command line, each change
//! audited under the operator's name (`SENDGUARD_OPERATOR`, else the login name, else the host
//! user).

use std::io::IsTerminal;

use clap::{Subcommand, ValueEnum};
use sendguard::admin::accounts::{self, Role};
use sendguard::audit;
use sendguard::config::Database;
use sendguard::limiter::simulate::to_table;

use super::Failure;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Add an admin; the password comes from SENDGUARD_ADMIN_PASSWORD, else it is asked for on
    /// the terminal without echo.
    Add {
        /// The name to log in with: 1-64 letters, digits, dots, dashes or underscores.
        username: String,
        /// A moderator works the review queue, the senders and the audit log; an admin also
        /// rules, keys and admins.
        #[arg(long, value_enum, default_value_t = RoleArg::Admin)]
        role: RoleArg,
        #[command(flatten)]
        database: Database,
    },
    /// Disable an admin: their sessions end at once, on every instance.
    Disable {
        /// The admin to disable.
        username: String,
        #[command(flatten)]
        database: Database,
    },
    /// List the admins: name, role, whether disabled, and the start of their latest live
    /// session (sessions end at logout or when idle, so an older login is not known).
    List {
        #[command(flatten)]
        database: Database,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum RoleArg {
    Admin,
    Moderator,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Admin => Role::Admin,
            RoleArg::Moderator => Role::Moderator,
        }
    }
}

impl AdminCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            AdminCommand::Add {
                username,
                role,
                database,
            } => {
                let password = password(&username)?;
                let pool = super::database(&database).await?;
                let role = Role::from(role);
                accounts::add(&pool, &username, &password, role, &audit::operator()).await?;
                pool.close().await;
                println!("{} `{username}` added", role.as_str());
            }
            AdminCommand::Disable { username, database } => {
                let pool = super::database(&database).await?;
                accounts::disable(&pool, &username, &audit::operator()).await?;
                pool.close().await;
                println!("admin `{username}` disabled; their sessions have ended");
            }
            AdminCommand::List { database } => {
                let pool = super::database(&database).await?;
                let admins = accounts::list(&pool).await;
                pool.close().await;
                let time = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC");
                let rows: Vec<Vec<String>> = admins?
                    .into_iter()
                    .map(|a| {
                        vec![
                            a.username,
                            a.role,
                            a.disabled_at
                                .map(|t| format!("disabled {}", time(t)))
                                .unwrap_or_else(|| "no".into()),
                            a.last_login
                                .map(|t| time(t).to_string())
                                .unwrap_or_else(|| "unknown".into()),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    to_table(&["name", "role", "disabled", "last login"], &rows)
                );
            }
        }
        Ok(())
    }
}

/// SENDGUARD_ADMIN_PASSWORD, else asked twice on the terminal.
fn password(username: &str) -> Result<String, Failure> {
    if let Ok(p) = std::env::var("SENDGUARD_ADMIN_PASSWORD") {
        return Ok(p);
    }
    if !std::io::stdin().is_terminal() {
        return Err("no terminal to ask the password on: set SENDGUARD_ADMIN_PASSWORD".into());
    }
    let first = rpassword::prompt_password(format!("Password for {username}: "))?;
    let again = rpassword::prompt_password("Same password again: ")?;
    if first != again {
        return Err("the two passwords differ".into());
    }
    Ok(first)
}
