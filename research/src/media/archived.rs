//! Episodes through the media archive (crate `archive`, `--media-archive`): an episode's
//! media is fetched from the show once, kept by its SHA-256 and recorded as a version of the
//! episode ([`Media::archived_version`]); research reads the episode's *chosen* version, as
//! the archive's own file (a directory archive), a whole copy in the media cache, or a copy
//! made there from the archive, each checked against its SHA-256 before it is analysed
//! ([`Media::archived_copy`]). While a version fetched from the episode's current `media_uri`
//! is kept, the show's URL is not asked for anything: a show that stitches other ads into
//! each download, or deletes the episode, changes nothing in what is researched.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, PoisonError};

use archive::{ArchiveError, Kept, MediaArchive, Version};
use archivist::messages::EpisodeInfo;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{
    acquire, evict, hex, place, Entry, Fetched, Media, MediaError, Partial, CACHED, PARTIAL,
};
use crate::printing::MediaIdentity;

/// Where the bytes of a kept copy can be read from, for a print's ranges.
pub(crate) enum CopySource {
    /// A whole file on this machine (the archive's own, or the media cache's), open.
    File(std::fs::File, u64),
    /// The archive's copy, held in the media cache while it is read.
    Cached(Arc<Entry>),
    /// Only in the archive ([`MediaArchive::read`]).
    Archive,
}

impl Media {
    /// The episode's media, for an analyser that is handed the episode: with an archive, the
    /// chosen version's copy ([`archived_version`](Self::archived_version),
    /// [`archived_copy`](Self::archived_copy)); without, the media at its `media_uri`
    /// ([`fetch_until`](Self::fetch_until)).
    pub(crate) async fn episode(
        &self,
        episode: &EpisodeInfo,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: &CancellationToken,
    ) -> Result<Fetched, MediaError> {
        let Some(archive) = self.archive.clone() else {
            return self
                .fetch_until(&episode.media_uri, lease_end, cancel)
                .await;
        };
        let version = self
            .archived_version(&archive, episode, lease_end, cancel)
            .await?;
        let entry = self.archived_copy(&archive, &version).await?;
        Ok(Fetched {
            entry,
            cache_hit: false,
        })
    }

    /// The version of `episode`'s media that research reads (the archive's chosen one).
    /// When no version fetched from the episode's current `media_uri` is kept, the media is
    /// fetched first (as any download: whole, as long as the server said, hashed on the
    /// way), kept by that SHA-256 and recorded (the first version of an episode becomes the
    /// chosen one; a later one is recorded beside it). One item of this process at a time
    /// per episode, so that two slots fetch it once.
    pub(crate) async fn archived_version(
        &self,
        archive: &Arc<dyn MediaArchive>,
        episode: &EpisodeInfo,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: &CancellationToken,
    ) -> Result<Version, MediaError> {
        let key = archive::episode_key(&episode.title, &episode.date_aired);
        let name = format!("archive:{key}");
        let lock = {
            let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            fetching.entry(name.clone()).or_default().clone()
        };
        let turn = tokio::select! {
            _ = cancel.cancelled() => None,
            turn = lock.lock() => Some(turn),
        };
        let outcome = match turn {
            None => Err(MediaError::Cancelled),
            Some(_turn) => {
                self.archived_version_locked(archive, &key, episode, lease_end, cancel)
                    .await
            }
        };
        {
            let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            if Arc::strong_count(&lock) <= 2 {
                fetching.remove(&name);
            }
        }
        outcome
    }

    async fn archived_version_locked(
        &self,
        archive: &Arc<dyn MediaArchive>,
        key: &str,
        episode: &EpisodeInfo,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: &CancellationToken,
    ) -> Result<Version, MediaError> {
        let known = archive
            .versions(key)
            .await
            .map_err(|e| archive_failed(archive, &e))?;
        if let Some(known) = &known {
            if known.from_uri(&episode.media_uri).is_some() {
                return chosen_of(archive, known);
            }
        }
        let shown = messagebus::redact_url(&episode.media_uri);
        let fetched = self
            .fetch_until(&episode.media_uri, lease_end, cancel)
            .await?;
        let entry = fetched.entry;
        let kept = archive
            .keep(&entry.sha256, &entry.path)
            .await
            .map_err(|e| archive_failed(archive, &e))?;
        let (etag, last_modified) = match &entry.identity {
            Some(MediaIdentity::Http {
                etag,
                last_modified,
                ..
            }) => (etag.clone(), last_modified.clone()),
            _ => (None, None),
        };
        let version = Version {
            sha256: entry.sha256.clone(),
            size: entry.size,
            media_uri: episode.media_uri.clone(),
            etag,
            last_modified,
            media_type: Some(episode.media_type.clone()).filter(|t| !t.is_empty()),
            kept_at: chrono::Utc::now(),
        };
        let recorded = archive
            .record(key, &episode.title, episode.date_aired, version)
            .await
            .map_err(|e| archive_failed(archive, &e))?;
        tracing::info!(
            episode = %episode.title,
            media = %shown,
            sha256 = %entry.sha256,
            bytes = entry.size,
            new_copy = kept == Kept::New,
            archive = %archive.describe(),
            "episode media kept in the archive"
        );
        if recorded.chosen != entry.sha256 {
            tracing::info!(
                episode = %episode.title,
                sha256 = %entry.sha256,
                chosen = %recorded.chosen,
                versions = recorded.versions.len(),
                "another version of the episode's media recorded; research stays on the chosen one"
            );
        }
        chosen_of(archive, &recorded)
    }

    /// The copy of `version` as a file to analyse, checked whole against its SHA-256: the
    /// archive's own file (a directory archive; never written), else the media cache's whole
    /// copy, else a copy made into the media cache from the archive. A copy that does not
    /// hash to its name (or is missing) is never analysed: [`MediaError::Gone`], naming it
    /// and `archivist archive verify`.
    pub(crate) async fn archived_copy(
        &self,
        archive: &Arc<dyn MediaArchive>,
        version: &Version,
    ) -> Result<Arc<Entry>, MediaError> {
        let sha256 = version.sha256.clone();
        let uri = messagebus::redact_url(&version.media_uri);
        let identity = Some(MediaIdentity::Archived {
            sha256: sha256.clone(),
            size: version.size,
        });
        if let Some(path) = archive.local_path(&sha256) {
            let hashed = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || hash_file(&path))
                    .await
                    .map_err(|e| MediaError::Passing(format!("media archive: {e}")))?
            };
            let (found, size) = match hashed {
                Ok(hashed) => hashed,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(damaged(archive, &sha256, "is missing"))
                }
                Err(e) => {
                    return Err(MediaError::Passing(format!(
                        "media archive {}: cannot read the copy {sha256}: {e}",
                        archive.describe()
                    )))
                }
            };
            if found != sha256 {
                return Err(damaged(
                    archive,
                    &sha256,
                    &format!("hashes to {found} ({size} bytes)"),
                ));
            }
            return Ok(Arc::new(Entry {
                path,
                size,
                sha256,
                uri,
                held: None,
                stamp: None,
                identity,
            }));
        }
        if let Some(entry) = self.cached_copy(version).await {
            return Ok(entry);
        }
        let dir = self.config.cache_dir.clone();
        let part = Partial(dir.join(format!(
            "{sha256}.{}.{PARTIAL}",
            uuid::Uuid::new_v4().simple()
        )));
        let size = match archive.copy_to(&sha256, &part.0).await {
            Ok(size) => size,
            Err(ArchiveError::Damaged { why, .. }) => return Err(damaged(archive, &sha256, &why)),
            Err(ArchiveError::NotFound(_)) => return Err(damaged(archive, &sha256, "is missing")),
            Err(e) => return Err(archive_failed(archive, &e)),
        };
        let path = dir.join(format!("{sha256}.{CACHED}"));
        let held = {
            let (part_path, path) = (part.0.clone(), path.clone());
            tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&part_path)?;
                rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared)?;
                place(&part_path, &path, file)
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|placed| placed)
            .map_err(|e| MediaError::Passing(format!("cache: {e}")))?
        };
        drop(part);
        let (limit, evict_dir) = (self.config.cache_size, dir);
        let _ = tokio::task::spawn_blocking(move || evict(&evict_dir, limit)).await;
        Ok(Arc::new(Entry {
            path,
            size,
            sha256,
            uri,
            held: Some(held),
            stamp: None,
            identity,
        }))
    }

    /// The media cache's whole copy of `version` (`<sha256>.media`, named by its content
    /// when it was hashed), held; `None` when the cache has none of its length.
    async fn cached_copy(&self, version: &Version) -> Option<Arc<Entry>> {
        let path = self
            .config
            .cache_dir
            .join(format!("{}.{CACHED}", version.sha256));
        let held = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || acquire(&path))
                .await
                .ok()?
                .ok()??
        };
        let size = held.metadata().ok()?.len();
        (size == version.size).then(|| {
            Arc::new(Entry {
                path,
                size,
                sha256: version.sha256.clone(),
                uri: messagebus::redact_url(&version.media_uri),
                held: Some(held),
                stamp: None,
                identity: Some(MediaIdentity::Archived {
                    sha256: version.sha256.clone(),
                    size: version.size,
                }),
            })
        })
    }

    /// Where a print's ranges of `version`'s copy are read: its file on this machine (the
    /// archive's, its length checked) or in the media cache, else the archive. A copy the
    /// last `archivist archive verify` found damaged, or of another length, is never read:
    /// [`MediaError::Gone`].
    pub(crate) async fn archived_source(
        &self,
        archive: &Arc<dyn MediaArchive>,
        version: &Version,
    ) -> Result<CopySource, MediaError> {
        let sha256 = &version.sha256;
        match archive.report().await {
            Ok(Some(report)) => {
                if let Some((_, why)) = report.failed.iter().find(|(sha, _)| sha == sha256) {
                    return Err(damaged(
                        archive,
                        sha256,
                        &format!("failed the last check ({why})"),
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => return Err(archive_failed(archive, &e)),
        }
        if let Some(path) = archive.local_path(sha256) {
            let opened = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    let file = std::fs::File::open(&path)?;
                    let len = file.metadata()?.len();
                    Ok::<_, std::io::Error>((file, len))
                })
                .await
                .map_err(|e| MediaError::Passing(format!("media archive: {e}")))?
            };
            return match opened {
                Ok((_, len)) if len != version.size => Err(damaged(
                    archive,
                    sha256,
                    &format!("is {len} bytes long, not {}", version.size),
                )),
                Ok((file, len)) => Ok(CopySource::File(file, len)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Err(damaged(archive, sha256, "is missing"))
                }
                Err(e) => Err(MediaError::Passing(format!(
                    "media archive {}: cannot read the copy {sha256}: {e}",
                    archive.describe()
                ))),
            };
        }
        if let Some(entry) = self.cached_copy(version).await {
            return Ok(CopySource::Cached(entry));
        }
        match archive.size(sha256).await {
            Ok(Some(size)) if size == version.size => Ok(CopySource::Archive),
            Ok(Some(size)) => Err(damaged(
                archive,
                sha256,
                &format!("is {size} bytes long, not {}", version.size),
            )),
            Ok(None) => Err(damaged(archive, sha256, "is missing")),
            Err(e) => Err(archive_failed(archive, &e)),
        }
    }
}

/// The chosen version of `known`.
fn chosen_of(
    archive: &Arc<dyn MediaArchive>,
    known: &archive::EpisodeVersions,
) -> Result<Version, MediaError> {
    known.chosen().cloned().ok_or_else(|| {
        MediaError::Gone(format!(
            "media archive {}: the episode {:?} has no version {} (its chosen one) recorded",
            archive.describe(),
            known.title,
            known.chosen
        ))
    })
}

/// A kept copy that is not what was kept: never analysed.
fn damaged(archive: &Arc<dyn MediaArchive>, sha256: &str, why: &str) -> MediaError {
    MediaError::Gone(format!(
        "media damaged in the archive: the copy {sha256} in {} {why}; it is not analysed \
         (`archivist archive verify` checks every copy)",
        archive.describe()
    ))
}

/// The archive's failure as the item's: a damaged copy is gone (never analysed); anything
/// else may pass (the archive unreachable, a disk error).
fn archive_failed(archive: &Arc<dyn MediaArchive>, e: &ArchiveError) -> MediaError {
    match e {
        ArchiveError::Damaged { sha256, why } => damaged(archive, sha256, why),
        e => MediaError::Passing(format!("media archive: {e}")),
    }
}

/// The SHA-256 and length of the file at `path`.
fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex(&hasher.finalize()), size))
}
