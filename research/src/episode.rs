//! [`EpisodeMedia`]: a work item's episode, fetched only when the analyser asks for it. The
//! runtime hands it to an analyser that [fetches the episode itself](crate::Analyser::fetches_episode)
//! (the reference analyser with a print store), which may answer from a print without the
//! episode's audio: it looks at what identifies the media ([`EpisodeMedia::freshness`]) and
//! reads byte ranges of it ([`EpisodeMedia::ranges`]) instead.
//!
//! With a media archive ([`Media::with_archive`]) and the item's episode given
//! ([`EpisodeMedia::with_episode`]), all of that is of the episode's chosen version in the
//! archive: fetched from the show only when no version from its `media_uri` is kept, its
//! print keyed and checked by the copy's SHA-256 ([`MediaIdentity::Archived`], no request to
//! the show), its ranges read from the copy ([`Ranges::File`] on this machine, else
//! [`Ranges::Archive`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use archive::{MediaArchive, Version};
use archivist::messages::EpisodeInfo;

use crate::media::{self, CopySource, Entry, Media, MediaError, Source};
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

/// Byte ranges of the episode's media: over HTTP (`Range` requests), from a local file, or
/// from the media archive's copy.
#[derive(Debug)]
pub enum Ranges {
    /// Remote media.
    Http(Box<HttpRanges>),
    /// A local file (local media, or a kept copy on this machine).
    File(FileRanges),
    /// A copy kept in a media archive elsewhere (S3).
    Archive(ArchiveRanges),
}

impl Ranges {
    /// The media's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Ranges::Http(r) => r.len(),
            Ranges::File(r) => r.len(),
            Ranges::Archive(r) => r.len,
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
            Ranges::Archive(r) => r.read_at(start, len),
        }
    }

    /// Why reads failed, if the server answered a range request with the whole body.
    pub fn fallback(&self) -> Option<printing::Fallback> {
        match self {
            Ranges::Http(r) => r.fallback(),
            Ranges::File(_) | Ranges::Archive(_) => None,
        }
    }
}

/// Reads of byte ranges of a copy kept in a media archive ([`MediaArchive::read`]), from a
/// blocking thread (the analyser's), counted as range requests.
pub struct ArchiveRanges {
    archive: Arc<dyn MediaArchive>,
    sha256: String,
    len: u64,
    runtime: tokio::runtime::Handle,
    cancel: CancellationToken,
    counters: Arc<PrintCounters>,
}

impl std::fmt::Debug for ArchiveRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveRanges")
            .field("archive", &self.archive.describe())
            .field("sha256", &self.sha256)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl ArchiveRanges {
    /// Up to `len` bytes from `start` (fewer at the end of the copy).
    pub fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        if len == 0 || start >= self.len {
            return Ok(Vec::new());
        }
        let end = start
            .saturating_add(len as u64)
            .min(self.len)
            .min(start.saturating_add(archive::MAX_READ));
        let (archive, sha256, cancel) = (
            self.archive.clone(),
            self.sha256.clone(),
            self.cancel.clone(),
        );
        let read = self.runtime.block_on(async move {
            tokio::select! {
                _ = cancel.cancelled() => Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "the researcher is stopping")),
                read = archive.read(&sha256, start..end) => read.map_err(std::io::Error::other),
            }
        })?;
        self.counters.ranged(read.len() as u64);
        Ok(read)
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
    /// The work item's episode, for the media archive ([`EpisodeMedia::with_episode`]).
    episode: Option<EpisodeInfo>,
    /// The archive's version researched, once known.
    version: tokio::sync::OnceCell<Version>,
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
            episode: None,
            version: tokio::sync::OnceCell::new(),
        }
    }

    /// The same, for the work item's `episode` (whose `media_uri` is this one's): with a
    /// media archive, the episode is researched from its chosen version there (see the
    /// module's documentation). Without it, the archive is not used.
    pub fn with_episode(mut self, episode: EpisodeInfo) -> EpisodeMedia {
        self.episode = Some(episode);
        self
    }

    /// The archive and the episode's version researched there, when there is an archive
    /// (fetching and keeping the media first when no version from its URI is kept).
    async fn archived(&self) -> Result<Option<(Arc<dyn MediaArchive>, &Version)>, EpisodeError> {
        let (Some(archive), Some(episode)) = (self.media.archive(), &self.episode) else {
            return Ok(None);
        };
        let version = self
            .version
            .get_or_try_init(|| {
                self.media
                    .archived_version(archive, episode, self.lease_end, &self.cancel)
            })
            .await?;
        Ok(Some((archive.clone(), version)))
    }

    /// The key of the episode's print in a print store: of the chosen copy's SHA-256 with a
    /// media archive ([`printing::archived_print_key`]), else of the media URI
    /// ([`prints::print_key`]). With an archive, this keeps the media first when no version
    /// from its URI is kept.
    pub async fn print_key(&self) -> Result<String, EpisodeError> {
        Ok(match self.archived().await? {
            Some((_, version)) => printing::archived_print_key(&version.sha256),
            None => prints::print_key(&self.uri),
        })
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
    /// With a media archive, the chosen version's copy (never fetched again: `afresh` is
    /// ignored).
    pub async fn fetch(&self, afresh: bool) -> Result<FetchedEpisode, EpisodeError> {
        let entry = match self.archived().await? {
            Some((archive, version)) => self.media.archived_copy(&archive, version).await?,
            None => {
                if afresh {
                    self.media.forget(&self.uri);
                }
                self.media
                    .fetch_until(&self.uri, self.lease_end, &self.cancel)
                    .await?
                    .entry
            }
        };
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
    /// (http(s)), or the file's size and time. With a media archive: whether `identity` is
    /// the chosen copy's, without a request.
    pub async fn freshness(&self, identity: &MediaIdentity) -> Result<Freshness, EpisodeError> {
        if let Some((_, version)) = self.archived().await? {
            let same = matches!(identity, MediaIdentity::Archived { sha256, size }
                if *sha256 == version.sha256 && *size == version.size);
            return Ok(if same {
                Freshness::Same
            } else {
                Freshness::Changed
            });
        }
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
        if let Some((archive, version)) = self.archived().await? {
            let ours = matches!(identity, MediaIdentity::Archived { sha256, .. } if *sha256 == version.sha256);
            if !ours {
                return Ok(None);
            }
            return Ok(Some(
                match self.media.archived_source(&archive, version).await? {
                    CopySource::File(file, len) => Ranges::File(FileRanges::new(file, len)),
                    CopySource::Cached(entry) => {
                        let file = std::fs::File::open(&entry.path).map_err(|e| {
                            EpisodeError::Passing(format!("cannot read the media cache: {e}"))
                        })?;
                        let ranges = FileRanges::new(file, entry.size);
                        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(entry);
                        Ranges::File(ranges)
                    }
                    CopySource::Archive => Ranges::Archive(ArchiveRanges {
                        archive,
                        sha256: version.sha256.clone(),
                        len: version.size,
                        runtime,
                        cancel: self.cancel.clone(),
                        counters: self.counters.clone(),
                    }),
                },
            ));
        }
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
