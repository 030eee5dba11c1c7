//! [`open`]: a print store from what a user gives (`--print-store`, `ARCHIVIST_PRINT_STORE`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::store::{PrintStore, StoreError};
use crate::{DirStore, S3Store};

/// The directory store's bound when none is given: 10 GiB, ten thousand hours of audio at
/// the analyser's target of at most 1 MB of print an hour.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;

/// How [`open`] sets up a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// The directory store's bound in bytes (least recently used evicted past it).
    pub max_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// The store `given` names: `s3://bucket/prefix` ([`S3Store`], configured from the
/// environment as the AWS SDK is), a `file://` URL or a path (a [`DirStore`], created if
/// missing). Another scheme, or nothing, is [`StoreError::Config`].
pub async fn open(given: &str, options: &StoreOptions) -> Result<Arc<dyn PrintStore>, StoreError> {
    let config = |why: &str| StoreError::Config {
        store: given.to_string(),
        why: why.to_string(),
    };
    if given.trim().is_empty() {
        return Err(config("empty: give a directory or s3://bucket/prefix"));
    }
    let lower = given.to_ascii_lowercase();
    if lower.starts_with("s3://") {
        let rest = &given[5..];
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        return Ok(Arc::new(S3Store::from_env(bucket, prefix).await?));
    }
    if lower.starts_with("file://") {
        let url = url::Url::parse(given).map_err(|e| config(&format!("not a valid URL: {e}")))?;
        let path = url
            .to_file_path()
            .map_err(|()| config("not a local directory"))?;
        return Ok(Arc::new(DirStore::new(path, options.max_bytes)?));
    }
    if let Some((scheme, _)) = given.split_once("://") {
        return Err(config(&format!(
            "the scheme {scheme:?} is not a print store: give a directory or s3://bucket/prefix"
        )));
    }
    Ok(Arc::new(DirStore::new(given, options.max_bytes)?))
}

/// The default print store: `archivist/prints` under `$XDG_CACHE_HOME` (when absolute, as
/// the XDG spec asks), else under `~/.cache`; `None` when neither variable is set. Beside
/// the media cache (`archivist/media`), not in it: prints outlive the media they came from.
pub fn default_dir() -> Option<PathBuf> {
    let var = |name| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let base = var("XDG_CACHE_HOME").or_else(|| var("HOME").map(|home| home.join(".cache")))?;
    Some(base.join("archivist").join("prints"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn what_names_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("a");
        let store = open(&plain.display().to_string(), &StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(store.describe(), plain.display().to_string());
        assert!(plain.is_dir(), "created");
        let url = format!("file://{}", dir.path().join("b").display());
        let store = open(&url, &StoreOptions::default()).await.unwrap();
        assert!(store.describe().ends_with("/b"));
        let s3 = open("s3://bucket/some/prefix/", &StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(s3.describe(), "s3://bucket/some/prefix/");
        for bad in ["", "ftp://x/y", "s3:///prefix"] {
            let e = open(bad, &StoreOptions::default()).await.unwrap_err();
            assert!(matches!(e, StoreError::Config { .. }), "{bad}: {e}");
        }
    }
}
