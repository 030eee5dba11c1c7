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

/// A TCP proxy in front of Postgres that, when [`armed`](Self::armed), lets the next COMMIT
/// (of a transaction that sent `marker`, if one is given) reach the server, then swallows the
/// server's answer and cuts both ends: the transaction is committed and the client hears only
/// a broken connection. For the tests of a commit whose outcome is unknown.
#[derive(Debug)]
pub struct CommitCutter {
    port: u16,
    /// Cut the next matching COMMIT's answer (disarms itself when it does).
    pub armed: Arc<std::sync::atomic::AtomicBool>,
    /// Answers cut so far.
    pub cuts: Arc<std::sync::atomic::AtomicUsize>,
}

impl CommitCutter {
    /// Forwards to the server of `url`. With `marker` (as `b"INSERT INTO leases"`), only the
    /// COMMIT of a transaction that sent those bytes is cut; without, any COMMIT.
    pub fn start(url: &str, marker: Option<&'static [u8]>) -> Self {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        let upstream = {
            let options = PgConnectOptions::from_str(url).unwrap();
            format!("{}:{}", options.get_host(), options.get_port())
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                // Set once this connection's COMMIT went through: its answer is not forwarded.
                let swallow = Arc::new(AtomicBool::new(false));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (armed, sw) = (a.clone(), swallow.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    // Whether the transaction now open sent the marker.
                    let mut marked = marker.is_none();
                    loop {
                        let n = match c_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let chunk = &buf[..n];
                        if let Some(m) = marker {
                            marked |= chunk.windows(m.len()).any(|w| w == m);
                        }
                        let commit = chunk.windows(7).any(|w| w == b"COMMIT\0");
                        if commit && marked && armed.swap(false, Ordering::SeqCst) {
                            sw.store(true, Ordering::SeqCst);
                        }
                        if commit {
                            marked = marker.is_none();
                        }
                        if s_out.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Both);
                });
                let (mut s_in, mut c_out) = (server, client);
                let cuts = c.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match s_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if swallow.load(Ordering::SeqCst) {
                            // The server answered the COMMIT: it is done. The client hears
                            // nothing but a closed connection.
                            cuts.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                    let _ = s_in.shutdown(Shutdown::Both);
                });
            }
        });
        CommitCutter { port, armed, cuts }
    }

    /// `url` through the proxy, in clear text (the proxy must see the COMMIT go by).
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        let sep = if tail.contains('?') { '&' } else { '?' };
        format!(
            "{scheme}://{user}127.0.0.1:{}{tail}{sep}sslmode=disable",
            self.port
        )
    }
}
