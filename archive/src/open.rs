//! [`open`]: an archive from what a user gives (`--media-archive`, `ARCHIVIST_MEDIA_ARCHIVE`).

use std::sync::Arc;

use crate::store::{ArchiveError, MediaArchive};
use crate::{DirArchive, S3Archive};

/// The archive `given` names: `s3://bucket/prefix` ([`S3Archive`], configured from the
/// environment as the AWS SDK is), a `file://` URL or a path (a [`DirArchive`], created if
/// missing). Another scheme, or nothing, is [`ArchiveError::Config`].
pub async fn open(given: &str) -> Result<Arc<dyn MediaArchive>, ArchiveError> {
    let config = |why: &str| ArchiveError::Config {
        archive: given.to_string(),
        why: why.to_string(),
    };
    if given.trim().is_empty() {
        return Err(config("empty: give a directory or s3://bucket/prefix"));
    }
    let lower = given.to_ascii_lowercase();
    if lower.starts_with("s3://") {
        let rest = &given[5..];
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        return Ok(Arc::new(S3Archive::from_env(bucket, prefix).await?));
    }
    if lower.starts_with("file://") {
        let url = url::Url::parse(given).map_err(|e| config(&format!("not a valid URL: {e}")))?;
        let path = url
            .to_file_path()
            .map_err(|()| config("not a local directory"))?;
        return Ok(Arc::new(DirArchive::new(path)?));
    }
    if let Some((scheme, _)) = given.split_once("://") {
        return Err(config(&format!(
            "the scheme {scheme:?} is not a media archive: give a directory or s3://bucket/prefix"
        )));
    }
    Ok(Arc::new(DirArchive::new(given)?))
}
