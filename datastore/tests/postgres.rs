//! The Postgres adapter: the conformance suite, plus what only Postgres has (connect errors,
//! concurrent migrations, error classification, surviving dropped connections).
//! Each test runs on a fresh database of its own (`datastore::testing_pg`).
#![cfg(all(feature = "postgres", feature = "test-utils"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use datastore::testing_pg::{fresh, fresh_pg_store, PgTestDb};
use datastore::{DataStore, DataStoreError, PgDataStore};

datastore::datastore_conformance_tests!(fresh);

#[tokio::test]
async fn two_concurrent_migrations_on_a_fresh_database_both_succeed() {
    let db = PgTestDb::create().await;
    let a = db.store(2).await;
    let b = db.store(2).await;
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.unwrap();
    rb.unwrap();
    // And once more: harmless.
    a.migrate().await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'
         AND table_name IN ('episodes', 'clips', 'leases', 'leased_pairs', 'research_results')",
    )
    .fetch_one(a.pool())
    .await
    .unwrap();
    assert_eq!(tables, 5);
}
