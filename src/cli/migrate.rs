//! `sendguard migrate`: apply the migrations and exit.

use sendguard::config::Database;

use super::Failure;

pub async fn run(db: &Database) -> Result<(), Failure> {
    super::database(db).await?.close().await;
    println!("migrations applied");
    Ok(())
}
