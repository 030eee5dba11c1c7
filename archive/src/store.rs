//! [`MediaArchive`] and what it answers with.

use std::ops::Range;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::versions::{EpisodeVersions, Version};

/// The most bytes [`MediaArchive::read`] returns at once (a player's ranges and the
/// analyser's windows are far smaller; a longer range is read in pieces).
pub const MAX_READ: u64 = 16 << 20;

/// What went wrong in a media archive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The copy named `sha256` is kept but is not what was kept: its bytes no longer hash to
    /// its name, or it is cut short. Nothing of it was returned, and it is never deleted.
    #[error("the archive's copy {sha256} is damaged: {why}")]
    Damaged {
        /// The copy's SHA-256.
        sha256: String,
        /// What is wrong with it.
        why: String,
    },
    /// A file given to [`MediaArchive::keep`] does not hash to the SHA-256 it was given
    /// with: nothing was kept.
    #[error("not kept: the file hashes to {found}, not {expected}")]
    Mismatch {
        /// The SHA-256 the caller said.
        expected: String,
        /// The SHA-256 of what was read.
        found: String,
    },
    /// No copy is kept under this SHA-256, or no episode under this key.
    #[error("the archive holds no {0}")]
    NotFound(String),
    /// Not a SHA-256 or an episode key (64 lowercase hexadecimal digits).
    #[error("not a SHA-256: {0:?} (64 lowercase hexadecimal digits)")]
    BadKey(String),
    /// A range outside the copy, or longer than [`MAX_READ`].
    #[error("the range {start}..{end} is not within the copy {sha256} ({size} bytes) or is longer than {MAX_READ} bytes")]
    BadRange {
        /// The copy.
        sha256: String,
        /// Its length.
        size: u64,
        /// The range asked for.
        start: u64,
        /// The range asked for.
        end: u64,
    },
    /// The archive cannot be used as given (a bad URL, a directory that cannot be made).
    #[error("media archive {archive}: {why}")]
    Config {
        /// The archive as given.
        archive: String,
        /// What is wrong.
        why: String,
    },
    /// Reading or writing the archive failed (a disk error, S3 unreachable or refusing);
    /// trying again later may work.
    #[error("media archive {archive}: {why}")]
    Unavailable {
        /// The archive, as [`MediaArchive::describe`] names it.
        archive: String,
        /// What happened, without secrets.
        why: String,
    },
}

/// One kept copy, as [`MediaArchive::copies`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyInfo {
    /// Its SHA-256, its name.
    pub sha256: String,
    /// Its length in bytes.
    pub size: u64,
}

/// What [`MediaArchive::keep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The copy is new: its bytes were written.
    New,
    /// A whole copy was already kept: nothing was written.
    Already,
}

/// The last check of every kept copy (`archive verify`), kept in the archive for the status
/// page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// When the check ended.
    pub checked_at: DateTime<Utc>,
    /// Copies checked.
    pub copies: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Each copy that failed, and why.
    pub failed: Vec<(String, String)>,
}

/// Where each episode's media is kept, once, by its SHA-256, with the versions of each
/// episode. Implementations: [`crate::DirArchive`], [`crate::S3Archive`].
///
/// Copies are never removed by the archive: a damaged copy is reported, never deleted.
#[async_trait]
pub trait MediaArchive: Send + Sync + std::fmt::Debug {
    /// Keeps the file at `file` under `sha256`, checking while it copies that the file hashes
    /// to it ([`ArchiveError::Mismatch`] else, nothing kept). Atomic: a reader sees no copy or
    /// the whole copy. Kept already (a whole copy): nothing is written.
    async fn keep(&self, sha256: &str, file: &Path) -> Result<Kept, ArchiveError>;

    /// The length of the copy kept under `sha256`, or `None` when there is none.
    async fn size(&self, sha256: &str) -> Result<Option<u64>, ArchiveError>;

    /// The bytes `range` of the copy under `sha256` (at most [`MAX_READ`] of them).
    /// [`ArchiveError::NotFound`] without a copy; [`ArchiveError::BadRange`] for a range not
    /// within it. Not checked against the SHA-256 (a range cannot be): `verify` is.
    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Vec<u8>, ArchiveError>;

    /// Writes the whole copy under `sha256` to `dest`, checked against its SHA-256 on the way
    /// ([`ArchiveError::Damaged`] else, and `dest` is removed); its length.
    async fn copy_to(&self, sha256: &str, dest: &Path) -> Result<u64, ArchiveError>;

    /// The copy's own file, when the archive is a directory on this machine (read it, never
    /// write it); `None` for an archive elsewhere (S3), or without a copy.
    fn local_path(&self, sha256: &str) -> Option<PathBuf>;

    /// Every kept copy, in no particular order.
    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError>;

    /// Reads the whole copy under `sha256` and hashes it: `None` when it is whole, else what
    /// is wrong with it. Never deletes anything.
    async fn verify(&self, sha256: &str) -> Result<Option<String>, ArchiveError>;

    /// What the archive knows of the episode under `key` ([`crate::episode_key`]).
    async fn versions(&self, key: &str) -> Result<Option<EpisodeVersions>, ArchiveError>;

    /// Every episode the archive knows, in no particular order.
    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError>;

    /// Records `version` (its copy already kept) as a version of the episode (`title`,
    /// `date_aired`) under `key`: added when its SHA-256 is new for the episode (the first
    /// becoming the chosen one), else nothing changes. Two participants recording at once
    /// lose neither version. What the archive knows of the episode afterwards.
    async fn record(
        &self,
        key: &str,
        title: &str,
        date_aired: DateTime<Utc>,
        version: Version,
    ) -> Result<EpisodeVersions, ArchiveError>;

    /// Makes the version `sha256` (already recorded for the episode under `key`) the one
    /// research reads and answers for. [`ArchiveError::NotFound`] for a version not recorded.
    async fn choose(&self, key: &str, sha256: &str) -> Result<EpisodeVersions, ArchiveError>;

    /// Keeps the report of the last check of every copy.
    async fn put_report(&self, report: &VerifyReport) -> Result<(), ArchiveError>;

    /// The report of the last check, if any was made.
    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError>;

    /// Names the archive in logs and messages (never a secret), as `s3://bucket/prefix` or a
    /// directory.
    fn describe(&self) -> String;
}

/// `key` if it is a SHA-256 or an episode key (64 lowercase hexadecimal digits), else
/// [`ArchiveError::BadKey`]: what names a file or an object is never anything else.
pub fn check_key(key: &str) -> Result<&str, ArchiveError> {
    let ok = key.len() == 64
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(key)
    } else {
        Err(ArchiveError::BadKey(key.to_string()))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
