//! The hostile-participant suite: every participant of the API played against the others
//! through the real gateway (the `Gateway` and the connection loop `archivist serve --api`
//! runs, on a loopback port, over HTTP), on the database bus on SQLite and on Postgres
//! (`ARCHIVIST_TEST_PG_URL`, as `scripts/test.sh` sets it).
//!
//! Each case is written once (in the modules below, generic over [`world::Backend`]) and
//! instantiated for both buses by [`both_buses!`]. Each asserts what the honest participants
//! still get, and that nothing was lost or recorded twice.
//!
//! - `tokens.rs`: every route × every scope × no, unknown and revoked tokens; failed attempts
//!   limited per credential (a good token behind the same address is never refused), with
//!   `Retry-After`; spoofed forwarding headers with and without `--trust-proxy`.
//! - `receipts.rs`: another token's receipts, guessed and finished ones; results for pairs not
//!   in the item; presence that cannot be inflated.
//! - `bounds.rs`: oversized and numerous lines, out-of-range numbers in every parameter.
//! - `revocation.rs`: a revoked token's polls in flight end and what it held goes back.
//! - `connections.rs`: idle and slow connections up to the limit while a researcher works.
//! - `logs.rs`: what the gateway's log says of them (names, never a token or a receipt).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod world;

mod bounds;
mod connections;
mod logs;
mod receipts;
mod revocation;
mod tokens;

/// Instantiates `$case` (an async fn taking a [`world::Backend`]) once per bus.
#[macro_export]
macro_rules! both_buses {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::world::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case($crate::world::Backend::Postgres).await
                }
            )*
        }
    };
}
