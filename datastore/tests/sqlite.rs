//! The SQLite adapter: the datastore conformance suite on a fresh file per case, and
//! SQLite-specific behaviour (several stores on one file, the file created if missing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use datastore::testing::Fresh;
use datastore::{DataStore, SqliteDataStore};

/// A migrated store on a new file in a temporary directory that lives as long as the case.
async fn fresh() -> Fresh {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("archivist.db").display());
    let store = SqliteDataStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    Fresh::new(Arc::new(store), dir)
}

datastore::datastore_conformance_tests!(fresh);
