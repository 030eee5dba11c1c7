//! [`S3Archive`]: the archive as objects under an S3 prefix (`s3://bucket/prefix`).
//! (Being written: every call answers `Unavailable` until it is.)

use std::ops::Range;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use chrono::{DateTime, Utc};

use crate::store::{ArchiveError, CopyInfo, Kept, MediaArchive, VerifyReport};
use crate::versions::{EpisodeVersions, Version};

/// The archive as objects under a prefix of an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Archive {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// Empty, or ending with `/`.
    prefix: String,
}

impl S3Archive {
    /// The archive at `bucket`/`prefix`, with the AWS configuration of the environment.
    pub async fn from_env(bucket: &str, prefix: &str) -> Result<S3Archive, ArchiveError> {
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        S3Archive::from_sdk_config(&sdk, bucket, prefix)
    }

    /// The archive at `bucket`/`prefix` with the AWS configuration `sdk`. With an endpoint of
    /// its own (an S3-compatible store), buckets are addressed by path.
    pub fn from_sdk_config(
        sdk: &SdkConfig,
        bucket: &str,
        prefix: &str,
    ) -> Result<S3Archive, ArchiveError> {
        if bucket.is_empty() {
            return Err(ArchiveError::Config {
                archive: format!("s3://{bucket}/{prefix}"),
                why: "no bucket named".into(),
            });
        }
        let config = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(sdk.endpoint_url().is_some())
            .build();
        let prefix = prefix.trim_matches('/');
        Ok(S3Archive {
            client: aws_sdk_s3::Client::from_conf(config),
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }

    fn todo(&self) -> ArchiveError {
        ArchiveError::Unavailable {
            archive: self.describe(),
            why: "the S3 archive is not written yet".into(),
        }
    }
}

#[async_trait]
impl MediaArchive for S3Archive {
    async fn keep(&self, _sha256: &str, _file: &Path) -> Result<Kept, ArchiveError> {
        Err(self.todo())
    }
    async fn size(&self, _sha256: &str) -> Result<Option<u64>, ArchiveError> {
        Err(self.todo())
    }
    async fn read(&self, _sha256: &str, _range: Range<u64>) -> Result<Vec<u8>, ArchiveError> {
        Err(self.todo())
    }
    async fn copy_to(&self, _sha256: &str, _dest: &Path) -> Result<u64, ArchiveError> {
        Err(self.todo())
    }
    fn local_path(&self, _sha256: &str) -> Option<PathBuf> {
        None
    }
    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError> {
        Err(self.todo())
    }
    async fn verify(&self, _sha256: &str) -> Result<Option<String>, ArchiveError> {
        Err(self.todo())
    }
    async fn versions(&self, _key: &str) -> Result<Option<EpisodeVersions>, ArchiveError> {
        Err(self.todo())
    }
    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError> {
        Err(self.todo())
    }
    async fn record(
        &self,
        _key: &str,
        _title: &str,
        _date_aired: DateTime<Utc>,
        _version: Version,
    ) -> Result<EpisodeVersions, ArchiveError> {
        Err(self.todo())
    }
    async fn choose(&self, _key: &str, _sha256: &str) -> Result<EpisodeVersions, ArchiveError> {
        Err(self.todo())
    }
    async fn put_report(&self, _report: &VerifyReport) -> Result<(), ArchiveError> {
        Err(self.todo())
    }
    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError> {
        Err(self.todo())
    }
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}
