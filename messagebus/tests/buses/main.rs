//! The bus conformance suite (`messagebus::testing`) run against every adapter, and what is
//! particular to each, in one test binary: one module an adapter, each built with the
//! features its adapter needs (`cargo test -p messagebus --all-features --test buses`; one
//! adapter: `... --test buses sqs::`).

#[cfg(any(
    all(feature = "postgres", feature = "test-utils"),
    all(feature = "sqlite", feature = "test-utils")
))]
#[macro_use]
mod sql_common;

#[cfg(feature = "api-fake")]
mod api;
mod memory;
#[cfg(all(feature = "rabbitmq", feature = "test-utils"))]
mod rabbitmq;
#[cfg(all(feature = "postgres", feature = "test-utils"))]
mod sql_postgres;
#[cfg(all(feature = "sqlite", feature = "test-utils"))]
mod sql_sqlite;
#[cfg(all(feature = "sqs", feature = "test-utils"))]
mod sqs;
#[cfg(all(feature = "sqs", feature = "test-utils"))]
mod sqs_cost;
