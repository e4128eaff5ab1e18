//! `sendguard app create|update|list|rotate-webhook-secret`: the products that call sendguard
//! (docs/DESIGN.md §4).

use clap::{Args, Subcommand};
use sendguard::apps::{self, AppChanges};
use sendguard::audit;
use sendguard::config::{Database, SecretKeys};
use sendguard::limiter::simulate::to_table;
use sendguard::recipients::LinkKey;
use sendguard::webhooks::SecretBox;
use sqlx::PgPool;

use super::Failure;

#[derive(Subcommand)]
pub enum AppCommand {
    /// Create an app; prints its webhook secret once when it has a webhook.
    Create(Box<AppArgs>),
    /// Change an app: flags not given keep their value, an empty value clears it.
    Update(Box<AppArgs>),
    /// List the apps.
    List {
        #[command(flatten)]
        database: Database,
    },
    /// Give an app a new webhook secret, printed once; the old one also signs for 24 hours.
    RotateWebhookSecret {
        name: String,
        #[command(flatten)]
        database: Database,
        #[command(flatten)]
        keys: SecretKeys,
    },
}

#[derive(Args)]
pub struct AppArgs {
    /// The app's name, as `api-key create --app` names it; `default` exists from the start.
    name: String,
    /// The product's name in emails ("Bo invited you to Drawbox").
    #[arg(long)]
    product: Option<String>,
    /// A host the invites' accept_url may point to; repeat for several. Replaces the list.
    #[arg(long = "link-host")]
    link_hosts: Vec<String>,
    /// The invitation link of invites without accept_url: {invite_id} and {resource} are
    /// filled in, URL-encoded.
    #[arg(long)]
    link_template: Option<String>,
    /// The From mailbox of this app's emails, e.g. "Drawbox <invites@drawbox.example>".
    #[arg(long)]
    from: Option<String>,
    /// Where sendguard posts signed events about this app's senders (https, public address).
    #[arg(long)]
    webhook_url: Option<String>,
    /// A message the app prefills; repeat for several. Replaces the list. A text like one of
    /// them never counts as a campaign (its links still count).
    #[arg(long = "standard-text")]
    standard_texts: Vec<String>,
    /// Allow webhook URLs on private addresses, and http (internal receivers, tests).
    #[arg(long, env = "SENDGUARD_WEBHOOK_ALLOW_PRIVATE", default_value_t = false)]
    webhook_allow_private: bool,
    #[command(flatten)]
    database: Database,
    /// The key webhook secrets are sealed under: the one `serve` is given.
    #[command(flatten)]
    keys: SecretKeys,
}

impl AppArgs {
    fn changes(&self) -> AppChanges {
        AppChanges {
            product: self.product.clone(),
            link_hosts: (!self.link_hosts.is_empty()).then(|| self.link_hosts.clone()),
            link_template: self.link_template.clone(),
            mail_from: self.from.clone(),
            webhook_url: self.webhook_url.clone(),
            standard_texts: (!self.standard_texts.is_empty()).then(|| self.standard_texts.clone()),
        }
    }
}

impl AppCommand {
    pub async fn run(self) -> Result<(), Failure> {
        match self {
            AppCommand::Create(args) => save(&args, true).await?,
            AppCommand::Update(args) => save(&args, false).await?,
            AppCommand::List { database } => {
                let pool = super::database(&database).await?;
                let all = apps::store::all(&pool).await;
                pool.close().await;
                let rows: Vec<Vec<String>> = all?
                    .into_iter()
                    .map(|a| {
                        vec![
                            a.name,
                            a.product.unwrap_or_default(),
                            a.link_hosts.join(","),
                            a.link_template.unwrap_or_default(),
                            a.mail_from.unwrap_or_default(),
                            a.webhook_url.unwrap_or_default(),
                            a.standard_texts.len().to_string(),
                        ]
                    })
                    .collect();
                let header = [
                    "name",
                    "product",
                    "link_hosts",
                    "link_template",
                    "from",
                    "webhook_url",
                    "standard_texts",
                ];
                print!("{}", to_table(&header, &rows));
            }
            AppCommand::RotateWebhookSecret {
                name,
                database,
                keys,
            } => {
                let pool = super::database(&database).await?;
                let rotated = async {
                    let secrets = secret_box(&pool, &keys).await?;
                    let actor = audit::operator();
                    Ok::<_, Failure>(
                        apps::webhook_secret::rotate(&pool, &name, &secrets, &actor).await?,
                    )
                }
                .await;
                pool.close().await;
                let secret = rotated?;
                eprintln!(
                    "app `{name}` has a new webhook secret; the old one also signs for {} hours",
                    apps::webhook_secret::OVERLAP.as_secs() / 3600
                );
                show_secret(Some(secret));
            }
        }
        Ok(())
    }
}

/// What seals webhook secrets: the service key as `serve` resolves it.
async fn secret_box(pool: &PgPool, keys: &SecretKeys) -> Result<SecretBox, Failure> {
    Ok(LinkKey::load(pool, keys).await?.secret_box())
}

/// Creates or updates the app of `args`; a new webhook secret is printed once on stdout (the
/// rest goes to stderr).
async fn save(args: &AppArgs, create: bool) -> Result<(), Failure> {
    let pool = super::database(&args.database).await?;
    let (name, changes, private, actor) = (
        &args.name,
        args.changes(),
        args.webhook_allow_private,
        audit::operator(),
    );
    let done = async {
        let secrets = secret_box(&pool, &args.keys).await?;
        Ok::<_, Failure>(if create {
            apps::store::create(&pool, name, changes, &secrets, private, &actor).await?
        } else {
            apps::store::update(&pool, name, changes, &secrets, private, &actor).await?
        })
    }
    .await;
    pool.close().await;
    let (app, secret) = done?;
    // Only the secret goes to stdout, so a script can capture it.
    eprintln!(
        "app `{}` {}",
        app.name,
        if create { "created" } else { "updated" }
    );
    show_secret(secret);
    Ok(())
}

/// A new webhook secret, printed once on stdout (the rest goes to stderr).
fn show_secret(secret: Option<String>) {
    if let Some(secret) = secret {
        println!("{secret}");
        eprintln!("This is the webhook secret. It is shown only now: store it with the receiver.");
    }
}
