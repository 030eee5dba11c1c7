//! A database that holds another program's sqlx migrations: archivist's would be mixed into
//! it (sqlx keeps every program's in one `_sqlx_migrations` table), so a caller refuses it
//! with what to do instead ([`ForeignMigrations`]'s text: a database of its own, or a schema,
//! `options=-c search_path=…`).
//!
//! Archivist's migrations are this crate's and the database bus's, embedded here from their
//! directories; an applied migration whose version is not one of them, or whose checksum
//! differs, is another program's.

use std::collections::HashMap;

use sqlx::migrate::Migrator;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use sqlx::Connection;

#[cfg(feature = "postgres")]
static PG_STORE: Migrator = sqlx::migrate!("./migrations/postgres");
#[cfg(feature = "postgres")]
static PG_BUS: Migrator = sqlx::migrate!("../messagebus/migrations/postgres");
#[cfg(feature = "sqlite")]
static SQLITE_STORE: Migrator = sqlx::migrate!("./migrations/sqlite");
#[cfg(feature = "sqlite")]
static SQLITE_BUS: Migrator = sqlx::migrate!("../messagebus/migrations/sqlite");

/// At most this many foreign migrations are named.
const MAX_NAMED: usize = 5;

/// Another program's applied migrations in a database (version and description), at most
/// five: found by [`foreign_migrations`], explained by [`ForeignMigrations::explain`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForeignMigrations(pub Vec<(i64, String)>);

impl ForeignMigrations {
    /// Whether there are none (the database is archivist's, or new).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The usage error's text for the database `shown` (credentials masked), configured by
    /// the variable `var`, holding these migrations.
    pub fn explain(&self, var: &str, shown: &str) -> String {
        let named: Vec<String> = self.0.iter().map(|(v, d)| format!("{v} {d:?}")).collect();
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
}

/// The applied migrations at `url` that are not archivist's; none when all are ours, when
/// there is no migrations table, when the database cannot be read (the caller's own
/// connection reports that), or when this build lacks the database's adapter.
pub async fn foreign_migrations(url: &str) -> ForeignMigrations {
    let sqlite = url.starts_with("sqlite:");
    let rows: Vec<(i64, String, Vec<u8>)> = match read(url, sqlite).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::debug!(error = %e, "could not look for another program's migrations");
            return ForeignMigrations::default();
        }
    };
    let ours: HashMap<i64, &[u8]> = ours(sqlite)
        .iter()
        .flat_map(|m| m.iter())
        .map(|m| (m.version, m.checksum.as_ref()))
        .collect();
    ForeignMigrations(
        rows.into_iter()
            .filter(|(version, _, checksum)| ours.get(version) != Some(&checksum.as_slice()))
            .map(|(version, description, _)| (version, description))
            .take(MAX_NAMED)
            .collect(),
    )
}

/// Archivist's migrators for the kind of database (those this build has).
fn ours(sqlite: bool) -> Vec<&'static Migrator> {
    let mut migrators = Vec::new();
    #[cfg(feature = "sqlite")]
    if sqlite {
        migrators.extend([&SQLITE_STORE, &SQLITE_BUS]);
    }
    #[cfg(feature = "postgres")]
    if !sqlite {
        migrators.extend([&PG_STORE, &PG_BUS]);
    }
    let _ = sqlite;
    migrators
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
const APPLIED: &str =
    "SELECT version, description, checksum FROM _sqlx_migrations ORDER BY version";

/// The applied migrations at `url`: (version, description, checksum).
async fn read(url: &str, sqlite: bool) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    if sqlite {
        read_sqlite(url).await
    } else {
        read_postgres(url).await
    }
}

#[cfg(feature = "sqlite")]
async fn read_sqlite(url: &str) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    use std::str::FromStr;
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
}

#[cfg(not(feature = "sqlite"))]
async fn read_sqlite(_url: &str) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    Ok(Vec::new())
}

#[cfg(feature = "postgres")]
async fn read_postgres(url: &str) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    use std::str::FromStr;
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

#[cfg(not(feature = "postgres"))]
async fn read_postgres(_url: &str) -> Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error> {
    Ok(Vec::new())
}

#[cfg(all(test, feature = "sqlite"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn another_programs_migrations_are_named_and_ours_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("db.sqlite").display()
        );
        assert!(foreign_migrations(&url).await.is_empty(), "no database yet");
        let store = crate::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        assert!(foreign_migrations(&url).await.is_empty(), "ours only");

        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, installed_on, success, \
             checksum, execution_time) VALUES (20200101000000, 'their users', CURRENT_TIMESTAMP, 1, x'00', 0)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        let foreign = foreign_migrations(&url).await;
        assert_eq!(foreign.0, vec![(20200101000000, "their users".to_string())]);
        assert_eq!(
            foreign.explain("DATABASE_URL", "sqlite://db.sqlite"),
            "DATABASE_URL sqlite://db.sqlite holds another program's migrations (in \
             _sqlx_migrations: 20200101000000 \"their users\"), not archivist's: archivist needs a database \
             of its own (another SQLite file)"
        );
    }
}
