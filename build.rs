// `sqlx::migrate!` embeds the migrations when the crate compiles, and cargo does not see a new
// file in `migrations/` by itself: without this, a migration added to a built tree would be
// missing from the binary until some other change rebuilt it.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
