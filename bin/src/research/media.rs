//! Media for the analyser: `http(s)://` URLs downloaded into the cache directory, `file://`
//! URLs and plain paths read where they are; each with the SHA-256 of its bytes (the
//! results' `episode_hash` / `clip_hash`).
//!
//! Downloads stream to a temporary file beside the cache (hashed and counted on the way, cut
//! off at the size limit) and are renamed into place when whole. The cache holds at most
//! `--cache-size` bytes of finished downloads, evicting the least recently used file that no
//! item is using; a file in use stays even when that leaves the cache over its size for a
//! while. One download per URI at a time: a second item asking for it waits and then finds it
//! cached. The cache directory belongs to one researcher process (a lock file says so; a
//! second one refuses to start): its files are cleared at start (the index is in memory).
//!
//! What fails how: 404 and 410, a missing local file, a file over the size limit, a URI
//! scheme no researcher reads are *gone* (will not pass: the pairs are reported as failed
//! research); connection errors, timeouts, 429 and 5xx are retried with exponential backoff,
//! honouring `Retry-After`, and once the attempts are spent the item fails for another try
//! (as do other statuses, such as 401 or 403, which a person can fix).
//!
//! Media addresses come from feeds written by others: a download connects to public
//! addresses only, checked on the address connected to and at every redirect hop
//! ([`crate::address_policy`]), unless `--allow-private-addresses`; a refused address is
//! *gone*, its reason naming the address and the flag. A download must keep up an average of
//! `--fetch-min-rate` after its first [`RATE_GRACE`] (so its deadline follows its size: a
//! server sending a byte a minute cannot hold a slot, and the URI's lock, for days), and
//! stops when the item's lease ends: its pairs are then someone else's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::address_policy::{self, AddressPolicy, Redirects};

/// Settings of the media fetcher.
#[derive(Debug, Clone)]
pub(crate) struct MediaConfig {
    pub(crate) cache_dir: PathBuf,
    /// The most bytes of finished downloads kept.
    pub(crate) cache_size: u64,
    /// The largest media file fetched or read.
    pub(crate) max_size: u64,
    pub(crate) connect_timeout: Duration,
    /// The longest wait for the next bytes of a response.
    pub(crate) read_timeout: Duration,
    /// Tries of one download before the item fails.
    pub(crate) attempts: u32,
    /// Which addresses downloads may connect to.
    pub(crate) addresses: AddressPolicy,
    /// The lowest average rate of a download after [`RATE_GRACE`], in bytes a second (0: none).
    pub(crate) min_rate: u64,
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

/// A media file ready to analyse; the cache keeps it while this lives.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub(crate) sha256: String,
    /// Whether the cache owns the file (a download), rather than the user (a local file).
    downloaded: bool,
    last_used: AtomicU64,
    /// For a local file: its modification time and size when hashed, to notice a change.
    stamp: Option<Stamp>,
}

/// A local file's modification time and size: a change to either means it is hashed again.
type Stamp = (std::time::SystemTime, u64);

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

/// The media fetcher and its cache. One per researcher process, shared by its slots.
pub(crate) struct Media {
    config: MediaConfig,
    /// Held (an exclusive `flock` on `.lock`) while this process uses the directory, so that
    /// a second researcher pointed at it refuses to start instead of clearing it.
    _lock: std::fs::File,
    client: address_policy::Client,
    state: Mutex<CacheState>,
    /// One lock per URI being fetched, so that it is fetched once.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<String, Arc<Entry>>,
    /// Bytes of downloaded entries.
    total: u64,
    clock: u64,
}

/// Extension of finished downloads in the cache directory.
const CACHED: &str = "media";
/// Extension of downloads under way.
const PARTIAL: &str = "part";
/// The longest wait a `Retry-After` may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);
/// The first backoff between tries; doubled each time, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a download may take before `--fetch-min-rate` applies (connecting, a slow start).
pub(crate) const RATE_GRACE: Duration = Duration::from_secs(30);
/// Redirects followed for one download, at most (reqwest's default).
const MAX_REDIRECTS: usize = 10;

impl Media {
    /// Creates the cache directory if missing and clears what an earlier run left in it.
    pub(crate) fn new(mut config: MediaConfig) -> anyhow::Result<Self> {
        // Downloads are given to analysers as `media_path`, which the protocol promises is
        // absolute: a relative --cache-dir would make them relative.
        config.cache_dir = std::path::absolute(&config.cache_dir).map_err(|e| {
            crate::config::usage(format!(
                "--cache-dir {}: cannot resolve it: {e}",
                config.cache_dir.display()
            ))
        })?;
        std::fs::create_dir_all(&config.cache_dir).map_err(|e| {
            crate::config::usage(format!(
                "--cache-dir {}: cannot create it: {e}",
                config.cache_dir.display()
            ))
        })?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(config.cache_dir.join(".lock"))
            .map_err(|e| {
                crate::config::usage(format!(
                    "--cache-dir {}: cannot use it: {e}",
                    config.cache_dir.display()
                ))
            })?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(crate::config::usage(format!(
                "--cache-dir {} is in use by another researcher: give each its own",
                config.cache_dir.display()
            )));
        }
        if let Ok(dir) = std::fs::read_dir(&config.cache_dir) {
            for entry in dir.flatten() {
                let path = entry.path();
                if path
                    .extension()
                    .is_some_and(|e| e == CACHED || e == PARTIAL)
                {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        super::install_crypto();
        let builder = config
            .addresses
            .client_builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout);
        let client = address_policy::Client::build(
            &config.addresses,
            builder,
            Redirects::Follow(MAX_REDIRECTS),
        )
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?;
        Ok(Media {
            config,
            _lock: lock,
            client,
            state: Mutex::new(CacheState::default()),
            fetching: Mutex::new(HashMap::new()),
        })
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
        let entry = match source {
            Source::Local(path) => self.hash_local(&path, cancel).await?,
            Source::Remote(url) => self.download(uri, url, until, cancel).await?,
        };
        metrics::histogram!("archivist_researcher_download_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        let entry = Arc::new(entry);
        self.insert(uri, entry.clone());
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
            uris.filter(|uri| state.entries.contains_key(*uri))
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
            .and_then(|&stamp| self.touch(uri).filter(|entry| entry.stamp == Some(stamp)));
        match unchanged {
            Some(entry) => Ok(hit(entry)),
            None => self.fetch_until(uri, lease_end, cancel).await,
        }
    }

    /// The cached entry of `uri`, marked as just used (for eviction), whether or not it is
    /// still good.
    fn touch(&self, uri: &str) -> Option<Arc<Entry>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        let clock = state.clock;
        let entry = state.entries.get(uri)?.clone();
        entry.last_used.store(clock, Ordering::Relaxed);
        Some(entry)
    }

    /// The cached entry of `uri`, if it is still good (a local file unchanged since hashed).
    async fn cached(&self, uri: &str, source: &Source) -> Option<Arc<Entry>> {
        let entry = self.touch(uri)?;
        match source {
            Source::Local(path) => {
                let meta = tokio::fs::metadata(path).await.ok()?;
                if entry.stamp != stamp(&meta) {
                    return None;
                }
            }
            // Someone cleaned the directory: fetch it again.
            Source::Remote(_) => tokio::fs::metadata(&entry.path).await.ok().map(|_| ())?,
        }
        Some(entry)
    }

    fn insert(&self, uri: &str, entry: Arc<Entry>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.clock += 1;
        entry.last_used.store(state.clock, Ordering::Relaxed);
        if let Some(old) = state.entries.insert(uri.to_string(), entry.clone()) {
            if old.downloaded {
                state.total = state.total.saturating_sub(old.size);
            }
        }
        if entry.downloaded {
            state.total += entry.size;
        }
        // Evict the least recently used downloads nobody holds until the cache fits.
        while state.total > self.config.cache_size {
            let victim = state
                .entries
                .iter()
                .filter(|(_, e)| e.downloaded && Arc::strong_count(e) == 1)
                .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else {
                break;
            };
            if let Some(gone) = state.entries.remove(&victim) {
                state.total = state.total.saturating_sub(gone.size);
                let _ = std::fs::remove_file(&gone.path);
                tracing::debug!(uri = %messagebus::redact_url(&victim), "evicted from the media cache");
            }
        }
    }

    /// Bytes of downloads the cache holds now.
    #[cfg(test)]
    fn cached_bytes(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    async fn hash_local(
        &self,
        path: &Path,
        cancel: &CancellationToken,
    ) -> Result<Entry, MediaError> {
        let shown = path.display();
        let mut file = match tokio::fs::File::open(path).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(MediaError::Gone(format!("media gone: no file {shown}")))
            }
            Err(e) => return Err(MediaError::Passing(format!("cannot read {shown}: {e}"))),
        };
        let meta = file
            .metadata()
            .await
            .map_err(|e| MediaError::Passing(format!("cannot read {shown}: {e}")))?;
        if meta.is_dir() {
            return Err(MediaError::Gone(format!(
                "not audio: {shown} is a directory"
            )));
        }
        if meta.len() > self.config.max_size {
            return Err(too_large(self.config.max_size));
        }
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
            hasher.update(&buf[..n]);
        }
        Ok(Entry {
            path: path.to_path_buf(),
            size,
            sha256: hex(&hasher.finalize()),
            downloaded: false,
            last_used: AtomicU64::new(0),
            stamp: stamp(&meta),
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
        let request = self.client.get(url).map_err(refused)?;
        let mut response = match pace.within(0, request.send()).await {
            None => return Err(too_slow()),
            Some(Ok(response)) => response,
            Some(Err(e)) => return Err(request_failed(e)),
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            return Err(Attempt::Final(MediaError::Gone(format!(
                "media gone: HTTP {status}"
            ))));
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(Attempt::Again {
                why: format!("HTTP {status}"),
                after: retry_after(response.headers()),
            });
        }
        if !status.is_success() {
            return Err(Attempt::Final(MediaError::Passing(format!(
                "{}: HTTP {status}",
                messagebus::redact_url(uri)
            ))));
        }
        if response
            .content_length()
            .is_some_and(|n| n > self.config.max_size)
        {
            return Err(Attempt::Final(too_large(self.config.max_size)));
        }
        let name = hex(&Sha256::digest(uri.as_bytes()));
        let path = self.config.cache_dir.join(format!("{name}.{CACHED}"));
        let part = Partial(
            self.config
                .cache_dir
                .join(format!("{name}.{}.{PARTIAL}", uuid::Uuid::new_v4())),
        );
        let mut file = tokio::fs::File::create(&part.0)
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        loop {
            let chunk = match pace.within(size, response.chunk()).await {
                None => return Err(too_slow()),
                Some(chunk) => chunk.map_err(request_failed)?,
            };
            let Some(chunk) = chunk else {
                break;
            };
            size += chunk.len() as u64;
            if size > self.config.max_size {
                return Err(Attempt::Final(too_large(self.config.max_size)));
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        }
        file.flush()
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        drop(file);
        tokio::fs::rename(&part.0, &path)
            .await
            .map_err(|e| Attempt::Final(MediaError::Passing(format!("cache: {e}"))))?;
        metrics::counter!("archivist_researcher_fetched_bytes_total").increment(size);
        Ok(Entry {
            path,
            size,
            sha256: hex(&hasher.finalize()),
            downloaded: true,
            last_used: AtomicU64::new(0),
            stamp: None,
        })
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

/// A download refused by the address policy: gone (it will not pass without the flag).
fn refused(r: address_policy::Refused) -> Attempt {
    Attempt::Final(MediaError::Gone(format!("media address refused: {r}")))
}

/// A failed request or read: refused by the address policy (at a redirect hop, or a host
/// name resolving to a non-public address), or another try.
fn request_failed(e: reqwest::Error) -> Attempt {
    if let Some(r) = address_policy::refused_in(&e) {
        return refused(r.clone());
    }
    Attempt::Again {
        why: e.without_url().to_string(),
        after: None,
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

/// A download under way; removed if it is not renamed into place.
struct Partial(PathBuf);

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Where media comes from.
enum Source {
    Local(PathBuf),
    Remote(reqwest::Url),
}

impl Source {
    fn of(uri: &str) -> Result<Source, MediaError> {
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

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now())
        .to_std()
        .ok()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn media(dir: &Path, cache_size: u64) -> Media {
        Media::new(MediaConfig {
            cache_dir: dir.join("cache"),
            cache_size,
            max_size: 1000,
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
            attempts: 2,
            // The tests serve media on loopback.
            addresses: AddressPolicy::any(),
            min_rate: 0,
        })
        .unwrap()
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
            .filter(|n| n.to_str() != Some(".lock"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
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

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert(reqwest::header::RETRY_AFTER, later.parse().unwrap());
        let wait = retry_after(&h).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30));
    }
}
