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

use super::bad_state;

/// The state of `curate feed`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct FeedsState {
    /// Each feed by the address given on the command line.
    #[serde(default)]
    pub(crate) feeds: BTreeMap<String, FeedState>,
}

/// One feed's state.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct FeedState {
    /// Where the feed is fetched from: the address given, or where a permanent redirect
    /// (301, 308) sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_modified: Option<String>,
    /// The last time the feed was read (fetched in full, or answered 304).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_read: Option<DateTime<Utc>>,
    /// The feed asked not to be fetched before this time (Retry-After of a 429 or 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) not_before: Option<DateTime<Utc>>,
    /// What was sent, by the item's key (`guid:…`, `url:…`, `title:…`).
    #[serde(default)]
    pub(crate) items: BTreeMap<String, SentEpisode>,
}

/// An episode as it was last sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SentEpisode {
    /// Of every field sent but the curation dates.
    pub(crate) fingerprint: String,
    /// The identity it was first sent under: kept when the feed retitles or redates the item,
    /// since a new identity would be a second episode (and its old `media_uri` a conflict).
    pub(crate) title: String,
    pub(crate) date_aired: DateTime<Utc>,
    /// When it was first sent: its `initial_date_curated`.
    pub(crate) first_sent: DateTime<Utc>,
}

/// The state of `curate clips`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ClipsState {
    /// Each file by its absolute path.
    #[serde(default)]
    pub(crate) clips: BTreeMap<String, SentClip>,
}

/// A clip file as it was last sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SentClip {
    /// The title it was sent under: another file of the same name is another clip's claim.
    #[serde(default)]
    pub(crate) title: String,
    /// The description sent (the file's artist and album tags), so that a file unchanged on
    /// disk is not opened again to learn it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) description: String,
    pub(crate) size: u64,
    /// Modification time, nanoseconds since the epoch (0 where the system keeps none).
    pub(crate) modified_ns: i128,
    /// SHA-256 of the content, hex.
    pub(crate) sha256: String,
    /// Of every field sent but the curation dates, and the content hash.
    pub(crate) fingerprint: String,
    /// When it was first sent: its `initial_date_curated`.
    pub(crate) first_sent: DateTime<Utc>,
}

/// Reads a state file; a missing one is an empty state. One that cannot be read is a usage
/// error (exit 2) naming it: it is never overwritten unread.
pub(crate) fn load<T: DeserializeOwned + Default>(path: &Path) -> anyhow::Result<T> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| bad_state(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(bad_state(path, e)),
    }
}

/// Writes a state file atomically.
pub(crate) fn save<T: Serialize>(path: &Path, state: &T) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".archivist-state")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write the state file {}", path.display()))?;
    let write = |file: &mut tempfile::NamedTempFile| -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(file.as_file_mut());
        serde_json::to_writer(&mut out, state)?;
        out.write_all(b"\n")?;
        out.flush()?;
        drop(out);
        file.as_file().sync_all()
    };
    write(&mut file).with_context(|| format!("cannot write the state file {}", path.display()))?;
    file.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write the state file {}", path.display()))?;
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
        assert!(load::<FeedsState>(&path).is_err());
    }
}
