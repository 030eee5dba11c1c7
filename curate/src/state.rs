//! The curators' state files: what was sent, so that an unchanged item is not sent again and
//! a changed one is. One JSON file per curator (`--state`), read at start and written
//! atomically (a temporary file in the same folder, synced, then renamed over the old one)
//! after each feed or path: a crash leaves the old file or the new one, never half of one.
//!
//! Losing the file loses nothing but politeness: everything is sent again once (the
//! archivists' upserts make that harmless), and each feed is fetched in full once.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::CurateError;

/// The feed curator's state (`archivist curate feed`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct FeedsState {
    /// Each feed by the address given on the command line.
    #[serde(default)]
    pub feeds: BTreeMap<String, FeedState>,
}

/// One feed's state.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct FeedState {
    /// Where the feed is fetched from: the address given, or where a permanent redirect
    /// (301, 308) sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The ETag of the last answer with a body, sent back as If-None-Match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The Last-Modified of the last answer with a body, sent back as If-Modified-Since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// The last time the feed was read (fetched in full, or answered 304).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_read: Option<DateTime<Utc>>,
    /// The feed asked not to be fetched before this time (Retry-After of a 429 or 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<DateTime<Utc>>,
    /// What was sent, by the item's key (`guid:…`, `url:…`, `title:…`).
    #[serde(default)]
    pub items: BTreeMap<String, SentEpisode>,
}

/// An episode as it was last sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SentEpisode {
    /// Of every field sent but the curation dates.
    pub fingerprint: String,
    /// The identity it was first sent under: kept when the feed retitles or redates the item,
    /// since a new identity would be a second episode (and its old `media_uri` a conflict).
    pub title: String,
    /// The airing date it was first sent under (with the title, its identity).
    pub date_aired: DateTime<Utc>,
    /// When it was first sent: its `initial_date_curated`.
    pub first_sent: DateTime<Utc>,
}

/// The clip curator's state (`archivist curate clips`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ClipsState {
    /// Each file by its absolute path.
    #[serde(default)]
    pub clips: BTreeMap<String, SentClip>,
}

/// A clip file as it was last sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SentClip {
    /// The title it was sent under: another file of the same name is another clip's claim.
    #[serde(default)]
    pub title: String,
    /// The description sent (the file's artist and album tags), so that a file unchanged on
    /// disk is not opened again to learn it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch (0 where the system keeps none).
    pub modified_ns: i128,
    /// SHA-256 of the content, hex.
    pub sha256: String,
    /// Of every field sent but the curation dates, and the content hash.
    pub fingerprint: String,
    /// When it was first sent: its `initial_date_curated`.
    pub first_sent: DateTime<Utc>,
}

/// Reads a state file; a missing one is an empty state. One that cannot be read is
/// [`CurateError::BadState`], naming it: it is never overwritten unread.
pub fn load<T: DeserializeOwned + Default>(path: &Path) -> Result<T, CurateError> {
    let bad = |source: Box<dyn std::error::Error + Send + Sync>| CurateError::BadState {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| bad(Box::new(e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(bad(Box::new(e))),
    }
}

/// Writes a state file atomically: a temporary file in the same folder, synced, then
/// renamed over the old one.
pub fn save<T: Serialize>(path: &Path, state: &T) -> Result<(), CurateError> {
    let failed = |source: std::io::Error| CurateError::StateWrite {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".archivist-state")
        .tempfile_in(dir)
        .map_err(failed)?;
    let write = |file: &mut tempfile::NamedTempFile| -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        serde_json::to_writer(&mut out, state)?;
        out.write_all(b"\n")?;
        out.flush()?;
        drop(out);
        file.as_file().sync_all()
    };
    write(&mut file).map_err(failed)?;
    file.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        let empty: FeedsState = load(&path).unwrap();
        assert!(empty.feeds.is_empty());
        let mut state = FeedsState::default();
        state.feeds.insert(
            "https://x/feed".into(),
            FeedState {
                etag: Some("\"abc\"".into()),
                ..FeedState::default()
            },
        );
        save(&path, &state).unwrap();
        let back: FeedsState = load(&path).unwrap();
        assert_eq!(
            back.feeds["https://x/feed"].etag.as_deref(),
            Some("\"abc\"")
        );
        std::fs::write(&path, "not json").unwrap();
        let e = load::<FeedsState>(&path).unwrap_err();
        assert!(e.is_configuration(), "{e}");
        assert!(e.to_string().starts_with("the state file "), "{e}");
    }
}
