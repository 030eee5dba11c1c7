//! What the archive knows of each episode: the versions of its media it kept
//! ([`EpisodeVersions`], one [`Version`] each), under the episode's [key](episode_key).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::store::hex;

/// One version of an episode's media, as the archive kept it: a whole copy, checked, named
/// by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    /// The SHA-256 of the copy (64 lowercase hexadecimal digits): its name in the archive.
    pub sha256: String,
    /// Its length in bytes.
    pub size: u64,
    /// The URI it was fetched from.
    pub media_uri: String,
    /// The server's `ETag` for it, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The server's `Last-Modified` for it, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    /// The episode's `media_type` (`mp3`, `m4a`, …) when it was kept: the extension an
    /// export gives the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// When the archive kept it.
    pub kept_at: DateTime<Utc>,
    /// Other URIs that served these same bytes (a curator that moved the episode to another
    /// host): a version from each of them is kept, so none is fetched again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_from: Vec<String>,
}

/// The versions an archive kept of one episode's media, and the one answered for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeVersions {
    /// The episode's title (with `date_aired`, its identity).
    pub title: String,
    /// When the episode aired.
    pub date_aired: DateTime<Utc>,
    /// The SHA-256 of the version research reads and answers for: the first kept, until an
    /// operator chooses another ([`crate::MediaArchive::choose`]).
    pub chosen: String,
    /// Every version kept, oldest first; never more than one with the same SHA-256.
    pub versions: Vec<Version>,
}

impl EpisodeVersions {
    /// The version research reads and answers for.
    pub fn chosen(&self) -> Option<&Version> {
        self.versions.iter().find(|v| v.sha256 == self.chosen)
    }

    /// The version fetched from `media_uri` most recently, if any was.
    pub fn from_uri(&self, media_uri: &str) -> Option<&Version> {
        self.versions
            .iter()
            .rev()
            .find(|v| v.media_uri == media_uri || v.also_from.iter().any(|u| u == media_uri))
    }

    /// Adds `version`: a new SHA-256 as a version of its own; a known one fetched from
    /// another URI as that URI in the known version's [`Version::also_from`]. Whether
    /// anything changed.
    pub fn add(&mut self, version: Version) -> bool {
        match self
            .versions
            .iter_mut()
            .find(|v| v.sha256 == version.sha256)
        {
            None => {
                self.versions.push(version);
                true
            }
            Some(known) => {
                let uri = version.media_uri;
                if known.media_uri == uri || known.also_from.contains(&uri) {
                    false
                } else {
                    known.also_from.push(uri);
                    true
                }
            }
        }
    }
}

/// The key under which the archive keeps what it knows of the episode (`title`,
/// `date_aired`): the SHA-256 (lowercase hex) of the title, a line feed, and the airing time
/// in RFC 3339 with nanoseconds and `Z`. The same episode gives the same key on every
/// participant, whatever its `media_uri`.
pub fn episode_key(title: &str, date_aired: &DateTime<Utc>) -> String {
    let aired = date_aired.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut hasher = Sha256::new();
    hasher.update(title.as_bytes());
    hasher.update(b"\n");
    hasher.update(aired.as_bytes());
    hex(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_name_the_episode_not_its_uri() {
        let aired = DateTime::parse_from_rfc3339("2025-12-31T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let key = episode_key("Episode 4012", &aired);
        assert_eq!(key.len(), 64);
        assert_eq!(key, episode_key("Episode 4012", &aired));
        assert_ne!(key, episode_key("Episode 4013", &aired));
        let later = aired + chrono::Duration::nanoseconds(1);
        assert_ne!(key, episode_key("Episode 4012", &later));
    }
}
