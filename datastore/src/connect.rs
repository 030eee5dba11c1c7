use std::sync::Arc;

pub use messagebus::redact_url;

use crate::{DataStore, DataStoreError, Result};

/// Opens the datastore named by `url`: `sqlite://path` (the file is created if missing) or
/// `postgres://…`. Does not migrate.
pub async fn connect(url: &str) -> Result<Arc<dyn DataStore>> {
    if url.starts_with("sqlite:") {
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(crate::SqliteDataStore::connect(url).await?));
        #[cfg(not(feature = "sqlite"))]
        return Err(DataStoreError::Config(
            "this build has no SQLite support (feature `sqlite`)".into(),
        ));
    }
    if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(crate::PgDataStore::connect(url).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(DataStoreError::Config(
            "this build has no Postgres support (feature `postgres`)".into(),
        ));
    }
    Err(DataStoreError::Config(format!(
        "unsupported DATABASE_URL {:?}: expected sqlite://… or postgres://…",
        redact_url(url)
    )))
}
