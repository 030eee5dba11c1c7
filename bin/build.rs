//! `src/foreign.rs` embeds the datastore's and the database bus's migrations
//! (`sqlx::migrate!`): rebuild when they change.

fn main() {
    for dir in [
        "../datastore/migrations/postgres",
        "../datastore/migrations/sqlite",
        "../messagebus/migrations/postgres",
        "../messagebus/migrations/sqlite",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
