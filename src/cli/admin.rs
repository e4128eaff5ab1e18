//! `sendguard admin add`: dashboard accounts from the command line.

use clap::Subcommand;
use sendguard::admin::accounts;
use sendguard::config::Database;

use super::Failure;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Add an admin; the password comes from SENDGUARD_ADMIN_PASSWORD, else it is asked for on
    /// the terminal without echo.
    Add {
        username: String,
        #[command(flatten)]
        database: Database,
    },
}

impl AdminCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            AdminCommand::Add { username, database } => {
                let password = password(&username)?;
                let pool = super::database(&database).await?;
                accounts::add(&pool, &username, &password).await?;
                pool.close().await;
                println!("admin `{username}` added");
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
    let first = rpassword::prompt_password(format!("Password for {username}: "))?;
    let again = rpassword::prompt_password("Same password again: ")?;
    if first != again {
        return Err("the two passwords differ".into());
    }
    Ok(first)
}
