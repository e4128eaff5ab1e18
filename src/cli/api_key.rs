//! `sendguard api-key create|revoke|list`: the keys calling apps authenticate with.

use clap::Subcommand;
use sendguard::config::Database;
use sendguard::limiter::simulate::to_table;
use sendguard::{api_keys, apps, audit};

use super::Failure;

#[derive(Subcommand)]
pub enum ApiKeyCommand {
    /// Create a key; it is printed once, only its hash is stored.
    Create {
        /// The key's name, unique among all keys, revoked ones included.
        name: String,
        /// The app the key belongs to.
        #[arg(long, default_value = apps::DEFAULT_APP)]
        app: String,
        #[command(flatten)]
        database: Database,
    },
    /// Revoke a key: requests carrying it get 401 from then on.
    Revoke {
        /// The name the key was created with.
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

impl ApiKeyCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            ApiKeyCommand::Create {
                name,
                app,
                database,
            } => {
                let pool = super::database(&database).await?;
                let app_id = apps::store::id_of(&pool, &app).await?;
                let created = api_keys::create(&pool, &name, app_id, &audit::operator()).await;
                pool.close().await;
                let key = created?;
                println!("{key}");
                eprintln!(
                    "API key `{name}` of app `{app}` created. It is shown only now: store it safely."
                );
            }
            ApiKeyCommand::Revoke { name, database } => {
                let pool = super::database(&database).await?;
                let revoked = api_keys::revoke(&pool, &name, &audit::operator()).await?;
                pool.close().await;
                if !revoked {
                    return Err(format!("no live API key named `{name}`").into());
                }
                println!("API key `{name}` revoked");
            }
            ApiKeyCommand::List { database } => {
                let pool = super::database(&database).await?;
                let keys = api_keys::list(&pool).await?;
                pool.close().await;
                let rows: Vec<Vec<String>> = keys
                    .into_iter()
                    .map(|k| {
                        vec![
                            k.name,
                            k.app,
                            k.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                            k.revoked_at
                                .map(|t| format!("revoked {}", t.format("%Y-%m-%d %H:%M UTC")))
                                .unwrap_or_else(|| "live".into()),
                        ]
                    })
                    .collect();
                print!("{}", to_table(&["name", "app", "created", "state"], &rows));
            }
        }
        Ok(())
    }
}
