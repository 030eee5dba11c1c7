//! Fresh Postgres databases for tests (features `test-utils` and `postgres`).
//!
//! Each test gets a database of its own, `archivist_t_<uuid>`, created through the admin URL in
//! `ARCHIVIST_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and dropped,
//! with its connections, when the [`PgTestDb`] guard is dropped (also when the test panics).
//! So Postgres tests run in parallel without seeing each other.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use crate::testing::Fresh;
use crate::{DataStore, PgDataStore};

/// The default administrative URL, used when `ARCHIVIST_TEST_PG_URL` is unset.
pub const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The administrative URL tests create their databases through.
pub fn admin_url() -> String {
    std::env::var("ARCHIVIST_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_string())
}

/// `url` naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let query = tail.find('?').map(|q| &tail[q..]).unwrap_or("");
    format!("{scheme}://{authority}/{name}{query}")
}

/// A database that exists while this guard lives.
#[derive(Debug)]
pub struct PgTestDb {
    name: String,
    url: String,
    admin_url: String,
}

impl PgTestDb {
    /// Creates an empty database. Panics, saying what to do, if Postgres cannot be reached.
    pub async fn create() -> Self {
        let admin_url = admin_url();
        let name = format!("archivist_t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
            panic!(
                "cannot reach the test Postgres at {} ({e}); start it or run scripts/test.sh, \
                 which sets ARCHIVIST_TEST_PG_URL",
                crate::redact_url(&admin_url)
            )
        });
        // An identifier cannot be a bind parameter; the name is ours: [a-z0-9_] only.
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let _ = admin.close().await;
        let url = with_database(&admin_url, &name);
        Self {
            name,
            url,
            admin_url,
        }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A store on this database with a pool of `max_connections`, not migrated.
    pub async fn store(&self, max_connections: u32) -> PgDataStore {
        let options = PgConnectOptions::from_str(&self.url).unwrap();
        PgDataStore::connect_with(
            options,
            PgDataStore::pool_options()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap()
    }
}

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        // Drop cannot await, and may run inside a runtime: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let mut admin = PgConnection::connect(&admin_url).await?;
                // FORCE ends connections a pool may still hold (PostgreSQL 13+).
                sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut admin)
                    .await?;
                admin.close().await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}

/// A migrated [`PgDataStore`] on a fresh database (pool of 8), and the database's guard.
pub async fn fresh_pg_store() -> (PgDataStore, PgTestDb) {
    let db = PgTestDb::create().await;
    let store = db.store(8).await;
    store.migrate().await.unwrap();
    (store, db)
}

/// The conformance suite's `fresh` for Postgres.
pub async fn fresh() -> Fresh {
    let (store, db) = fresh_pg_store().await;
    // Whatever the drop order, the database goes: it is dropped WITH (FORCE).
    Fresh::new(Arc::new(store) as Arc<dyn DataStore>, db)
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_the_database() {
        assert_eq!(
            with_database("postgres://u:p@h:1/test?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}
