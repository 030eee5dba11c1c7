use std::sync::Arc;

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

/// `url` with any password replaced by `***`, for logs and error messages.
pub fn redact_url(url: &str) -> String {
    // scheme://user:password@host… — only the part between ':' after the user and '@'.
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}://{}:***{}",
            &url[..scheme_end],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://a.db"), "sqlite://a.db");
        assert_eq!(redact_url("sqlite:a.db"), "sqlite:a.db");
    }
}
