//! [`S3Store`]: prints as objects in an S3 bucket (`s3://bucket/prefix`), shared by every
//! researcher pointed at it.
//!
//! Each print is the object `<prefix>/<key>.print`. S3 makes an object visible only once it
//! is whole, and of two writes at once the later one wins: a reader never sees half a print.
//! There is no size bound and no eviction (a bucket's lifecycle rules do that, if wanted);
//! the time [`list`](crate::PrintStore::list) shows is the object's last write.
//!
//! Configured as the AWS SDK is ([`S3Store::from_env`]): `AWS_REGION`, the usual credentials,
//! and `AWS_ENDPOINT_URL` for an S3-compatible store (MinIO, moto), which is then addressed
//! by path (`http://host/bucket/key`) rather than by a bucket's host name.

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::primitives::ByteStream;
use chrono::{DateTime, Utc};

use crate::envelope;
use crate::store::{check_key, PrintInfo, PrintStore, StoreError};

/// The extension of a print's object.
const SUFFIX: &str = ".print";

/// Prints as objects under a prefix of an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// Empty, or ending with `/`.
    prefix: String,
}

impl S3Store {
    /// The store at `bucket`/`prefix`, with the AWS configuration of the environment.
    pub async fn from_env(bucket: &str, prefix: &str) -> Result<S3Store, StoreError> {
        let sdk = aws_config::defaults(BehaviorVersion::latest()).load().await;
        S3Store::from_sdk_config(&sdk, bucket, prefix)
    }

    /// The store at `bucket`/`prefix` with the AWS configuration `sdk`. With an endpoint of
    /// its own (an S3-compatible store), buckets are addressed by path.
    pub fn from_sdk_config(
        sdk: &SdkConfig,
        bucket: &str,
        prefix: &str,
    ) -> Result<S3Store, StoreError> {
        if bucket.is_empty() {
            return Err(StoreError::Config {
                store: format!("s3://{bucket}/{prefix}"),
                why: "no bucket named".into(),
            });
        }
        let config = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(sdk.endpoint_url().is_some())
            .build();
        let prefix = prefix.trim_matches('/');
        Ok(S3Store {
            client: aws_sdk_s3::Client::from_conf(config),
            bucket: bucket.to_string(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }

    /// The S3 client (for tests that reach past the store).
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object that holds (or would hold) the print under `key`.
    pub fn object_of(&self, key: &str) -> Result<String, StoreError> {
        Ok(format!("{}{}{SUFFIX}", self.prefix, check_key(key)?))
    }

    fn unavailable(&self, what: &str, e: impl std::error::Error) -> StoreError {
        StoreError::Unavailable {
            store: self.describe(),
            why: format!("{what}: {}", DisplayErrorContext(e)),
        }
    }
}

fn chrono_of(t: &aws_sdk_s3::primitives::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

#[async_trait]
impl PrintStore for S3Store {
    async fn put(&self, key: &str, print: &[u8]) -> Result<(), StoreError> {
        let object = self.object_of(key)?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&object)
            .content_type("application/octet-stream")
            .body(ByteStream::from(envelope::wrap(print)))
            .send()
            .await
            .map_err(|e| self.unavailable(&format!("cannot write {object}"), e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let object = self.object_of(key)?;
        let got = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&object)
            .send()
            .await
        {
            Ok(got) => got,
            Err(e) => {
                if e.as_service_error().is_some_and(|s| s.is_no_such_key()) {
                    return Ok(None);
                }
                return Err(self.unavailable(&format!("cannot read {object}"), e));
            }
        };
        let stored = got
            .body
            .collect()
            .await
            .map_err(|e| self.unavailable(&format!("cannot read {object}"), e))?
            .into_bytes();
        match envelope::unwrap(&stored) {
            Ok(payload) => Ok(Some(payload.to_vec())),
            Err(why) => Err(StoreError::Damaged {
                key: key.to_string(),
                why,
            }),
        }
    }

    async fn list(&self) -> Result<Vec<PrintInfo>, StoreError> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&self.prefix)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.unavailable("cannot list the prints", e))?;
            for object in page.contents() {
                let Some(name) = object.key() else {
                    continue;
                };
                let Some(key) = name
                    .strip_prefix(self.prefix.as_str())
                    .and_then(|rest| rest.strip_suffix(SUFFIX))
                    .filter(|key| check_key(key).is_ok())
                else {
                    continue;
                };
                out.push(PrintInfo {
                    key: key.to_string(),
                    size: object
                        .size()
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0),
                    used: object.last_modified().and_then(chrono_of),
                });
            }
        }
        Ok(out)
    }

    async fn remove(&self, key: &str) -> Result<bool, StoreError> {
        let object = self.object_of(key)?;
        // S3 deletes what is not there without a word: whether it was, asked first.
        let there = match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&object)
            .send()
            .await
        {
            Ok(_) => true,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => false,
            Err(e) => return Err(self.unavailable(&format!("cannot look at {object}"), e)),
        };
        if there {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(&object)
                .send()
                .await
                .map_err(|e| self.unavailable(&format!("cannot remove {object}"), e))?;
        }
        Ok(there)
    }

    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}
