//! [`S3Archive`]: the archive as objects under an S3 prefix (`s3://bucket/prefix`).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::store::{
    check_key, hex, ArchiveError, CopyInfo, Kept, MediaArchive, VerifyReport, MAX_READ,
};
use crate::versions::{EpisodeVersions, Version};

/// The size of a multipart upload's parts (8 MiB), and the largest file kept with a single
/// `PutObject`. A file of more than 10,000 parts (80 GiB) is sent in larger parts, S3 allowing
/// no more.
pub(crate) const PART: u64 = 8 << 20;

/// The most parts S3 takes in one upload.
const MAX_PARTS: u64 = 10_000;

/// How many times an episode's object is read, changed and written again before a
/// participant gives up (each retry means another participant's write went in).
const ATTEMPTS: u32 = 32;

/// How many episodes' objects [`MediaArchive::episodes`] reads at once.
const READS_AT_ONCE: usize = 16;

/// The archive as objects under a prefix of an S3 bucket, shared by every participant
/// pointed at it: the objects are named as the directory archive's files are (the crate's
/// documentation), under the prefix. S3 shows an object only once it is whole: a reader sees
/// no copy or the whole copy.
///
/// - A copy is hashed while it is uploaded: one `PutObject` for a file of up to 8 MiB, a
///   multipart upload in parts of 8 MiB for a larger one (larger parts past 80 GiB, S3 taking
///   10,000 at most). When the file does not hash to its name, the single put is never sent
///   and the multipart upload is aborted, never completed: nothing is visible. An object
///   already there under the name, of the file's length, is taken as kept (`HeadObject`),
///   without reading it.
/// - An episode's object is rewritten by read, change, conditional write: `PutObject` with
///   `If-None-Match: *` when there was none, `If-Match: <its ETag>` when there was one, read
///   and changed again when another participant wrote first (`412 Precondition Failed`, or
///   `409` for a conditional write racing another). S3 checks the condition and writes in one
///   step, so participants recording at once lose no version. A store that checks and then
///   writes with no lock between (moto, whose tests therefore send it one request at a time)
///   can let two writes at the same instant both in, and lose one.
///
/// Configured as the AWS SDK is ([`S3Archive::from_env`]): `AWS_REGION`, the usual
/// credentials, and `AWS_ENDPOINT_URL` for an S3-compatible store (MinIO, moto), which is then
/// addressed by path (`http://host/bucket/key`) rather than by a bucket's host name. Errors
/// name the archive and the object, never a credential.
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

    /// The S3 client (for tests that reach past the archive).
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object that holds (or would hold) the copy named `sha256`:
    /// `<prefix>media/<first two digits>/<sha256>`.
    pub fn object_of_copy(&self, sha256: &str) -> Result<String, ArchiveError> {
        let sha256 = check_key(sha256)?;
        Ok(format!("{}media/{}/{sha256}", self.prefix, &sha256[..2]))
    }

    /// The object that holds (or would hold) the episode under `key`:
    /// `<prefix>episodes/<key>.json`.
    pub fn object_of_episode(&self, key: &str) -> Result<String, ArchiveError> {
        Ok(format!("{}episodes/{}.json", self.prefix, check_key(key)?))
    }

    fn report_object(&self) -> String {
        format!("{}verify.json", self.prefix)
    }

    fn unavailable(&self, what: &str, e: impl std::error::Error) -> ArchiveError {
        ArchiveError::Unavailable {
            archive: self.describe(),
            why: format!("{what}: {}", DisplayErrorContext(e)),
        }
    }

    fn unavailable_why(&self, why: String) -> ArchiveError {
        ArchiveError::Unavailable {
            archive: self.describe(),
            why,
        }
    }

    /// The length of `object`, or `None` when there is none.
    async fn head(&self, object: &str) -> Result<Option<u64>, ArchiveError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
        {
            Ok(head) => Ok(Some(length(head.content_length()))),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
            Err(e) => Err(self.unavailable(&format!("cannot look at {object}"), e)),
        }
    }

    /// The whole `object` as a stream, or `None` when there is none.
    async fn get(
        &self,
        object: &str,
    ) -> Result<Option<aws_sdk_s3::operation::get_object::GetObjectOutput>, ArchiveError> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
        {
            Ok(got) => Ok(Some(got)),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) => Err(self.unavailable(&format!("cannot read {object}"), e)),
        }
    }

    /// The whole `object`'s bytes and `ETag`, or `None` when there is none.
    async fn get_bytes(&self, object: &str) -> Result<Option<(Vec<u8>, String)>, ArchiveError> {
        let Some(got) = self.get(object).await? else {
            return Ok(None);
        };
        let etag = got.e_tag().unwrap_or_default().to_string();
        let bytes = got
            .body
            .collect()
            .await
            .map_err(|e| self.unavailable(&format!("cannot read {object}"), e))?
            .into_bytes()
            .to_vec();
        Ok(Some((bytes, etag)))
    }

    /// Reads the copy named `sha256` whole, hashing it, and writes it to the file `dest` when
    /// given (created once the copy is found; removed again on an error): its SHA-256 and
    /// length. [`ArchiveError::NotFound`] without a copy.
    async fn stream_copy(
        &self,
        sha256: &str,
        dest: Option<&Path>,
    ) -> Result<(String, u64), ArchiveError> {
        let object = self.object_of_copy(sha256)?;
        let Some(got) = self.get(&object).await? else {
            return Err(ArchiveError::NotFound(format!("copy {sha256}")));
        };
        let cannot_write = |dest: &Path, e: std::io::Error| {
            self.unavailable(&format!("cannot write {}", dest.display()), e)
        };
        let mut out = match dest {
            Some(dest) => Some(tokio::io::BufWriter::new(
                tokio::fs::File::create(dest)
                    .await
                    .map_err(|e| cannot_write(dest, e))?,
            )),
            None => None,
        };
        let streamed = async {
            let mut body = got.body;
            let mut hasher = Sha256::new();
            let mut total = 0u64;
            while let Some(piece) = body
                .try_next()
                .await
                .map_err(|e| self.unavailable(&format!("cannot read {object}"), e))?
            {
                hasher.update(&piece);
                total += piece.len() as u64;
                if let (Some(out), Some(dest)) = (out.as_mut(), dest) {
                    out.write_all(&piece)
                        .await
                        .map_err(|e| cannot_write(dest, e))?;
                }
            }
            if let (Some(out), Some(dest)) = (out.as_mut(), dest) {
                out.flush().await.map_err(|e| cannot_write(dest, e))?;
                out.get_ref()
                    .sync_all()
                    .await
                    .map_err(|e| cannot_write(dest, e))?;
            }
            Ok((hex(&hasher.finalize()), total))
        }
        .await;
        if let (Err(_), Some(dest)) = (&streamed, dest) {
            let _ = tokio::fs::remove_file(dest).await;
        }
        streamed
    }

    /// Keeps the file `source` (`size` bytes) under `object` in one `PutObject`, unless it
    /// does not hash to `sha256`.
    async fn keep_whole(
        &self,
        sha256: &str,
        object: &str,
        mut source: tokio::fs::File,
        size: u64,
    ) -> Result<(), ArchiveError> {
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        source
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| self.unavailable("cannot read the file to keep", e))?;
        let (found, bytes) = tokio::task::spawn_blocking(move || {
            let found = hex(&Sha256::digest(&bytes));
            (found, bytes)
        })
        .await
        .map_err(|e| self.unavailable("stopped", e))?;
        if found != sha256 {
            return Err(ArchiveError::Mismatch {
                expected: sha256.to_string(),
                found,
            });
        }
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(object)
            .content_type("application/octet-stream")
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| self.unavailable(&format!("cannot write {object}"), e))?;
        Ok(())
    }

    /// Keeps the file `source` (`size` bytes) under `object` in a multipart upload, completed
    /// only when it hashes to `sha256`, aborted otherwise (and on any error).
    async fn keep_in_parts(
        &self,
        sha256: &str,
        object: &str,
        source: tokio::fs::File,
        size: u64,
    ) -> Result<(), ArchiveError> {
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(object)
            .content_type("application/octet-stream")
            .send()
            .await
            .map_err(|e| self.unavailable(&format!("cannot write {object}"), e))?;
        let Some(upload_id) = upload.upload_id().map(str::to_string) else {
            return Err(
                self.unavailable_why(format!("cannot write {object}: S3 gave no upload id"))
            );
        };
        let sent = self
            .send_parts(sha256, object, &upload_id, source, size)
            .await;
        let completed = match sent {
            Ok(parts) => self
                .client
                .complete_multipart_upload()
                .bucket(&self.bucket)
                .key(object)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| self.unavailable(&format!("cannot write {object}"), e)),
            Err(e) => Err(e),
        };
        if completed.is_err() {
            if let Err(e) = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(object)
                .upload_id(&upload_id)
                .send()
                .await
            {
                tracing::warn!(
                    archive = %self.describe(),
                    object,
                    error = %DisplayErrorContext(e),
                    "an upload not kept could not be aborted (a bucket lifecycle rule removes it)"
                );
            }
        }
        completed
    }

    /// Sends the parts of an upload, hashing them: the parts when the whole hashes to
    /// `sha256`, else [`ArchiveError::Mismatch`].
    async fn send_parts(
        &self,
        sha256: &str,
        object: &str,
        upload_id: &str,
        mut source: tokio::fs::File,
        size: u64,
    ) -> Result<Vec<CompletedPart>, ArchiveError> {
        let part_size = PART.max(size.div_ceil(MAX_PARTS));
        let part_len = usize::try_from(part_size)
            .map_err(|e| self.unavailable_why(format!("cannot keep a file this large: {e}")))?;
        let mut hasher = Sha256::new();
        let mut parts = Vec::new();
        let mut number = 0i32;
        loop {
            let mut buf = vec![0u8; part_len];
            let n = fill(&mut source, &mut buf)
                .await
                .map_err(|e| self.unavailable("cannot read the file to keep", e))?;
            if n == 0 && number > 0 {
                break;
            }
            buf.truncate(n);
            // Hashing megabytes is work for a blocking thread, not the runtime's.
            let (h, b) = tokio::task::spawn_blocking(move || {
                hasher.update(&buf);
                (hasher, buf)
            })
            .await
            .map_err(|e| self.unavailable("stopped", e))?;
            hasher = h;
            number += 1;
            let sent = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(object)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(b))
                .send()
                .await
                .map_err(|e| self.unavailable(&format!("cannot write {object}"), e))?;
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(sent.e_tag().map(str::to_string))
                    .build(),
            );
            if n < part_len {
                break;
            }
        }
        let found = hex(&hasher.finalize());
        if found != sha256 {
            return Err(ArchiveError::Mismatch {
                expected: sha256.to_string(),
                found,
            });
        }
        Ok(parts)
    }

    /// What the archive knows of the episode under `key`, and its object's `ETag`.
    async fn read_episode(
        &self,
        key: &str,
    ) -> Result<Option<(EpisodeVersions, String)>, ArchiveError> {
        let object = self.object_of_episode(key)?;
        let Some((bytes, etag)) = self.get_bytes(&object).await? else {
            return Ok(None);
        };
        let episode = serde_json::from_slice(&bytes).map_err(|e| {
            self.unavailable_why(format!("the episode object {object} is damaged: {e}"))
        })?;
        Ok(Some((episode, etag)))
    }

    /// Runs `change` on what is known of the episode under `key` and writes what it returns
    /// (nothing when it returns `None`: no change), guarded by a conditional write; read and
    /// changed again while another participant writes first. What is known afterwards.
    async fn update_episode<F>(&self, key: &str, change: F) -> Result<EpisodeVersions, ArchiveError>
    where
        F: Fn(Option<EpisodeVersions>) -> Result<Option<EpisodeVersions>, ArchiveError>
            + Send
            + Sync,
    {
        let object = self.object_of_episode(key)?;
        for attempt in 0..ATTEMPTS {
            let known = self.read_episode(key).await?;
            let (episode, etag) = match known {
                Some((episode, etag)) => (Some(episode), Some(etag)),
                None => (None, None),
            };
            let Some(changed) = change(episode.clone())? else {
                return episode.ok_or_else(|| {
                    self.unavailable_why(format!("no change to {object}, which is not there"))
                });
            };
            let bytes = serde_json::to_vec_pretty(&changed).map_err(|e| {
                self.unavailable_why(format!("cannot write the episode {object}: {e}"))
            })?;
            let put = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(&object)
                .content_type("application/json")
                .body(ByteStream::from(bytes));
            let put = match &etag {
                Some(etag) => put.if_match(etag),
                None => put.if_none_match("*"),
            };
            match put.send().await {
                Ok(_) => return Ok(changed),
                Err(e) if written_first(&e) => {
                    tracing::debug!(object, attempt, "an episode written by another first");
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => {
                    return Err(self.unavailable(&format!("cannot write {object}"), e));
                }
            }
        }
        Err(self.unavailable_why(format!(
            "cannot write {object}: others wrote it first {ATTEMPTS} times"
        )))
    }
}

/// A length S3 gave (never negative; absent is 0).
fn length(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

/// Whether a conditional write failed because another write went first: `412 Precondition
/// Failed`, `409 Conflict` (S3's `ConditionalRequestConflict`, a conditional write racing
/// another), or `NoSuchKey` (the object the `If-Match` named is gone; not a missing bucket).
fn written_first<E: ProvideErrorMetadata>(e: &SdkError<E>) -> bool {
    let status = e.raw_response().map(|r| r.status().as_u16());
    matches!(status, Some(412 | 409))
        || matches!(
            e.code(),
            Some("PreconditionFailed" | "ConditionalRequestConflict" | "NoSuchKey")
        )
}

/// How long to wait before attempt `attempt + 1` of a conditional write: a few milliseconds
/// growing with the attempts, spread so that the participants that collided do not collide
/// again.
fn backoff(attempt: u32) -> Duration {
    let spread = (uuid::Uuid::new_v4().as_u128() % 20) as u64;
    Duration::from_millis(u64::from(attempt.min(10)) * 5 + spread)
}

/// Reads from `source` until `buf` is full or the file ends: how much was read.
async fn fill(source: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let got = source.read(&mut buf[n..]).await?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}

/// The total length in a `Content-Range` (`bytes a-b/total`), when it gives one.
fn range_total(content_range: Option<&str>) -> Option<u64> {
    content_range?.rsplit_once('/')?.1.trim().parse().ok()
}

#[async_trait]
impl MediaArchive for S3Archive {
    async fn keep(&self, sha256: &str, file: &Path) -> Result<Kept, ArchiveError> {
        let object = self.object_of_copy(sha256)?;
        let source = tokio::fs::File::open(file)
            .await
            .map_err(|e| self.unavailable("cannot read the file to keep", e))?;
        let size = source
            .metadata()
            .await
            .map_err(|e| self.unavailable("cannot read the file to keep", e))?
            .len();
        if self.head(&object).await? == Some(size) {
            return Ok(Kept::Already);
        }
        if size <= PART {
            self.keep_whole(sha256, &object, source, size).await?;
        } else {
            self.keep_in_parts(sha256, &object, source, size).await?;
        }
        Ok(Kept::New)
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>, ArchiveError> {
        let object = self.object_of_copy(sha256)?;
        self.head(&object).await
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Vec<u8>, ArchiveError> {
        let object = self.object_of_copy(sha256)?;
        let bad = |size: u64| ArchiveError::BadRange {
            sha256: sha256.to_string(),
            size,
            start: range.start,
            end: range.end,
        };
        let not_found = || ArchiveError::NotFound(format!("copy {sha256}"));
        // A range S3 cannot be asked for (empty, reversed, too long): its answer from the
        // copy's length alone.
        if range.start >= range.end || range.end - range.start > MAX_READ {
            let size = self.head(&object).await?.ok_or_else(not_found)?;
            return if range.start == range.end && range.end <= size {
                Ok(Vec::new())
            } else {
                Err(bad(size))
            };
        }
        let got = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&object)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
        {
            Ok(got) => got,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Err(not_found());
            }
            Err(e)
                if e.raw_response().map(|r| r.status().as_u16()) == Some(416)
                    || e.code() == Some("InvalidRange") =>
            {
                // Starts past the end.
                let size = self.head(&object).await?.ok_or_else(not_found)?;
                return Err(bad(size));
            }
            Err(e) => return Err(self.unavailable(&format!("cannot read {object}"), e)),
        };
        let total = range_total(got.content_range());
        if let Some(size) = total {
            if range.end > size {
                return Err(bad(size));
            }
        }
        let bytes = got
            .body
            .collect()
            .await
            .map_err(|e| self.unavailable(&format!("cannot read {object}"), e))?
            .into_bytes()
            .to_vec();
        let wanted = range.end - range.start;
        if bytes.len() as u64 != wanted {
            // Without a Content-Range, a store that ignored the range sent the whole copy.
            if total.is_none() {
                let size = bytes.len() as u64;
                if range.end > size {
                    return Err(bad(size));
                }
                let (start, end) = (range.start as usize, range.end as usize);
                return Ok(bytes[start..end].to_vec());
            }
            return Err(self.unavailable_why(format!(
                "cannot read {object}: {} bytes came for a range of {wanted}",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    async fn copy_to(&self, sha256: &str, dest: &Path) -> Result<u64, ArchiveError> {
        let (found, size) = self.stream_copy(sha256, Some(dest)).await?;
        if found != sha256 {
            let _ = tokio::fs::remove_file(dest).await;
            return Err(ArchiveError::Damaged {
                sha256: sha256.to_string(),
                why: format!("its {size} bytes hash to {found}"),
            });
        }
        Ok(size)
    }

    fn local_path(&self, _sha256: &str) -> Option<PathBuf> {
        None
    }

    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError> {
        let media = format!("{}media/", self.prefix);
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&media)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.unavailable("cannot list the copies", e))?;
            for object in page.contents() {
                let Some((shard, sha256)) = object
                    .key()
                    .and_then(|name| name.strip_prefix(media.as_str()))
                    .and_then(|rest| rest.split_once('/'))
                else {
                    continue;
                };
                if check_key(sha256).is_err() || !sha256.starts_with(shard) || shard.len() != 2 {
                    continue; // not ours
                }
                out.push(CopyInfo {
                    sha256: sha256.to_string(),
                    size: length(object.size()),
                });
            }
        }
        Ok(out)
    }

    async fn verify(&self, sha256: &str) -> Result<Option<String>, ArchiveError> {
        let (found, size) = self.stream_copy(sha256, None).await?;
        Ok((found != sha256).then(|| format!("its {size} bytes hash to {found}")))
    }

    async fn versions(&self, key: &str) -> Result<Option<EpisodeVersions>, ArchiveError> {
        Ok(self.read_episode(key).await?.map(|(episode, _)| episode))
    }

    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError> {
        let episodes = format!("{}episodes/", self.prefix);
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&episodes)
            .into_paginator()
            .send();
        let mut keys = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.unavailable("cannot list the episodes", e))?;
            for object in page.contents() {
                let Some(key) = object
                    .key()
                    .and_then(|name| name.strip_prefix(episodes.as_str()))
                    .and_then(|rest| rest.strip_suffix(".json"))
                    .filter(|key| check_key(key).is_ok())
                else {
                    continue;
                };
                keys.push(key.to_string());
            }
        }
        // Read a few at a time: one request each.
        let mut out = Vec::with_capacity(keys.len());
        let mut keys = keys.into_iter();
        let mut reads = tokio::task::JoinSet::new();
        loop {
            while reads.len() < READS_AT_ONCE {
                let Some(key) = keys.next() else { break };
                let me = self.clone();
                reads.spawn(async move { me.read_episode(&key).await });
            }
            let Some(read) = reads.join_next().await else {
                break;
            };
            let read = read.map_err(|e| self.unavailable("stopped", e))??;
            if let Some((episode, _)) = read {
                out.push(episode);
            }
        }
        Ok(out)
    }

    async fn record(
        &self,
        key: &str,
        title: &str,
        date_aired: DateTime<Utc>,
        version: Version,
    ) -> Result<EpisodeVersions, ArchiveError> {
        check_key(&version.sha256)?;
        check_key(key)?;
        self.update_episode(key, |known| {
            Ok(match known {
                Some(episode) if episode.versions.iter().any(|v| v.sha256 == version.sha256) => {
                    None
                }
                Some(mut episode) => {
                    episode.versions.push(version.clone());
                    Some(episode)
                }
                None => Some(EpisodeVersions {
                    title: title.to_string(),
                    date_aired,
                    chosen: version.sha256.clone(),
                    versions: vec![version.clone()],
                }),
            })
        })
        .await
    }

    async fn choose(&self, key: &str, sha256: &str) -> Result<EpisodeVersions, ArchiveError> {
        check_key(key)?;
        check_key(sha256)?;
        self.update_episode(key, |known| {
            let mut episode =
                known.ok_or_else(|| ArchiveError::NotFound(format!("episode {key}")))?;
            if !episode.versions.iter().any(|v| v.sha256 == sha256) {
                return Err(ArchiveError::NotFound(format!(
                    "version {sha256} of {:?}",
                    episode.title
                )));
            }
            if episode.chosen == sha256 {
                return Ok(None);
            }
            episode.chosen = sha256.to_string();
            Ok(Some(episode))
        })
        .await
    }

    async fn put_report(&self, report: &VerifyReport) -> Result<(), ArchiveError> {
        let object = self.report_object();
        let bytes = serde_json::to_vec_pretty(report)
            .map_err(|e| self.unavailable_why(format!("cannot write {object}: {e}")))?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&object)
            .content_type("application/json")
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| self.unavailable(&format!("cannot write {object}"), e))?;
        Ok(())
    }

    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError> {
        let object = self.report_object();
        let Some((bytes, _)) = self.get_bytes(&object).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.unavailable_why(format!("the report {object} is damaged: {e}")))
    }

    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_totals() {
        assert_eq!(range_total(Some("bytes 0-9/100")), Some(100));
        assert_eq!(range_total(Some("bytes 0-9/*")), None);
        assert_eq!(range_total(None), None);
    }
}
