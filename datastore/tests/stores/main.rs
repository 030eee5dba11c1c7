//! The datastore conformance suite (`datastore::testing`) run against both adapters, and what
//! is particular to each (Postgres under concurrency and lost commits, the lease model), in
//! one test binary: one module a concern, each built with the features it needs
//! (`cargo test -p datastore --all-features --test stores`; one module: `... postgres::`).

mod lease_model;
mod postgres;
mod postgres_commit_lost;
mod postgres_concurrency;
#[cfg(all(feature = "sqlite", feature = "test-utils"))]
mod sqlite;
