//! `sendguard migrate`: apply the migrations and exit.

use sendguard::config::Database;

use super::Failure;

pub async fn run(db: &Database) -> Result<(), Failure> {
    // Creates the database when it is missing, as `serve` does.
    sendguard::db::connect_and_migrate(&db.database_url)
        .await?
        .close()
        .await;
    println!("migrations applied");
    Ok(())
}
