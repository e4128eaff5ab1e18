//! Rules set up as `rules apply` changes them (validated, applied in one transaction, audited),
//! not by writing the table.

use sendguard::rules::{self, file};
use sqlx::PgPool;

pub use sendguard::rules::file::RuleEntry;

/// Edits the rules as a rules file writes them (`change` may also add some) and applies the
/// result.
pub async fn apply(pool: &PgPool, change: impl FnOnce(&mut Vec<RuleEntry>)) {
    let current = rules::load_all(pool).await.expect("load the rules");
    let text = file::export(&current).expect("export the rules");
    let mut rules: file::RulesFile = basic_toml::from_str(&text).expect("read the export");
    change(&mut rules.rule);
    let text = basic_toml::to_string(&rules).expect("write the rules");
    let wanted = file::parse(&text).unwrap_or_else(|e| panic!("{e}"));
    let changes = file::plan(&current, &wanted, false);
    file::apply(pool, &current, &wanted, &changes, "test")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Edits rule `name`, as [`apply`] does.
pub async fn set(pool: &PgPool, name: &str, change: impl FnOnce(&mut RuleEntry)) {
    apply(pool, |rules| {
        change(
            rules
                .iter_mut()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("no rule named {name}")),
        )
    })
    .await
}
