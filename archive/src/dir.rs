//! [`DirArchive`]: the archive as files in a directory (the layout in the crate's
//! documentation).
//!
//! A copy is written to a temporary file in its own directory (`.<sha256>.<random>.tmp`),
//! hashed while it is written, flushed to disk, then renamed to its name: a reader opens no
//! copy or the whole one. An episode's file is rewritten the same way, under an exclusive
//! lock on `episodes/.lock` so that two participants recording at once lose neither version.

use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::store::{
    check_key, hex, ArchiveError, CopyInfo, Kept, MediaArchive, VerifyReport, MAX_READ,
};
use crate::versions::{EpisodeVersions, Version};

/// The archive in a directory (see the module's documentation).
#[derive(Debug, Clone)]
pub struct DirArchive {
    dir: PathBuf,
}

impl DirArchive {
    /// The archive in `dir` (created if missing, made absolute).
    pub fn new(dir: impl Into<PathBuf>) -> Result<DirArchive, ArchiveError> {
        let given: PathBuf = dir.into();
        let config = |why: String| ArchiveError::Config {
            archive: given.display().to_string(),
            why,
        };
        let dir = std::path::absolute(&given).map_err(|e| config(e.to_string()))?;
        for sub in ["media", "episodes"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| config(format!("cannot create it: {e}")))?;
        }
        Ok(DirArchive { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn copy_path(&self, sha256: &str) -> Result<PathBuf, ArchiveError> {
        let sha256 = check_key(sha256)?;
        Ok(self.dir.join("media").join(&sha256[..2]).join(sha256))
    }

    fn episode_path(&self, key: &str) -> Result<PathBuf, ArchiveError> {
        Ok(self
            .dir
            .join("episodes")
            .join(format!("{}.json", check_key(key)?)))
    }

    fn unavailable(&self, what: &str, e: impl std::fmt::Display) -> ArchiveError {
        ArchiveError::Unavailable {
            archive: self.describe(),
            why: format!("{what}: {e}"),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(DirArchive) -> Result<T, ArchiveError> + Send + 'static,
    ) -> Result<T, ArchiveError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(me))
            .await
            .map_err(|e| self.unavailable("stopped", e))?
    }

    /// Writes `bytes` to `path` through a temporary file and a rename.
    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), ArchiveError> {
        let dir = path.parent().unwrap_or(&self.dir);
        let mut tmp = tempfile::Builder::new()
            .prefix(".")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| self.unavailable("cannot write", e))?;
        tmp.write_all(bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| self.unavailable("cannot write", e))?;
        tmp.persist(path)
            .map_err(|e| self.unavailable("cannot write", e.error))?;
        Ok(())
    }

    /// Reads an episode's file; `None` when there is none.
    fn read_episode(&self, path: &Path) -> Result<Option<EpisodeVersions>, ArchiveError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.unavailable("cannot read an episode", e)),
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            self.unavailable(
                &format!("the episode file {} is damaged", path.display()),
                e,
            )
        })
    }

    /// Runs `change` on the episode under `key` with the episodes' lock held, and writes
    /// what it returns.
    fn update_episode(
        &self,
        key: &str,
        change: impl FnOnce(Option<EpisodeVersions>) -> Result<EpisodeVersions, ArchiveError>,
    ) -> Result<EpisodeVersions, ArchiveError> {
        let path = self.episode_path(key)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("episodes").join(".lock"))
            .map_err(|e| self.unavailable("cannot lock the episodes", e))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| self.unavailable("cannot lock the episodes", e))?;
        let changed = change(self.read_episode(&path)?)?;
        let bytes = serde_json::to_vec_pretty(&changed)
            .map_err(|e| self.unavailable("cannot write an episode", e))?;
        self.write_atomic(&path, &bytes)?;
        Ok(changed)
    }
}

/// Hashes `reader` to its end: its SHA-256 and length.
fn hash_all(mut reader: impl Read) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok((hex(&hasher.finalize()), total));
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
}

#[async_trait]
impl MediaArchive for DirArchive {
    async fn keep(&self, sha256: &str, file: &Path) -> Result<Kept, ArchiveError> {
        let sha256 = check_key(sha256)?.to_string();
        let file = file.to_path_buf();
        self.blocking(move |me| {
            let path = me.copy_path(&sha256)?;
            if path.is_file() && me.verify_file(&sha256, &path)?.is_none() {
                return Ok(Kept::Already);
            }
            let dir = path.parent().unwrap_or(&me.dir).to_path_buf();
            std::fs::create_dir_all(&dir).map_err(|e| me.unavailable("cannot write", e))?;
            let mut source =
                std::fs::File::open(&file).map_err(|e| me.unavailable("cannot read", e))?;
            let mut tmp = tempfile::Builder::new()
                .prefix(&format!(".{sha256}."))
                .suffix(".tmp")
                .tempfile_in(&dir)
                .map_err(|e| me.unavailable("cannot write", e))?;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = source
                    .read(&mut buf)
                    .map_err(|e| me.unavailable("cannot read", e))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                tmp.write_all(&buf[..n])
                    .map_err(|e| me.unavailable("cannot write", e))?;
            }
            let found = hex(&hasher.finalize());
            if found != sha256 {
                return Err(ArchiveError::Mismatch {
                    expected: sha256,
                    found,
                });
            }
            tmp.as_file()
                .sync_all()
                .map_err(|e| me.unavailable("cannot write", e))?;
            tmp.persist(&path)
                .map_err(|e| me.unavailable("cannot write", e.error))?;
            Ok(Kept::New)
        })
        .await
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>, ArchiveError> {
        let path = self.copy_path(sha256)?;
        match tokio::fs::metadata(&path).await {
            Ok(meta) => Ok(Some(meta.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.unavailable("cannot read", e)),
        }
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Vec<u8>, ArchiveError> {
        let sha256 = check_key(sha256)?.to_string();
        self.blocking(move |me| {
            let path = me.copy_path(&sha256)?;
            let mut file = match std::fs::File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ArchiveError::NotFound(format!("copy {sha256}")))
                }
                Err(e) => return Err(me.unavailable("cannot read", e)),
            };
            let size = file
                .metadata()
                .map_err(|e| me.unavailable("cannot read", e))?
                .len();
            if range.start > range.end || range.end > size || range.end - range.start > MAX_READ {
                return Err(ArchiveError::BadRange {
                    sha256,
                    size,
                    start: range.start,
                    end: range.end,
                });
            }
            let mut out = vec![0u8; (range.end - range.start) as usize];
            file.seek(SeekFrom::Start(range.start))
                .and_then(|_| file.read_exact(&mut out))
                .map_err(|e| me.unavailable("cannot read", e))?;
            Ok(out)
        })
        .await
    }

    async fn copy_to(&self, sha256: &str, dest: &Path) -> Result<u64, ArchiveError> {
        let sha256 = check_key(sha256)?.to_string();
        let dest = dest.to_path_buf();
        self.blocking(move |me| {
            let path = me.copy_path(&sha256)?;
            let source = match std::fs::File::open(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ArchiveError::NotFound(format!("copy {sha256}")))
                }
                Err(e) => return Err(me.unavailable("cannot read", e)),
            };
            let out = std::fs::File::create(&dest)
                .map_err(|e| me.unavailable(&format!("cannot write {}", dest.display()), e))?;
            let result = (|| {
                let mut tee = Tee {
                    inner: source,
                    out: std::io::BufWriter::new(out),
                };
                let (found, size) =
                    hash_all(&mut tee).map_err(|e| me.unavailable("cannot copy", e))?;
                tee.out
                    .flush()
                    .map_err(|e| me.unavailable("cannot copy", e))?;
                if found != sha256 {
                    return Err(ArchiveError::Damaged {
                        sha256: sha256.clone(),
                        why: format!("its bytes hash to {found}"),
                    });
                }
                Ok(size)
            })();
            if result.is_err() {
                let _ = std::fs::remove_file(&dest);
            }
            result
        })
        .await
    }

    fn local_path(&self, sha256: &str) -> Option<PathBuf> {
        self.copy_path(sha256).ok().filter(|p| p.is_file())
    }

    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError> {
        self.blocking(|me| {
            let mut out = Vec::new();
            let media = me.dir.join("media");
            let shards = std::fs::read_dir(&media).map_err(|e| me.unavailable("cannot list", e))?;
            for shard in shards {
                let shard = shard.map_err(|e| me.unavailable("cannot list", e))?;
                let Ok(entries) = std::fs::read_dir(shard.path()) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if check_key(&name).is_err() {
                        continue; // a write under way, or not ours
                    }
                    let size = entry
                        .metadata()
                        .map_err(|e| me.unavailable("cannot list", e))?
                        .len();
                    out.push(CopyInfo { sha256: name, size });
                }
            }
            Ok(out)
        })
        .await
    }

    async fn verify(&self, sha256: &str) -> Result<Option<String>, ArchiveError> {
        let sha256 = check_key(sha256)?.to_string();
        self.blocking(move |me| {
            let path = me.copy_path(&sha256)?;
            me.verify_file(&sha256, &path)
        })
        .await
    }

    async fn versions(&self, key: &str) -> Result<Option<EpisodeVersions>, ArchiveError> {
        let path = self.episode_path(key)?;
        self.blocking(move |me| me.read_episode(&path)).await
    }

    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError> {
        self.blocking(|me| {
            let dir = me.dir.join("episodes");
            let entries = std::fs::read_dir(&dir).map_err(|e| me.unavailable("cannot list", e))?;
            let mut out = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(key) = name.strip_suffix(".json") else {
                    continue;
                };
                if check_key(key).is_err() {
                    continue;
                }
                if let Some(episode) = me.read_episode(&entry.path())? {
                    out.push(episode);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn record(
        &self,
        key: &str,
        title: &str,
        date_aired: DateTime<Utc>,
        version: Version,
    ) -> Result<EpisodeVersions, ArchiveError> {
        check_key(&version.sha256)?;
        let key = check_key(key)?.to_string();
        let title = title.to_string();
        self.blocking(move |me| {
            me.update_episode(&key, |known| {
                Ok(match known {
                    Some(mut episode) => {
                        episode.add(version);
                        episode
                    }
                    None => EpisodeVersions {
                        title,
                        date_aired,
                        chosen: version.sha256.clone(),
                        versions: vec![version],
                    },
                })
            })
        })
        .await
    }

    async fn choose(&self, key: &str, sha256: &str) -> Result<EpisodeVersions, ArchiveError> {
        let key = check_key(key)?.to_string();
        let sha256 = check_key(sha256)?.to_string();
        self.blocking(move |me| {
            me.update_episode(&key.clone(), |known| {
                let mut episode =
                    known.ok_or_else(|| ArchiveError::NotFound(format!("episode {key}")))?;
                if !episode.versions.iter().any(|v| v.sha256 == sha256) {
                    return Err(ArchiveError::NotFound(format!(
                        "version {sha256} of {:?}",
                        episode.title
                    )));
                }
                episode.chosen = sha256;
                Ok(episode)
            })
        })
        .await
    }

    async fn put_report(&self, report: &VerifyReport) -> Result<(), ArchiveError> {
        let bytes = serde_json::to_vec_pretty(report)
            .map_err(|e| self.unavailable("cannot write the report", e))?;
        self.blocking(move |me| me.write_atomic(&me.dir.join("verify.json"), &bytes))
            .await
    }

    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError> {
        self.blocking(|me| match std::fs::read(me.dir.join("verify.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| me.unavailable("the report is damaged", e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(me.unavailable("cannot read the report", e)),
        })
        .await
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

impl DirArchive {
    /// `None` when the file at `path` hashes to `sha256`; else what is wrong.
    fn verify_file(&self, sha256: &str, path: &Path) -> Result<Option<String>, ArchiveError> {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArchiveError::NotFound(format!("copy {sha256}")))
            }
            Err(e) => return Err(self.unavailable("cannot read", e)),
        };
        let (found, size) = hash_all(file).map_err(|e| self.unavailable("cannot read", e))?;
        Ok((found != sha256).then(|| format!("its {size} bytes hash to {found}")))
    }
}

/// A reader that writes what it reads to `out`.
struct Tee<R, W> {
    inner: R,
    out: W,
}

impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.out.write_all(&buf[..n])?;
        Ok(n)
    }
}
