//! [`Media`], media for the analyser: `http(s)://` URLs downloaded into the cache directory,
//! `file://` URLs and plain paths read where they are; each with the SHA-256 of its bytes (the
//! results' `episode_hash` / `clip_hash`).
//!
//! Local media: regular files only (a device such as `/dev/zero`, a FIFO, a socket or a
//! directory is refused, without blocking on it), read up to `--max-media-size` however much
//! the file grows meanwhile, and with `--media-root` only inside those folders (checked on the
//! file opened, symlinks and `..` resolved).
//!
//! The cache directory (`archivist research`'s default: `$XDG_CACHE_HOME/archivist/media`,
//! else `~/.cache/archivist/media`) outlives the process and is shared by every researcher
//! pointed at it. Its files:
//!
//! - `<sha256 of the bytes>.media`: a finished download, named by its content (so a name is
//!   written once, and what a name holds never changes);
//! - `<sha256 of the URI>.uri`: a symlink to the download of that URI;
//! - `….part`: a download under way, hashed and counted on the way, cut off at the size
//!   limit, then linked into place (never over an existing file) when whole.
//!
//! A researcher holds a shared `flock` on each download its items use; eviction (the least
//! recently used files until the directory holds at most `--cache-size` bytes) takes the
//! exclusive lock without waiting, so a file in use anywhere stays, even when that leaves the
//! cache over its size for a while. One download per URI at a time in a process: a second item
//! asking for it waits and then finds it cached; two processes may download one URI at once,
//! and the second finds the first's file in place and uses it.
//!
//! What fails how: 404 and 410, a missing local file, a file that is not a regular file or is
//! outside every `--media-root`, a file over the size limit, a URI scheme no researcher reads
//! are *gone* (will not pass: the pairs are reported as failed research); connection errors,
//! timeouts, 429 and 5xx are retried with exponential backoff, honouring `Retry-After`, and
//! once the attempts are spent the item fails for another try (as do other statuses, such as
//! 401 or 403, which a person can fix). A refused address is *gone* as well.
//!
//! Media addresses come from feeds written by others: a download connects to public
//! addresses only, checked on the address connected to and at every redirect hop
//! ([`net::address_policy`]), unless `--allow-private-addresses`; a refused address is
//! *gone*, its reason naming the address and the flag. A download must keep up an average of
//! `--fetch-min-rate` after its first [`RATE_GRACE`] (so its deadline follows its size: a
//! server sending a byte a minute cannot hold a slot, and the URI's lock, for days), and
//! stops when the item's lease ends: its pairs are then someone else's.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use net::address_policy::AddressPolicy;
use net::fetch::{FetchConfig, FetchError, Fetcher, Status};

use archive::MediaArchive;

use crate::printing::MediaIdentity;
use crate::ResearchError;

mod archived;
pub(crate) use archived::CopySource;

/// Settings of the media fetcher. Each names the `archivist research` option that sets it.
#[derive(Debug, Clone)]
pub struct MediaConfig {
    /// Where downloads are kept, across restarts; researchers on one machine may share it
    /// (`--cache-dir`). Created if missing; made absolute.
    pub cache_dir: PathBuf,
    /// The most bytes of finished downloads kept, the least recently used evicted
    /// (`--cache-size`).
    pub cache_size: u64,
    /// The largest media file fetched or read; a larger one is failed research
    /// (`--max-media-size`).
    pub max_size: u64,
    /// The folders local media must be in (`--media-root`); each must be an existing folder.
    /// Empty: anywhere.
    pub media_roots: Vec<PathBuf>,
    /// The longest wait to connect to a media server (`--fetch-connect-timeout`).
    pub connect_timeout: Duration,
    /// The longest wait for the next bytes of a response (`--fetch-read-timeout`).
    pub read_timeout: Duration,
    /// Tries of one download before the item fails (`--fetch-attempts`).
    pub attempts: u32,
    /// Which addresses downloads may connect to (`--allow-private-addresses`).
    pub addresses: AddressPolicy,
    /// The lowest average rate of a download after [`RATE_GRACE`], in bytes a second; 0:
    /// none (`--fetch-min-rate`).
    pub min_rate: u64,
}

/// `--media-root`s, canonical: each must be an existing folder.
fn media_roots(given: &[PathBuf]) -> Result<Vec<PathBuf>, ResearchError> {
    given
        .iter()
        .map(|root| {
            let canonical = std::fs::canonicalize(root).map_err(|e| {
                ResearchError::Config(format!("--media-root {}: {e}", root.display()))
            })?;
            if !canonical.is_dir() {
                return Err(ResearchError::Config(format!(
                    "--media-root {}: not a folder",
                    root.display()
                )));
            }
            Ok(canonical)
        })
        .collect()
}

/// Why media could not be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MediaError {
    /// For a reason that will not pass: the pairs are failed research, with this reason.
    Gone(String),
    /// For a reason that may pass: the item is released and tried again.
    Passing(String),
    /// The researcher is stopping.
    Cancelled,
}

/// A media file ready to analyse; while it lives, no researcher's eviction removes it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub(crate) sha256: String,
    /// The media URI as given (a remote one redacted): what messages name, never `path`,
    /// which means nothing once this process is gone.
    uri: String,
    /// A download: its file, open with a shared `flock` (eviction needs the exclusive one).
    held: Option<std::fs::File>,
    /// For a local file: its modification time and size when hashed, to notice a change.
    stamp: Option<Stamp>,
    /// What identifies these bytes where they came from (a download's ETag, Last-Modified
    /// and Content-Length as served; a file's size and time), for an episode print; `None`
    /// when not known (a download cached before identities were kept).
    pub(crate) identity: Option<MediaIdentity>,
}

impl Entry {
    /// `text` with this entry's path replaced by its URI.
    fn name_uri(&self, text: &str) -> String {
        let path = self.path.display().to_string();
        if path.is_empty() || !text.contains(&path) {
            return text.to_string();
        }
        text.replace(&path, &self.uri)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // Last used now, for the eviction of the least recently used.
        if let Some(file) = &self.held {
            let _ = file.set_modified(SystemTime::now());
        }
    }
}

/// `text` (an analyser's failure reason) with the paths of `entries` replaced by their media
/// URIs: a path into the cache means nothing to whoever reads the reason later.
pub(crate) fn name_uris<'e>(text: &str, entries: impl IntoIterator<Item = &'e Entry>) -> String {
    entries
        .into_iter()
        .fold(text.to_string(), |text, entry| entry.name_uri(&text))
}

/// A local file's modification time and size: a change to either means it is hashed again.
type Stamp = (SystemTime, u64);

fn stamp(meta: &std::fs::Metadata) -> Option<Stamp> {
    Some((meta.modified().ok()?, meta.len()))
}

/// Local files' stamps by URI, from [`Media::stamps`].
#[derive(Default)]
pub(crate) struct Stamps(HashMap<String, Stamp>);

/// A fetch served from the cache.
fn hit(entry: Arc<Entry>) -> Fetched {
    metrics::counter!("archivist_researcher_cache_hits_total").increment(1);
    Fetched {
        entry,
        cache_hit: true,
    }
}

/// What [`Media::fetch`] found.
pub(crate) struct Fetched {
    pub(crate) entry: Arc<Entry>,
    /// Served from the cache, without a download or a read.
    pub(crate) cache_hit: bool,
}

/// The media fetcher and its cache. One per researcher, shared by its slots.
pub struct Media {
    config: MediaConfig,
    /// Every fetch's rules ([`net::fetch`]); media addresses are never fetched as given.
    fetcher: Fetcher,
    state: Mutex<CacheState>,
    /// One lock per URI being fetched, so that it is fetched once (and one per episode
    /// being kept in the archive, under `archive:<key>`).
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Where each episode's media is kept, if anywhere ([`Media::with_archive`]).
    archive: Option<Arc<dyn MediaArchive>>,
}

#[derive(Default)]
struct CacheState {
    /// Local files hashed, by URI.
    local: HashMap<String, Arc<Entry>>,
    /// Downloads some item of this process holds, by URI (a dead one: found on disk again).
    downloads: HashMap<String, Weak<Entry>>,
    /// The size of `downloads` at which dead handles are next swept out.
    sweep_at: usize,
}

/// Extension of finished downloads in the cache directory.
const CACHED: &str = "media";
/// Extension of the symlinks from a URI's hash to its download.
const POINTER: &str = "uri";
/// Extension of what identifies a download (beside its `.uri`), for episode prints.
const IDENTITY: &str = "identity";
/// Extension of what is known of media that failed for a media reason (beside its `.uri`).
const FAILED: &str = "failed";
/// The most clips a known failure remembers (beyond, it forgets the oldest).
const MAX_FAILED_CLIPS: usize = 100_000;
/// Extension of downloads (and symlinks) under way.
const PARTIAL: &str = "part";
/// How old an unlocked `.part` must be before eviction removes it: a crashed researcher's.
/// (A live one locks its download at once; the age covers the moment before it does.)
const STALE_PART: Duration = Duration::from_secs(3600);
/// The longest wait a `Retry-After` may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);
/// The first backoff between tries; doubled each time, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a download may take before `--fetch-min-rate` applies (connecting, a slow start).
pub const RATE_GRACE: Duration = Duration::from_secs(30);

impl Media {
    /// Checks the media roots (each made canonical), creates the cache directory if missing,
    /// removes what crashed researchers left in it and evicts down to the cache size. Other
    /// researchers may use the directory meanwhile. A root or cache directory that cannot be
    /// used is [`ResearchError::Config`].
    pub fn new(mut config: MediaConfig) -> Result<Self, ResearchError> {
        config.media_roots = media_roots(&config.media_roots)?;
        // Downloads are given to analysers as `media_path`, which the protocol promises is
        // absolute: a relative --cache-dir would make them relative.
        config.cache_dir = std::path::absolute(&config.cache_dir).map_err(|e| {
            ResearchError::Config(format!(
                "--cache-dir {}: cannot resolve it: {e}",
                config.cache_dir.display()
            ))
        })?;
        std::fs::create_dir_all(&config.cache_dir).map_err(|e| {
            ResearchError::Config(format!(
                "--cache-dir {}: cannot create it: {e}",
                config.cache_dir.display()
            ))
        })?;
        std::fs::read_dir(&config.cache_dir).map_err(|e| {
            ResearchError::Config(format!(
                "--cache-dir {}: cannot use it: {e}",
                config.cache_dir.display()
            ))
        })?;
        evict(&config.cache_dir, config.cache_size);
        let fetcher = Fetcher::new(
            &config.addresses,
            FetchConfig::media(config.connect_timeout, config.read_timeout, config.max_size),
        )
        .map_err(|e| ResearchError::Config(e.to_string()))?;
        Ok(Media {
            config,
            fetcher,
            state: Mutex::new(CacheState::default()),
            fetching: Mutex::new(HashMap::new()),
            archive: None,
        })
    }

    /// This fetcher with a media archive (`--media-archive`): each work item's episode is
    /// fetched from the show once, kept in `archive` and researched from the copy there
    /// (see [`crate::EpisodeMedia`] and the book's chapter on the archive); clips are
    /// fetched as before.
    pub fn with_archive(mut self, archive: Arc<dyn MediaArchive>) -> Media {
        self.archive = Some(archive);
        self
    }

    /// The media archive, if the researcher has one.
    pub fn archive(&self) -> Option<&Arc<dyn MediaArchive>> {
        self.archive.as_ref()
    }

    /// The media at `uri`, fetched or read (or found in the cache), with its hash; for the
    /// tests (items have a lease: [`fetch_until`](Self::fetch_until)).
    #[cfg(test)]
    pub(crate) async fn fetch(
        &self,
        uri: &str,
        cancel: &CancellationToken,
    ) -> Result<Fetched, MediaError> {
        self.fetch_until(uri, None, cancel).await
    }

    /// The media at `uri`, fetched or read (or found in the cache), with its hash, for an
    /// item whose lease ends at `lease_end`: waiting for
    /// another item's download of the same URI, and downloading, stop then (the item's pairs
    /// are then someone else's).
    pub(crate) async fn fetch_until(
        &self,
        uri: &str,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: &CancellationToken,
    ) -> Result<Fetched, MediaError> {
        let until = lease_end.map(|end| {
            let left = (end - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            tokio::time::Instant::now() + left
        });
        let lock = {
            let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            fetching.entry(uri.to_string()).or_default().clone()
        };
        let _turn = tokio::select! {
            _ = cancel.cancelled() => return Err(MediaError::Cancelled),
            _ = sleep_until(until) => return Err(lease_ended(uri)),
            turn = lock.lock() => turn,
        };
        let outcome = self.fetch_locked(uri, until, cancel).await;
        {
            let mut fetching = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            // The map's handle and ours: nobody else waits.
            if Arc::strong_count(&lock) <= 2 {
                fetching.remove(uri);
            }
        }
        outcome
    }

    async fn fetch_locked(
        &self,
        uri: &str,
        until: Option<tokio::time::Instant>,
        cancel: &CancellationToken,
    ) -> Result<Fetched, MediaError> {
        let source = Source::of(uri)?;
        if let Some(entry) = self.cached(uri, &source).await {
            return Ok(hit(entry));
        }
        metrics::counter!("archivist_researcher_cache_misses_total").increment(1);
        let started = Instant::now();
        let (entry, downloaded) = match source {
            Source::Local(path) => (self.hash_local(uri, &path, cancel).await?, false),
            Source::Remote(url) => (self.download(uri, url, until, cancel).await?, true),
        };
        metrics::histogram!("archivist_researcher_download_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        let entry = Arc::new(entry);
        self.insert(uri, &entry);
        if downloaded {
            // This download is held (locked) meanwhile: others go first.
            let (dir, size) = (self.config.cache_dir.clone(), self.config.cache_size);
            let _ = tokio::task::spawn_blocking(move || evict(&dir, size)).await;
        }
        Ok(Fetched {
            entry,
            cache_hit: false,
        })
    }

    /// The modification times and sizes of the local files among `uris` that the cache holds,
    /// looked up in one trip to the blocking pool: an item names up to thousands of clips,
    /// mostly cached, and a trip each costs more than the look itself.
    pub(crate) async fn stamps<'u>(&self, uris: impl Iterator<Item = &'u str>) -> Stamps {
        let known: Vec<(String, PathBuf)> = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            uris.filter(|uri| state.local.contains_key(*uri))
                .filter_map(|uri| match Source::of(uri) {
                    Ok(Source::Local(path)) => Some((uri.to_string(), path)),
                    _ => None,
                })
                .collect()
        };
        if known.is_empty() {
            return Stamps::default();
        }
        let looked = tokio::task::spawn_blocking(move || {
            known
                .into_iter()
                .filter_map(|(uri, path)| Some((uri, stamp(&std::fs::metadata(path).ok()?)?)))
                .collect()
        })
        .await;
        Stamps(looked.unwrap_or_default())
    }

    /// [`fetch_until`](Self::fetch_until), served from the cache without another look when `stamps` shows
    /// the local file unchanged since it was hashed.
    pub(crate) async fn fetch_stamped(
        &self,
        uri: &str,
        stamps: &Stamps,
        lease_end: Option<chrono::DateTime<chrono::Utc>>,
        cancel: &CancellationToken,
    ) -> Result<Fetched, MediaError> {
        let unchanged = stamps
            .0
            .get(uri)
            .and_then(|&stamp| self.local(uri).filter(|entry| entry.stamp == Some(stamp)));
        match unchanged {
            Some(entry) => Ok(hit(entry)),
            None => self.fetch_until(uri, lease_end, cancel).await,
        }
    }

    /// Forgets the download of `uri` (it changed where it came from): the next fetch
    /// downloads it again. Items holding the old download keep it while they do.
    pub(crate) fn forget(&self, uri: &str) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.downloads.remove(uri);
            state.local.remove(uri);
        }
        let key = uri_key(uri);
        let _ = std::fs::remove_file(self.config.cache_dir.join(format!("{key}.{POINTER}")));
        let _ = std::fs::remove_file(self.config.cache_dir.join(format!("{key}.{IDENTITY}")));
        let _ = std::fs::remove_file(self.config.cache_dir.join(format!("{key}.{FAILED}")));
    }

    /// The failure kept for the remote media at `uri`, if it is still the media that failed:
    /// asked of the server with a conditional request (its validators when it failed; a 304
    /// costs no body), so every new clip of known-bad media fails at once with the reason it
    /// failed for, without a download or a decode. Forgotten (`None`: fetch and analyse it
    /// again) when the media changed, or when one of `clips` is a clip this failure already
    /// failed: a pair failed is leased again only when asked (`archivist retry-failed`) or
    /// when its result was lost, and either way it is tried afresh.
    pub(crate) async fn known_failure<'c>(
        &self,
        uri: &str,
        clips: impl Iterator<Item = &'c str>,
        cancel: &CancellationToken,
    ) -> Option<String> {
        // With an archive, the episode's copy is researched, never the show's URL: nothing
        // is asked of the show (a failure is the copy's, and decoding it again tells).
        if self.archive.is_some() {
            return None;
        }
        let Ok(Source::Remote(url)) = Source::of(uri) else {
            return None;
        };
        let path = self
            .config
            .cache_dir
            .join(format!("{}.{FAILED}", uri_key(uri)));
        let mut known: KnownFailure =
            serde_json::from_slice(&tokio::fs::read(&path).await.ok()?).ok()?;
        let shown = messagebus::redact_url(uri);
        let keys: Vec<String> = clips.map(clip_key).collect();
        if keys.iter().any(|k| known.clips.contains(k)) {
            tracing::info!(episode = %shown, "a pair failed on this media is asked for again: fetching it afresh");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        let MediaIdentity::Http {
            etag,
            last_modified,
            ..
        } = &known.identity
        else {
            return None;
        };
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(etag) = etag {
            headers = net::fetch::with_header(headers, reqwest::header::IF_NONE_MATCH, etag);
        }
        if let Some(at) = last_modified {
            headers = net::fetch::with_header(headers, reqwest::header::IF_MODIFIED_SINCE, at);
        }
        let asked = tokio::select! {
            _ = cancel.cancelled() => return None,
            asked = self.fetcher.get(&url, headers, false) => asked,
        };
        // A failure to ask is the download's to meet and report.
        let answer = asked.ok()?;
        let same = match Status::of(answer.status()) {
            Status::NotModified => true,
            // Dropped unread.
            Status::Success => known
                .identity
                .same_as(&MediaIdentity::from_headers(answer.headers())),
            _ => return None,
        };
        drop(answer);
        if !same {
            tracing::info!(episode = %shown, "media that failed has changed: fetching it afresh");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        metrics::counter!("archivist_researcher_known_failures_total").increment(1);
        tracing::info!(episode = %shown, reason = %known.reason, "media unchanged since it failed: its new pairs fail at once");
        known.clips.extend(keys);
        let over = known.clips.len().saturating_sub(MAX_FAILED_CLIPS);
        known.clips.drain(..over);
        self.keep_failure(uri, &known);
        Some(known.reason)
    }

    /// Keeps that the remote media at `uri` failed for `reason` (a reason of the media,
    /// which every clip shares), with the validators of its download, and that `clips`
    /// failed on it: [`known_failure`](Self::known_failure) then fails its next clips at
    /// once. Nothing is kept for media whose validators cannot show it unchanged.
    pub(crate) fn remember_failure<'c>(
        &self,
        uri: &str,
        reason: &str,
        clips: impl Iterator<Item = &'c str>,
    ) {
        if self.archive.is_some() || !matches!(Source::of(uri), Ok(Source::Remote(_))) {
            return;
        }
        let held = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.downloads.get(uri).and_then(Weak::upgrade)
        };
        let identity = match held {
            Some(entry) => entry.identity.clone(),
            None => {
                let key = uri_key(uri);
                std::fs::read_link(self.config.cache_dir.join(format!("{key}.{POINTER}")))
                    .ok()
                    .and_then(|target| {
                        let name = target.to_str()?.strip_suffix(&format!(".{CACHED}"))?;
                        recall(&self.config.cache_dir, &key, name)
                    })
            }
        };
        let Some(identity) = identity.filter(|i| {
            matches!(i, MediaIdentity::Http { etag, last_modified, .. } if etag.is_some() || last_modified.is_some())
        }) else {
            return;
        };
        self.keep_failure(
            uri,
            &KnownFailure {
                reason: reason.to_string(),
                identity,
                clips: clips.map(clip_key).collect(),
            },
        );
    }

    /// Writes `known` for `uri` (replaced atomically; best effort: without it, the media is
    /// fetched and fails again).
    fn keep_failure(&self, uri: &str, known: &KnownFailure) {
        let dir = &self.config.cache_dir;
        let key = uri_key(uri);
        let Ok(body) = serde_json::to_vec(known) else {
            return;
        };
        let tmp = dir.join(format!(
            "{key}.{}.{FAILED}.{PARTIAL}",
            uuid::Uuid::new_v4().simple()
        ));
        let kept = std::fs::write(&tmp, body)
            .and_then(|()| std::fs::rename(&tmp, dir.join(format!("{key}.{FAILED}"))));
        if kept.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// The local file `path` opened for reading as local media is (a regular file, inside
    /// the media roots): the file, its metadata and the path opened.
    pub(crate) async fn open_local(
        &self,
        path: &Path,
    ) -> Result<(std::fs::File, std::fs::Metadata, PathBuf), MediaError> {
        let (path, roots) = (path.to_path_buf(), self.config.media_roots.clone());
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || open_local(&path, &roots))
            .await
            .map_err(|e| MediaError::Passing(format!("cannot read {shown}: {e}")))?
    }

    /// The fetcher downloads use, for the print's requests.
    pub(crate) fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    /// The entry of the local file `uri`, whether or not it is still good.
    fn local(&self, uri: &str) -> Option<Arc<Entry>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.local.get(uri).cloned()
    }

    /// The cached entry of `uri`, if it is still good (a local file unchanged since hashed, a
    /// download still in the cache directory: held here, or found there and locked).
    async fn cached(&self, uri: &str, source: &Source) -> Option<Arc<Entry>> {
        match source {
            Source::Local(path) => {
                let entry = self.local(uri)?;
                let meta = tokio::fs::metadata(path).await.ok()?;
                (entry.stamp == stamp(&meta)).then_some(entry)
            }
            Source::Remote(_) => {
                let held = {
                    let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    state.downloads.get(uri).and_then(Weak::upgrade)
                };
                if held.is_some() {
                    return held;
                }
                let (dir, key, shown, max) = (
                    self.config.cache_dir.clone(),
                    uri_key(uri),
                    messagebus::redact_url(uri),
                    self.config.max_size,
                );
                let found = tokio::task::spawn_blocking(move || lookup(&dir, &key, shown, max))
                    .await
                    .ok()??;
                let entry = Arc::new(found);
                self.insert(uri, &entry);
                Some(entry)
            }
        }
    }

    fn insert(&self, uri: &str, entry: &Arc<Entry>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if entry.held.is_none() {
            state.local.insert(uri.to_string(), entry.clone());
            return;
        }
        state
            .downloads
            .insert(uri.to_string(), Arc::downgrade(entry));
        if state.downloads.len() >= state.sweep_at {
            state.downloads.retain(|_, held| held.strong_count() > 0);
            state.sweep_at = (state.downloads.len() * 2).max(1024);
        }
    }

    /// Bytes of downloads the cache directory holds now.
    #[cfg(test)]
    fn cached_bytes(&self) -> u64 {
        std::fs::read_dir(&self.config.cache_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == CACHED))
            .filter_map(|e| e.metadata().ok())
            .map(|meta| meta.len())
            .sum()
    }

    /// Reads and hashes the local file `path` (the media at `uri`).
    async fn hash_local(
        &self,
        uri: &str,
        path: &Path,
        cancel: &CancellationToken,
    ) -> Result<Entry, MediaError> {
        let shown = path.display();
        let (file, meta, opened) = {
            let (path, roots) = (path.to_path_buf(), self.config.media_roots.clone());
            tokio::task::spawn_blocking(move || open_local(&path, &roots))
                .await
                .map_err(|e| MediaError::Passing(format!("cannot read {shown}: {e}")))??
        };
        let max = self.config.max_size;
        if meta.len() > max {
            return Err(too_large(max));
        }
        // The file may grow while it is read: no more than one byte over the limit is read.
        let mut file = tokio::fs::File::from_std(file).take(max.saturating_add(1));
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        loop {
            if cancel.is_cancelled() {
                return Err(MediaError::Cancelled);
            }
            let n = file
                .read(&mut buf)
                .await
                .map_err(|e| MediaError::Passing(format!("cannot read {shown}: {e}")))?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > max {
                return Err(too_large(max));
            }
            hasher.update(&buf[..n]);
        }
        Ok(Entry {
            path: opened,
            size,
            sha256: hex(&hasher.finalize()),
            uri: uri.to_string(),
            held: None,
            stamp: stamp(&meta),
            identity: MediaIdentity::of_file(&meta),
        })
    }
    async fn download(
        &self,
        uri: &str,
        url: reqwest::Url,
        until: Option<tokio::time::Instant>,
        cancel: &CancellationToken,
    ) -> Result<Entry, MediaError> {
        let shown = messagebus::redact_url(uri);
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return Err(MediaError::Cancelled),
                _ = sleep_until(until) => return Err(lease_ended(uri)),
                o = self.download_once(uri, url.clone()) => o,
            };
            let (why, after) = match outcome {
                Ok(entry) => return Ok(entry),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Again { why, after }) => (why, after),
            };
            if attempt >= self.config.attempts {
                return Err(MediaError::Passing(format!(
                    "{shown}: {why} (after {attempt} tries)"
                )));
            }
            let wait = after.unwrap_or(backoff).min(MAX_RETRY_AFTER);
            tracing::info!(uri = %shown, attempt, error = %why, retry_in = ?wait, "media download failed; trying again");
            tokio::select! {
                _ = cancel.cancelled() => return Err(MediaError::Cancelled),
                _ = sleep_until(until) => return Err(lease_ended(uri)),
                _ = tokio::time::sleep(wait) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn download_once(&self, uri: &str, url: reqwest::Url) -> Result<Entry, Attempt> {
        let again = |why: String| Attempt::Again { why, after: None };
        let pace = Pace::new(self.config.min_rate);
        let too_slow = || again(pace.too_slow());
        let request = self
            .fetcher
            .get(&url, reqwest::header::HeaderMap::new(), false);
        let mut response = match pace.within(0, request).await {
            None => return Err(too_slow()),
            Some(answer) => answer.map_err(|e| fetch_failed(uri, e))?,
        };
        let status = response.status();
        match Status::of(status) {
            Status::Success => {}
            Status::Gone => {
                return Err(Attempt::Final(MediaError::Gone(format!(
                    "media gone: HTTP {status}"
                ))))
            }
            Status::Busy => {
                return Err(Attempt::Again {
                    why: format!("HTTP {status}"),
                    after: net::fetch::retry_after(response.headers(), MAX_RETRY_AFTER),
                })
            }
            Status::NotModified | Status::Refused => {
                return Err(Attempt::Final(MediaError::Passing(format!(
                    "{}: HTTP {status}",
                    messagebus::redact_url(uri)
                ))))
            }
        }
        let identity = MediaIdentity::from_headers(response.headers());
        response
            .check_announced()
            .map_err(|e| fetch_failed(uri, e))?;
        let (part, mut file) = self
            .partial(uri)
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        loop {
            let chunk = match pace.within(size, response.chunk()).await {
                None => return Err(too_slow()),
                Some(chunk) => chunk.map_err(|e| fetch_failed(uri, e))?,
            };
            let Some(chunk) = chunk else {
                break;
            };
            size += chunk.len() as u64;
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        }
        file.flush()
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        let file = file.into_std().await;
        let entry = self
            .store(uri, part, file, size, hex(&hasher.finalize()), identity)
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        metrics::counter!("archivist_researcher_fetched_bytes_total").increment(size);
        Ok(entry)
    }
}

/// `until`, or never.
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn lease_ended(uri: &str) -> MediaError {
    MediaError::Passing(format!(
        "{}: the item's lease ended before its media was fetched",
        messagebus::redact_url(uri)
    ))
}

/// A fetch's failure as a try's: a refused address or a body over the limit is gone (it
/// will not pass without a flag); a network failure, a timeout or a body cut short is worth
/// another try; a bad redirect fails the item for now.
fn fetch_failed(uri: &str, e: FetchError) -> Attempt {
    match e {
        FetchError::Refused { .. } => {
            Attempt::Final(MediaError::Gone(format!("media address refused: {e}")))
        }
        FetchError::TooLarge(max) => Attempt::Final(too_large(max)),
        e if e.is_retryable() => Attempt::Again {
            why: e.to_string(),
            after: None,
        },
        e => Attempt::Final(MediaError::Passing(format!(
            "{}: {e}",
            messagebus::redact_url(uri)
        ))),
    }
}

/// The pace a download must keep: after [`RATE_GRACE`], on average at least `min_rate`
/// bytes a second, so that the time it may take follows its size.
struct Pace {
    started: tokio::time::Instant,
    min_rate: u64,
}

impl Pace {
    fn new(min_rate: u64) -> Self {
        Pace {
            started: tokio::time::Instant::now(),
            min_rate,
        }
    }

    /// When the download falls behind, having `received` bytes and no more.
    fn due(&self, received: u64) -> Option<tokio::time::Instant> {
        if self.min_rate == 0 {
            return None;
        }
        let allowed = Duration::from_secs_f64(received as f64 / self.min_rate as f64);
        Some(self.started + RATE_GRACE + allowed)
    }

    /// `step`'s outcome, or `None` if the download falls behind first.
    async fn within<T>(
        &self,
        received: u64,
        step: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        match self.due(received) {
            Some(due) => tokio::time::timeout_at(due, step).await.ok(),
            None => Some(step.await),
        }
    }

    fn too_slow(&self) -> String {
        format!(
            "slower than {} bytes a second on average after the first {} (--fetch-min-rate)",
            self.min_rate,
            humantime::format_duration(RATE_GRACE)
        )
    }
}

/// One try's failure.
enum Attempt {
    /// Not worth another try.
    Final(MediaError),
    /// Try again (after `after`, if the server said).
    Again {
        why: String,
        after: Option<Duration>,
    },
}

/// A download under way; its name removed when dropped (once linked into place, or not).
struct Partial(PathBuf);

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Where media comes from.
pub(crate) enum Source {
    Local(PathBuf),
    Remote(reqwest::Url),
}

impl Source {
    pub(crate) fn of(uri: &str) -> Result<Source, MediaError> {
        let lower = uri.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            let url = reqwest::Url::parse(uri)
                .map_err(|e| MediaError::Gone(format!("media URI is not a valid URL: {e}")))?;
            return Ok(Source::Remote(url));
        }
        if lower.starts_with("file://") {
            let url = url::Url::parse(uri)
                .map_err(|e| MediaError::Gone(format!("media URI is not a valid URL: {e}")))?;
            return url
                .to_file_path()
                .map(Source::Local)
                .map_err(|()| MediaError::Gone("media URI is not a local file path".into()));
        }
        if let Some((scheme, _)) = uri.split_once("://") {
            return Err(MediaError::Gone(format!(
                "media URI scheme {scheme:?} is not supported (http, https, file, or a path)"
            )));
        }
        // Absolute, as the analyser protocol promises `media_path` is: a relative path is
        // the researcher's working directory's, which an HTTP analyser does not share.
        std::path::absolute(uri)
            .map(Source::Local)
            .map_err(|e| MediaError::Passing(format!("cannot resolve the path {uri:?}: {e}")))
    }
}

fn too_large(max: u64) -> MediaError {
    MediaError::Gone(format!(
        "media too large: over {max} bytes (--max-media-size)"
    ))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The name of `uri`'s symlink in the cache directory (without the extension).
fn uri_key(uri: &str) -> String {
    hex(&Sha256::digest(uri.as_bytes()))
}

impl Media {
    /// A new download's file, created and locked (so that no eviction takes it for a crashed
    /// researcher's); removed unless [`store`](Self::store)d.
    async fn partial(&self, uri: &str) -> std::io::Result<(Partial, tokio::fs::File)> {
        let part = Partial(self.config.cache_dir.join(format!(
            "{}.{}.{PARTIAL}",
            uri_key(uri),
            uuid::Uuid::new_v4().simple()
        )));
        let path = part.0.clone();
        let file = tokio::task::spawn_blocking(move || {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockShared)?;
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok((part, tokio::fs::File::from_std(file)))
    }

    /// Puts a whole download in place under its content's name and points `uri` at it.
    async fn store(
        &self,
        uri: &str,
        part: Partial,
        file: std::fs::File,
        size: u64,
        sha256: String,
        identity: MediaIdentity,
    ) -> std::io::Result<Entry> {
        let (dir, key, shown) = (
            self.config.cache_dir.clone(),
            uri_key(uri),
            messagebus::redact_url(uri),
        );
        tokio::task::spawn_blocking(move || {
            let path = dir.join(format!("{sha256}.{CACHED}"));
            let held = place(&part.0, &path, file)?;
            drop(part);
            remember(&dir, &key, &sha256, &identity);
            point(&dir, &key, &sha256)?;
            Ok(Entry {
                path,
                size,
                sha256,
                uri: shown,
                held: Some(held),
                stamp: None,
                identity: Some(identity),
            })
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// Links the download at `part` (open as `ours`, locked) to `path`, never over a file there:
/// if another researcher put the same bytes there first, theirs is used (and locked). The
/// handle held.
fn place(part: &Path, path: &Path, ours: std::fs::File) -> std::io::Result<std::fs::File> {
    for _ in 0..3 {
        match std::fs::hard_link(part, path) {
            Ok(()) => return Ok(ours),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if let Some(theirs) = acquire(path)? {
                    return Ok(theirs);
                }
                // Evicted between the two: link ours after all.
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} keeps appearing and going",
        path.display()
    )))
}

/// Points `<key>.uri` at `<sha256>.media` (a symlink, replaced atomically).
fn point(dir: &Path, key: &str, sha256: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(
        "{key}.{}.{POINTER}.{PARTIAL}",
        uuid::Uuid::new_v4().simple()
    ));
    std::os::unix::fs::symlink(format!("{sha256}.{CACHED}"), &tmp)?;
    std::fs::rename(&tmp, dir.join(format!("{key}.{POINTER}"))).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The download `<key>.uri` points at, locked, if the cache directory has it (and it is no
/// larger than `max`).
fn lookup(dir: &Path, key: &str, uri: String, max: u64) -> Option<Entry> {
    let target = std::fs::read_link(dir.join(format!("{key}.{POINTER}"))).ok()?;
    let name = target.to_str()?;
    let sha256 = name.strip_suffix(&format!(".{CACHED}"))?;
    let content_named = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !content_named {
        return None;
    }
    let path = dir.join(name);
    let held = acquire(&path).ok()??;
    let size = held.metadata().ok()?.len();
    let identity = recall(dir, key, sha256);
    (size <= max).then(|| Entry {
        path,
        size,
        sha256: sha256.to_string(),
        uri,
        held: Some(held),
        stamp: None,
        identity,
    })
}

/// What `<key>.identity` keeps: a download's identity, and the bytes it describes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Remembered {
    sha256: String,
    identity: MediaIdentity,
}

/// What `<key>.failed` keeps: why the media failed, the validators it failed with, and the
/// clips (by [`clip_key`]) failed on it.
#[derive(serde::Serialize, serde::Deserialize)]
struct KnownFailure {
    reason: String,
    identity: MediaIdentity,
    clips: Vec<String>,
}

/// A clip as a known failure remembers it: a hash of its title (its identity).
fn clip_key(title: &str) -> String {
    hex(&Sha256::digest(title.as_bytes()))[..32].to_string()
}

/// Keeps the identity of the download of `<key>.uri` (the bytes `sha256`) beside it, for a
/// print made from the cache later (replaced atomically; best effort: without it, no print
/// is made from that download).
fn remember(dir: &Path, key: &str, sha256: &str, identity: &MediaIdentity) {
    let body = serde_json::to_vec(&Remembered {
        sha256: sha256.to_string(),
        identity: identity.clone(),
    })
    .unwrap_or_default();
    let tmp = dir.join(format!(
        "{key}.{}.{IDENTITY}.{PARTIAL}",
        uuid::Uuid::new_v4().simple()
    ));
    let kept = std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, dir.join(format!("{key}.{IDENTITY}"))));
    if kept.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The identity kept beside `<key>.uri`, if it describes the bytes `sha256`.
fn recall(dir: &Path, key: &str, sha256: &str) -> Option<MediaIdentity> {
    let body = std::fs::read(dir.join(format!("{key}.{IDENTITY}"))).ok()?;
    let kept: Remembered = serde_json::from_slice(&body).ok()?;
    (kept.sha256 == sha256).then_some(kept.identity)
}

/// `path` opened and locked shared, so that no eviction removes it while held; `None` if it
/// is not there (or was evicted while this waited for the lock).
fn acquire(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    rustix::fs::flock(&file, FlockOperation::LockShared)?;
    if !still_at(&file, path)? {
        return Ok(None);
    }
    let _ = file.set_modified(SystemTime::now());
    Ok(Some(file))
}

/// Whether `file` is a regular file and still the one at `path` (not removed, not replaced).
fn still_at(file: &std::fs::File, path: &Path) -> std::io::Result<bool> {
    let ours = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(there) => Ok(ours.is_file() && ours.dev() == there.dev() && ours.ino() == there.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Evicts the least recently used downloads that no researcher holds until the cache
/// directory holds at most `limit` bytes of them; removes what crashed researchers left (a
/// `.part` older than [`STALE_PART`] that nobody holds) and symlinks to evicted downloads.
fn evict(dir: &Path, limit: u64) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut downloads = Vec::new();
    let mut total = 0u64;
    for item in listing.flatten() {
        let path = item.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        match path.extension().and_then(|e| e.to_str()) {
            Some(CACHED) if meta.is_file() => {
                total += meta.len();
                downloads.push((modified, meta.len(), path));
            }
            Some(PARTIAL) => {
                let stale = now
                    .duration_since(modified)
                    .is_ok_and(|age| age >= STALE_PART);
                if stale && (meta.is_symlink() || unused(&path)) {
                    let _ = std::fs::remove_file(&path);
                }
            }
            _ => {}
        }
    }
    if total <= limit {
        return;
    }
    downloads.sort();
    let mut evicted = false;
    for (_, size, path) in downloads {
        if total <= limit {
            break;
        }
        // Removed while the exclusive lock is held: nobody can be using it.
        if let Some(_locked) = unused_file(&path) {
            if std::fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(size);
                evicted = true;
                tracing::debug!(file = %path.display(), "evicted from the media cache");
            }
        }
    }
    if evicted {
        for item in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = item.path();
            let dangling = path.extension().is_some_and(|e| e == POINTER)
                && std::fs::metadata(&path)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            let orphan = path.extension().is_some_and(|e| e == IDENTITY)
                && std::fs::symlink_metadata(path.with_extension(POINTER))
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
            if dangling || orphan {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

/// Whether no researcher holds `path`.
fn unused(path: &Path) -> bool {
    unused_file(path).is_some()
}

/// `path` locked exclusively (without waiting) if no researcher holds it and it is still the
/// file there.
fn unused_file(path: &Path) -> Option<std::fs::File> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty()).ok()?);
    rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
    still_at(&file, path).ok()?.then_some(file)
}

/// Opens the local media file `path` for reading: a regular file only (looked at before it
/// is opened, and the file opened again after: it may have been replaced), opened without
/// waiting (a FIFO swapped in cannot block), and with `roots` only inside one of them. The
/// file, its metadata and the path opened (with `roots`, the canonical one: what the analyser
/// is given).
///
/// The roots are checked twice: on the path canonicalized (symlinks and `..` resolved), which
/// is what is opened, then on where the file opened is (`/proc/self/fd`), so that a folder
/// swapped for a symlink between the two is caught; where `/proc` is missing, the file at the
/// canonical path must still be the one opened.
fn open_local(
    path: &Path,
    roots: &[PathBuf],
) -> Result<(std::fs::File, std::fs::Metadata, PathBuf), MediaError> {
    use rustix::fs::{Mode, OFlags};
    let shown = path.display();
    let cannot = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => MediaError::Gone(format!("media gone: no file {shown}")),
        _ => MediaError::Passing(format!("cannot read {shown}: {e}")),
    };
    let outside = || {
        MediaError::Gone(format!(
            "media refused: {shown} is outside every --media-root"
        ))
    };
    let target = if roots.is_empty() {
        path.to_path_buf()
    } else {
        let canonical = std::fs::canonicalize(path).map_err(cannot)?;
        if !inside(&canonical, roots) {
            return Err(outside());
        }
        canonical
    };
    // Looked at first: opening a device can do something of its own (a tape rewinds).
    regular(&std::fs::metadata(&target).map_err(cannot)?, path)?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = match rustix::fs::open(&target, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NXIO | rustix::io::Errno::NODEV) => {
            return Err(MediaError::Gone(format!(
                "not a regular file: {shown} is a special file"
            )))
        }
        Err(e) => return Err(cannot(e.into())),
    };
    let meta = file.metadata().map_err(cannot)?;
    regular(&meta, path)?;
    if !roots.is_empty() {
        use std::os::fd::AsRawFd;
        let opened = match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
            Ok(opened) => Some(opened),
            Err(_) => still_at(&file, &target)
                .ok()
                .and_then(|same| same.then(|| target.clone())),
        };
        if !opened.is_some_and(|opened| inside(&opened, roots)) {
            return Err(outside());
        }
    }
    Ok((file, meta, target))
}

/// Whether `path` (canonical) is inside one of `roots` (canonical).
fn inside(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

/// Refuses anything but a regular file, saying what it is.
fn regular(meta: &std::fs::Metadata, path: &Path) -> Result<(), MediaError> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(());
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(MediaError::Gone(format!(
        "not a regular file: {} is {what}",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn media(dir: &Path, cache_size: u64) -> Media {
        media_with(dir, cache_size, Vec::new())
    }

    fn media_with(dir: &Path, cache_size: u64, media_roots: Vec<PathBuf>) -> Media {
        Media::new(MediaConfig {
            cache_dir: dir.join("cache"),
            cache_size,
            max_size: 1000,
            media_roots,
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            attempts: 2,
            // The tests serve media on loopback.
            addresses: AddressPolicy::any(),
            min_rate: 0,
        })
        .unwrap()
    }

    fn gone(got: Result<Fetched, MediaError>) -> String {
        match got {
            Err(MediaError::Gone(why)) => why,
            Err(e) => panic!("not gone: {e:?}"),
            Ok(f) => panic!("read: {}", f.entry.path.display()),
        }
    }

    /// A character device that never ends, a FIFO nobody writes, a directory: refused at once
    /// (a timeout shows nothing blocks), saying what they are.
    #[tokio::test]
    async fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("a.fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::RUSR).unwrap();
        let m = media(dir.path(), 10);
        let cancel = CancellationToken::new();
        let fetch = |uri: String| {
            let (m, cancel) = (&m, &cancel);
            async move {
                tokio::time::timeout(Duration::from_secs(10), m.fetch(&uri, cancel))
                    .await
                    .expect("blocked")
            }
        };
        let why = gone(fetch("/dev/zero".into()).await);
        assert_eq!(why, "not a regular file: /dev/zero is a character device");
        let why = gone(fetch(format!("file://{}", fifo.display())).await);
        assert!(why.ends_with("a.fifo is a FIFO"), "{why}");
        let why = gone(fetch(dir.path().display().to_string()).await);
        assert!(why.ends_with("is a directory"), "{why}");
    }

    /// A file longer than its length says (as it grows, or as /proc's are) is read no further
    /// than the limit.
    #[tokio::test]
    async fn a_file_longer_than_it_says_is_cut_off_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let m = media(dir.path(), 10);
        // Length 0, some kilobytes of text.
        assert_eq!(std::fs::metadata("/proc/self/maps").unwrap().len(), 0);
        let why = gone(m.fetch("/proc/self/maps", &CancellationToken::new()).await);
        assert!(why.contains("too large"), "{why}");
    }

    #[tokio::test]
    async fn media_roots_keep_local_media_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/in.wav"), b"abc").unwrap();
        std::fs::write(dir.path().join("out.wav"), b"abc").unwrap();
        std::os::unix::fs::symlink(dir.path().join("out.wav"), root.join("out-link.wav")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/in.wav"), root.join("in-link.wav")).unwrap();
        let roots = media_roots(&[root.join("sub/..")]).unwrap();
        assert_eq!(roots, [root.canonicalize().unwrap()]);
        let m = media_with(dir.path(), 10, roots);
        let cancel = CancellationToken::new();
        let inside = root.join("sub/in.wav");
        let got = m
            .fetch(&inside.display().to_string(), &cancel)
            .await
            .unwrap();
        assert_eq!(got.entry.size, 3);
        let linked = m
            .fetch(&root.join("in-link.wav").display().to_string(), &cancel)
            .await
            .unwrap();
        assert_eq!(
            linked.entry.path,
            inside.canonicalize().unwrap(),
            "the file opened"
        );
        for refused in [
            "/etc/passwd".to_string(),
            format!("file://{}", root.join("out-link.wav").display()),
            root.join("sub/../../out.wav").display().to_string(),
        ] {
            let why = gone(m.fetch(&refused, &cancel).await);
            assert!(
                why.ends_with("is outside every --media-root"),
                "{refused}: {why}"
            );
        }
        assert!(media_roots(&[dir.path().join("nowhere")]).is_err());
        assert!(media_roots(&[inside]).is_err(), "a file is no root");
    }

    #[test]
    fn failure_reasons_name_the_uri_not_the_path() {
        let entry = Entry {
            path: PathBuf::from("/cache/ab12.media"),
            size: 1,
            sha256: "ab12".into(),
            uri: "https://example.com/e.mp3".into(),
            held: None,
            stamp: None,
            identity: None,
        };
        assert_eq!(
            name_uris("the episode: /cache/ab12.media: not audio", [&entry]),
            "the episode: https://example.com/e.mp3: not audio"
        );
        assert_eq!(name_uris("no path here", [&entry]), "no path here");
    }

    #[tokio::test]
    async fn local_files_are_hashed_and_missing_ones_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.wav");
        std::fs::write(&file, b"abc").unwrap();
        let m = media(dir.path(), 10);
        let cancel = CancellationToken::new();
        let uri = format!("file://{}", file.display());
        let got = m.fetch(&uri, &cancel).await.unwrap();
        assert_eq!(
            got.entry.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(!got.cache_hit);
        assert!(m.fetch(&uri, &cancel).await.unwrap().cache_hit);
        let plain = m.fetch(&file.display().to_string(), &cancel).await.unwrap();
        assert_eq!(plain.entry.size, 3);
        assert!(matches!(
            m.fetch("/no/such/file.mp3", &cancel).await,
            Err(MediaError::Gone(_))
        ));
        assert!(matches!(
            m.fetch("ftp://x/y", &cancel).await,
            Err(MediaError::Gone(_))
        ));
        std::fs::write(&file, vec![0u8; 2000]).unwrap();
        assert!(matches!(
            m.fetch(&uri, &cancel).await,
            Err(MediaError::Gone(why)) if why.contains("too large")
        ));
        assert_eq!(m.cached_bytes(), 0, "local files are not the cache's");
    }

    /// Serves `routes` on a local port; the base URL.
    /// Stamps looked up together serve unchanged local files from the cache, and a file
    /// changed since (or a URI the cache never saw) is read and hashed again.
    #[tokio::test]
    async fn stamped_fetches_see_a_changed_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.wav"), dir.path().join("b.wav"));
        std::fs::write(&a, b"abc").unwrap();
        std::fs::write(&b, b"abc").unwrap();
        let (a, b) = (a.display().to_string(), b.display().to_string());
        let m = media(dir.path(), 10);
        let cancel = CancellationToken::new();
        m.fetch(&a, &cancel).await.unwrap();
        let stamps = m.stamps([a.as_str(), b.as_str()].into_iter()).await;
        assert_eq!(stamps.0.len(), 1, "only what the cache holds is looked up");
        assert!(
            m.fetch_stamped(&a, &stamps, None, &cancel)
                .await
                .unwrap()
                .cache_hit
        );
        let first = m.fetch_stamped(&b, &stamps, None, &cancel).await.unwrap();
        assert!(!first.cache_hit);
        std::fs::write(&a, b"abcd").unwrap();
        let stamps = m.stamps([a.as_str()].into_iter()).await;
        let again = m.fetch_stamped(&a, &stamps, None, &cancel).await.unwrap();
        assert!(!again.cache_hit, "a changed file was served from the cache");
        assert_eq!(again.entry.size, 4);
    }

    async fn serve(routes: axum::Router) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn the_least_recently_used_download_nobody_holds_is_evicted() {
        use axum::routing::get;
        let base = serve(
            axum::Router::new()
                .route("/a", get(|| async { vec![b'a'; 6] }))
                .route("/b", get(|| async { vec![b'b'; 6] }))
                .route("/c", get(|| async { vec![b'c'; 6] })),
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let m = media(dir.path(), 10);
        let cancel = CancellationToken::new();
        let (a, b, c) = (
            format!("{base}/a"),
            format!("{base}/b"),
            format!("{base}/c"),
        );
        let a_path = m.fetch(&a, &cancel).await.unwrap().entry.path.clone();
        assert!(a_path.exists());
        // b does not fit beside a: a, unused, goes.
        let held_b = m.fetch(&b, &cancel).await.unwrap();
        assert_eq!(m.cached_bytes(), 6);
        assert!(!a_path.exists(), "evicted from disk too");
        // b is in use: fetching a again keeps both, over the size for a while.
        let again = m.fetch(&a, &cancel).await.unwrap();
        assert!(!again.cache_hit);
        assert_eq!(m.cached_bytes(), 12);
        drop(again);
        // Then c evicts the least recently used that nobody holds (a), not b.
        let _c = m.fetch(&c, &cancel).await.unwrap();
        assert!(held_b.entry.path.exists());
        assert!(m.fetch(&b, &cancel).await.unwrap().cache_hit);
        assert!(!m.fetch(&a, &cancel).await.unwrap().cache_hit);
    }

    /// Serves `/a`, `/b`, `/c` (six bytes each), counting requests.
    async fn counted() -> (String, Arc<Mutex<HashMap<String, u32>>>) {
        let asked: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let base = serve(
            axum::Router::new()
                .route(
                    "/{name}",
                    axum::routing::get(
                        |axum::extract::State(asked): axum::extract::State<
                            Arc<Mutex<HashMap<String, u32>>>,
                        >,
                         axum::extract::Path(name): axum::extract::Path<String>| async move {
                            *asked.lock().unwrap().entry(name.clone()).or_default() += 1;
                            name.repeat(6).into_bytes()
                        },
                    ),
                )
                .with_state(asked.clone()),
        )
        .await;
        (base, asked)
    }

    /// Two researchers on one cache directory, one of them restarted: a download is made
    /// once, and one researcher's eviction leaves what the other holds.
    #[tokio::test]
    async fn researchers_share_the_cache_across_restarts() {
        let (base, asked) = counted().await;
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let (a, b, c) = (
            format!("{base}/a"),
            format!("{base}/b"),
            format!("{base}/c"),
        );
        let first = media(dir.path(), 10);
        let held_a = first.fetch(&a, &cancel).await.unwrap();
        assert!(!held_a.cache_hit);
        let second = media(dir.path(), 10);
        let theirs = second.fetch(&a, &cancel).await.unwrap();
        assert!(theirs.cache_hit, "found in the shared directory");
        assert_eq!(theirs.entry.sha256, held_a.entry.sha256);
        drop(theirs);
        // b does not fit beside a, but the first researcher holds a: both stay.
        drop(second.fetch(&b, &cancel).await.unwrap());
        assert!(held_a.entry.path.exists());
        assert_eq!(second.cached_bytes(), 12);
        // Once let go, a can go too: c evicts both.
        drop(held_a);
        drop(first);
        let _c = second.fetch(&c, &cancel).await.unwrap();
        assert_eq!(second.cached_bytes(), 6);
        drop(second);
        // A restart finds c without asking the server, and fetches a again.
        let restarted = media(dir.path(), 100);
        assert!(restarted.fetch(&c, &cancel).await.unwrap().cache_hit);
        assert!(!restarted.fetch(&a, &cancel).await.unwrap().cache_hit);
        let asked = asked.lock().unwrap().clone();
        assert_eq!((asked["a"], asked["b"], asked["c"]), (2, 1, 1), "{asked:?}");
    }

    #[tokio::test]
    async fn a_429_waits_as_long_as_retry_after_says() {
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let asked = Arc::new(AtomicU64::new(0));
        let base = serve(
            axum::Router::new()
                .route(
                    "/limited",
                    axum::routing::get(
                        |axum::extract::State(asked): axum::extract::State<Arc<AtomicU64>>| async move {
                            if asked.fetch_add(1, Ordering::SeqCst) == 0 {
                                (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "later")
                                    .into_response()
                            } else {
                                b"audio".to_vec().into_response()
                            }
                        },
                    ),
                )
                .with_state(asked.clone()),
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let m = media(dir.path(), 1000);
        let started = Instant::now();
        let got = m
            .fetch(&format!("{base}/limited"), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(got.entry.size, 5);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // A second, not the first backoff's half second.
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_download_without_a_length_is_cut_off_at_the_size_limit() {
        let base = serve(axum::Router::new().route(
            "/big",
            axum::routing::get(|| async {
                // Streamed: no Content-Length to refuse it by.
                let chunks = (0..4).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 500]));
                axum::body::Body::from_stream(futures::stream::iter(chunks))
            }),
        ))
        .await;
        let dir = tempfile::tempdir().unwrap();
        let m = media(dir.path(), 10_000);
        let got = m
            .fetch(&format!("{base}/big"), &CancellationToken::new())
            .await;
        assert!(
            matches!(&got, Err(MediaError::Gone(why)) if why.contains("too large")),
            "{:?}",
            got.as_ref().err()
        );
        // Nothing left behind: no partial download, nothing cached.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(m.cached_bytes(), 0);
    }

    /// A download shorter than its `Content-Length` (the server closes early) is not taken
    /// for the media: the item fails for another try, its reason naming both sizes, and
    /// nothing is cached.
    #[tokio::test]
    async fn a_download_cut_short_of_its_length_is_tried_again_naming_both_sizes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 900\r\nConnection: close\r\n\r\n";
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&[b'x'; 603]).await;
                let _ = stream.shutdown().await;
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let m = media(dir.path(), 10_000);
        let got = m
            .fetch(&format!("http://{addr}/cut.mp3"), &CancellationToken::new())
            .await;
        assert!(
            matches!(&got, Err(MediaError::Passing(why)) if why.contains("603") && why.contains("900")),
            "{:?}",
            got.as_ref().err()
        );
        assert_eq!(m.cached_bytes(), 0);
    }

    /// A server that sends a byte, then one every 59 s: under the 60 s read timeout.
    fn trickle() -> axum::Router {
        axum::Router::new().route(
            "/trickle",
            axum::routing::get(|| async {
                let bytes = futures::stream::unfold(0u32, |n| async move {
                    if n > 0 {
                        tokio::time::sleep(Duration::from_secs(59)).await;
                    }
                    Some((Ok::<_, std::io::Error>(vec![b'x']), n + 1))
                });
                axum::body::Body::from_stream(futures::StreamExt::take(bytes, 900))
            }),
        )
    }

    fn patient_media(dir: &Path, min_rate: u64) -> Media {
        Media::new(MediaConfig {
            cache_dir: dir.join("cache"),
            cache_size: 10_000,
            max_size: 1000,
            media_roots: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            attempts: 1,
            addresses: AddressPolicy::any(),
            min_rate,
        })
        .unwrap()
    }

    /// A trickle that the read timeout never ends is cut off once it falls behind the
    /// minimum rate, not after 900 × 59 s.
    #[tokio::test(start_paused = true)]
    async fn a_trickling_download_is_cut_off_at_the_minimum_rate() {
        let base = serve(trickle()).await;
        let dir = tempfile::tempdir().unwrap();
        let m = patient_media(dir.path(), 100);
        let started = tokio::time::Instant::now();
        let got = m
            .fetch(&format!("{base}/trickle"), &CancellationToken::new())
            .await;
        assert!(
            matches!(&got, Err(MediaError::Passing(why)) if why.contains("--fetch-min-rate")),
            "{:?}",
            got.as_ref().err()
        );
        let took = started.elapsed();
        assert!(took >= RATE_GRACE && took < RATE_GRACE * 2, "{took:?}");
    }

    /// A download stops when the item's lease ends, and so does another item's wait for it.
    #[tokio::test(start_paused = true)]
    async fn a_download_and_its_waiters_stop_when_their_lease_ends() {
        let base = serve(trickle()).await;
        let dir = tempfile::tempdir().unwrap();
        let m = Arc::new(patient_media(dir.path(), 0));
        let uri = format!("{base}/trickle");
        let cancel = CancellationToken::new();
        let started = tokio::time::Instant::now();
        let first = {
            let (m, uri, cancel) = (m.clone(), uri.clone(), cancel.clone());
            let end = chrono::Utc::now() + chrono::Duration::seconds(600);
            tokio::spawn(async move { m.fetch_until(&uri, Some(end), &cancel).await.err() })
        };
        tokio::task::yield_now().await;
        let end = chrono::Utc::now() + chrono::Duration::seconds(120);
        let waiter = m.fetch_until(&uri, Some(end), &cancel).await;
        assert!(
            matches!(&waiter, Err(MediaError::Passing(why)) if why.contains("lease ended")),
            "{:?}",
            waiter.as_ref().err()
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(125), "{took:?}");
        let first = first.await.unwrap();
        assert!(
            matches!(&first, Some(MediaError::Passing(why)) if why.contains("lease ended")),
            "{first:?}"
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(605), "{took:?}");
    }

    /// Without the flag, a name resolving to loopback is refused (gone, naming the address and
    /// the flag), and so is a redirect to a loopback address from an address taken for public.
    #[tokio::test]
    async fn non_public_addresses_are_refused_on_the_address_connected_to() {
        use axum::response::Redirect;
        let private = serve(
            axum::Router::new().route("/a", axum::routing::get(|| async { b"audio".to_vec() })),
        )
        .await;
        let port = private.rsplit(':').next().unwrap().to_string();
        let to = format!("{private}/a");
        let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
        let public = format!("http://{}", listener.local_addr().unwrap());
        let hop = axum::Router::new().route(
            "/hop",
            axum::routing::get(move || async move { Redirect::temporary(&to) }),
        );
        tokio::spawn(async move { axum::serve(listener, hop).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let m = Media::new(MediaConfig {
            cache_dir: dir.path().join("strict"),
            cache_size: 100,
            max_size: 100,
            media_roots: Vec::new(),
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            attempts: 2,
            addresses: AddressPolicy::new(false, vec!["127.0.0.2".parse().unwrap()]),
            min_rate: 0,
        })
        .unwrap();
        let cancel = CancellationToken::new();
        for uri in [
            format!("http://localhost:{port}/a"),
            format!("{public}/hop"),
            format!("http://[::ffff:127.0.0.1]:{port}/a"),
        ] {
            let got = m.fetch(&uri, &cancel).await;
            assert!(
                matches!(&got, Err(MediaError::Gone(why))
                    if why.contains("refused") && why.contains("--allow-private-addresses")),
                "{uri}: {:?}",
                got.as_ref().err()
            );
        }
    }

    #[test]
    fn a_relative_path_is_made_absolute() {
        let Ok(Source::Local(path)) = Source::of("media/a.mp3") else {
            panic!("not a local path");
        };
        assert!(path.is_absolute(), "{}", path.display());
        assert!(path.ends_with("media/a.mp3"), "{}", path.display());
    }
}
