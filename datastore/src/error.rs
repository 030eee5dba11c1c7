/// What went wrong in the datastore.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataStoreError {
    /// The data breaks a rule (a new item curated last before it was first curated, say).
    /// Retrying the same data fails again: the input is poison.
    #[error("invalid data: {0}")]
    Invalid(String),
    /// The data conflicts with stored data (a `media_uri` already used by another item).
    /// Retrying the same data fails again: the input is poison.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The database could not be reached, a connection broke, or the pool timed out.
    #[error("datastore unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The configuration is wrong (an unsupported URL scheme, say).
    #[error("datastore configuration: {0}")]
    Config(String),
    /// The schema could not be created or upgraded.
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// The bus work of a transactional write failed (see
    /// [`TransactionalBus`](crate::TransactionalBus)); the write was rolled back.
    #[error("bus: {0}")]
    Bus(#[from] messagebus::BusError),
}

impl DataStoreError {
    /// Whether the same operation may succeed if tried again later.
    ///
    /// The match is exhaustive on purpose: a new variant must decide.
    pub fn is_retryable(&self) -> bool {
        match self {
            DataStoreError::Unavailable(_) => true,
            DataStoreError::Database(e) => is_transient(e),
            DataStoreError::Bus(e) => e.is_retryable(),
            DataStoreError::Invalid(_)
            | DataStoreError::Conflict(_)
            | DataStoreError::Config(_)
            | DataStoreError::Migration(_) => false,
        }
    }
}

/// Database errors that say nothing about the data: serialization failures, deadlocks,
/// lock timeouts, a busy SQLite file, a Postgres shutting down. The database bus classifies
/// its errors by the same rule.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn is_transient(e: &sqlx::Error) -> bool {
    messagebus::sql::is_transient(e)
}

/// Without a database driver there are no database errors to classify.
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn is_transient(_: &sqlx::Error) -> bool {
    false
}

impl From<sqlx::Error> for DataStoreError {
    fn from(e: sqlx::Error) -> Self {
        // SQLSTATE class 22, "data exception" (a NUL in text, a time out of range, a number
        // too large): the data, not the database, is at fault, so it is poison rather than a
        // failure that would stop an archivist on every redelivery.
        if let sqlx::Error::Database(db) = &e {
            if db
                .code()
                .is_some_and(|c| c.len() == 5 && c.starts_with("22"))
            {
                return DataStoreError::Invalid(db.message().to_string());
            }
        }
        match e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_) => DataStoreError::Unavailable(e),
            // The connection closed before the server answered the TLS request (sqlx reads
            // the missing byte as 0x00): a server going away, as an I/O error would say (as
            // messagebus::sql::is_transient says for the bus).
            sqlx::Error::Protocol(ref m)
                if m.starts_with("unexpected response from SSLRequest: 0x00") =>
            {
                DataStoreError::Unavailable(e)
            }
            other => DataStoreError::Database(other),
        }
    }
}
