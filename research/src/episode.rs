//! [`EpisodeMedia`]: a work item's episode, fetched only when the analyser asks for it. The
//! runtime hands it to an analyser that [fetches the episode itself](crate::Analyser::fetches_episode)
//! (the reference analyser with a print store), which may answer from a print without the
//! episode's audio: it looks at what identifies the media ([`EpisodeMedia::freshness`]) and
//! reads byte ranges of it ([`EpisodeMedia::ranges`]) instead.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::media::{self, Entry, Media, MediaError, Source};
use crate::printing::{self, FileRanges, Freshness, HttpRanges, MediaIdentity, PrintCounters};

/// Why the episode could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpisodeError {
    /// For a reason that will not pass (404, 410, no such file, refused): every pair of the
    /// item is failed research, with this reason.
    #[error("{0}")]
    Gone(String),
    /// For a reason that may pass: the item is tried again.
    #[error("{0}")]
    Passing(String),
    /// The researcher is stopping.
    #[error("the researcher is stopping")]
    Cancelled,
}

impl From<MediaError> for EpisodeError {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Gone(why) => EpisodeError::Gone(why),
            MediaError::Passing(why) => EpisodeError::Passing(why),
            MediaError::Cancelled => EpisodeError::Cancelled,
        }
    }
}

/// The episode's media, fetched in full.
#[derive(Debug, Clone)]
pub struct FetchedEpisode {
    /// A local file with its bytes (a download in the cache, or the file itself).
    pub path: PathBuf,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// What identifies it where it came from, if known.
    pub identity: Option<MediaIdentity>,
}

/// Byte ranges of the episode's media: over HTTP (`Range` requests) or from a local file.
#[derive(Debug)]
pub enum Ranges {
    /// Remote media.
    Http(Box<HttpRanges>),
    /// A local file.
    File(FileRanges),
}

impl Ranges {
    /// The media's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Ranges::Http(r) => r.len(),
            Ranges::File(r) => r.len(),
        }
    }

    /// Whether the media is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `len` bytes from `start`.
    pub fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        match self {
            Ranges::Http(r) => r.read_at(start, len),
            Ranges::File(r) => r.read_at(start, len),
        }
    }

    /// Why reads failed, if the server answered a range request with the whole body.
    pub fn fallback(&self) -> Option<printing::Fallback> {
        match self {
            Ranges::Http(r) => r.fallback(),
            Ranges::File(_) => None,
        }
    }
}

/// A work item's episode, fetched when asked (see the module's documentation).
pub struct EpisodeMedia {
    media: Arc<Media>,
    uri: String,
    lease_end: Option<chrono::DateTime<chrono::Utc>>,
    cancel: CancellationToken,
    counters: Arc<PrintCounters>,
    /// The download in use (kept from eviction while the item lives).
    held: Mutex<Option<Arc<Entry>>>,
}

impl std::fmt::Debug for EpisodeMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeMedia")
            .field("uri", &messagebus::redact_url(&self.uri))
            .finish_non_exhaustive()
    }
}

impl EpisodeMedia {
    /// The episode at `uri`, fetched by `media` when asked (stopping when the item's lease
    /// ends at `lease_end`, or `cancel` is cancelled), its prints counted in `counters`.
    pub fn new(
        media: Arc<Media>,
        uri: &str,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: CancellationToken,
        counters: Arc<PrintCounters>,
    ) -> EpisodeMedia {
        EpisodeMedia {
            media,
            uri: uri.to_string(),
            lease_end,
            cancel,
            counters,
            held: Mutex::new(None),
        }
    }

    /// The episode's media URI, as the work item gives it.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// What the researcher counts of prints.
    pub fn counters(&self) -> &Arc<PrintCounters> {
        &self.counters
    }

    /// The episode's media in full, from the media cache when it holds it; with `afresh`,
    /// downloaded again whatever the cache holds (the media changed where it came from).
    pub async fn fetch(&self, afresh: bool) -> Result<FetchedEpisode, EpisodeError> {
        if afresh {
            self.media.forget(&self.uri);
        }
        let fetched = self
            .media
            .fetch_until(&self.uri, self.lease_end, &self.cancel)
            .await?;
        let entry = fetched.entry;
        let out = FetchedEpisode {
            path: entry.path.clone(),
            sha256: entry.sha256.clone(),
            identity: entry.identity.clone(),
        };
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(entry);
        Ok(out)
    }

    /// `text` with the path of the fetched episode replaced by its URI.
    pub fn name_uri(&self, text: &str) -> String {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        media::name_uris(text, held.as_deref())
    }

    /// Whether the media is still the one `identity` describes: a conditional request
    /// (http(s)), or the file's size and time.
    pub async fn freshness(&self, identity: &MediaIdentity) -> Result<Freshness, EpisodeError> {
        match Source::of(&self.uri)? {
            Source::Remote(url) => {
                let check = printing::check_remote(self.media.fetcher(), url, identity);
                tokio::select! {
                    _ = self.cancel.cancelled() => Err(EpisodeError::Cancelled),
                    checked = check => checked.map_err(EpisodeError::Passing),
                }
            }
            Source::Local(path) => match self.media.open_local(&path).await {
                Ok((_, meta, _)) => Ok(printing::check_local(&meta, identity)),
                Err(MediaError::Gone(why)) => Ok(Freshness::Gone(why)),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// Byte ranges of the media `identity` describes, read on `runtime` (from a blocking
    /// thread); `None` when its length is not known.
    pub async fn ranges(
        &self,
        identity: &MediaIdentity,
        runtime: tokio::runtime::Handle,
    ) -> Result<Option<Ranges>, EpisodeError> {
        match Source::of(&self.uri)? {
            Source::Remote(url) => Ok(HttpRanges::new(
                self.media.fetcher().clone(),
                url,
                identity,
                runtime,
                self.cancel.clone(),
                self.counters.clone(),
            )
            .map(|r| Ranges::Http(Box::new(r)))),
            Source::Local(path) => {
                let (file, meta, _) = self.media.open_local(&path).await?;
                Ok(Some(Ranges::File(FileRanges::new(file, meta.len()))))
            }
        }
    }
}

impl analysis::ByteSource for Ranges {
    fn len(&self) -> u64 {
        Ranges::len(self)
    }

    fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        Ranges::read_at(self, start, len)
    }
}
