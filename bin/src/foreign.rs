//! A database that holds another program's sqlx migrations: archivist's would be mixed into
//! it (sqlx keeps every program's in one `_sqlx_migrations` table), so it is refused with
//! what to do instead (a database of its own, or a schema: `options=-c search_path=…`).
//!
//! Our migrations are the datastore's and the database bus's, embedded here from their
//! directories; an applied migration whose version is not one of them, or whose checksum
//! differs, is another program's.

use std::collections::HashMap;
use std::str::FromStr;

use sqlx::migrate::Migrator;
use sqlx::Connection;

static PG_STORE: Migrator = sqlx::migrate!("../datastore/migrations/postgres");
static PG_BUS: Migrator = sqlx::migrate!("../messagebus/migrations/postgres");
static SQLITE_STORE: Migrator = sqlx::migrate!("../datastore/migrations/sqlite");
static SQLITE_BUS: Migrator = sqlx::migrate!("../messagebus/migrations/sqlite");

/// The applied migrations at `url` that are not archivist's (version and description), at
/// most five; empty when all are ours, when there is no migrations table, or when the
/// database cannot be read (the caller's own connection reports that).
pub(crate) async fn foreign_migrations(url: &str) -> Vec<(i64, String)> {
    let rows: Vec<(i64, String, Vec<u8>)> = match read(url).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::debug!(error = %e, "could not look for another program's migrations");
            return Vec::new();
        }
    };
    let ours: HashMap<i64, &[u8]> = if url.starts_with("sqlite:") {
        [&SQLITE_STORE, &SQLITE_BUS]
    } else {
        [&PG_STORE, &PG_BUS]
    }
    .iter()
    .flat_map(|m| m.iter())
    .map(|m| (m.version, m.checksum.as_ref()))
    .collect();
    rows.into_iter()
        .filter(|(version, _, checksum)| ours.get(version) != Some(&checksum.as_slice()))
        .map(|(version, description, _)| (version, description))
        .take(5)
        .collect()
}

const APPLIED: &str =
    "SELECT version, description, checksum FROM _sqlx_migrations ORDER BY version";

async fn read(url: &str) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    if url.starts_with("sqlite:") {
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?.read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
        let has: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_one(&mut conn)
        .await?;
        let rows = if has == 0 {
            Vec::new()
        } else {
            sqlx::query_as(APPLIED).fetch_all(&mut conn).await?
        };
        let _ = conn.close().await;
        Ok(rows)
    } else {
        let (supported, _) = messagebus::without_unsupported_params(url);
        let options =
            sqlx::postgres::PgConnectOptions::from_str(&supported)?.application_name("archivist");
        let mut conn = sqlx::PgConnection::connect_with(&options).await?;
        let has: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut conn)
            .await?;
        let rows = if has {
            sqlx::query_as(APPLIED).fetch_all(&mut conn).await?
        } else {
            Vec::new()
        };
        let _ = conn.close().await;
        Ok(rows)
    }
}

/// The usage error's text for a database holding `foreign` migrations.
pub(crate) fn explain(var: &str, shown: &str, foreign: &[(i64, String)]) -> String {
    let named: Vec<String> = foreign.iter().map(|(v, d)| format!("{v} {d:?}")).collect();
    let postgres = !shown.starts_with("sqlite:");
    let mut text = format!(
        "{var} {shown} holds another program's migrations (in _sqlx_migrations: {}), \
         not archivist's: archivist needs a database of its own",
        named.join(", ")
    );
    if postgres {
        text.push_str(
            ", or a schema of its own: `CREATE SCHEMA archivist`, then add \
             `?options=-c%20search_path%3Darchivist` to the URL",
        );
    } else {
        text.push_str(" (another SQLite file)");
    }
    text
}
