//! The researcher's side of episode prints: what identifies the media a print was made from
//! ([`MediaIdentity`]), whether the media is still that ([`Freshness`], a conditional request
//! or a file's size and time), the bytes a print's refinement asks for ([`HttpRanges`]:
//! `Range` requests through the address-policy client; [`FileRanges`]: reads at an offset),
//! and what the researcher counts of it ([`PrintCounters`]).
//!
//! Never a wrong answer from a stale print: a print is used only when the media is shown to
//! be the one printed. For http(s) that is a conditional GET (`If-None-Match` with the ETag
//! as served, `If-Modified-Since` with the Last-Modified) answered 304 (no body), or a 200
//! whose strong ETag (or, without one, Last-Modified and Content-Length together) is the
//! print's; media served with neither an ETag nor a Last-Modified cannot be shown unchanged,
//! so it is never printed. For a local file it is its size and modification time (to the
//! nanosecond). Each range request carries `If-Range`, so media that changes while a print
//! is in use is answered in full (200) and the print is dropped for the full analysis.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::header::{self, HeaderMap};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use net::fetch::{FetchError, Fetcher};

/// What identifies the media a print was made from: what the server said of it (http(s)),
/// or the file's size and modification time (local media).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MediaIdentity {
    /// Media served over http(s), as its response's headers described it.
    Http {
        /// `ETag`, as served (quotes and a `W/` included).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        etag: Option<String>,
        /// `Last-Modified`, as served.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last_modified: Option<String>,
        /// `Content-Length` of the whole media.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_length: Option<u64>,
    },
    /// A copy kept in the media archive (crate `archive`), named by its SHA-256: the same
    /// bytes for as long as it is kept, so a print made from it stays good without asking
    /// the show's server anything.
    Archived {
        /// The copy's SHA-256 (lowercase hex).
        sha256: String,
        /// Its length in bytes.
        size: u64,
    },
    /// A local file.
    File {
        /// Its size in bytes.
        size: u64,
        /// Its modification time, nanoseconds since 1970 (64 bits: serde's internally
        /// tagged enums cannot read 128-bit integers back, so an `i128` here made every
        /// local file's print unreadable).
        modified_ns: i64,
    },
}

impl MediaIdentity {
    /// The identity of a whole (200) response with these headers.
    pub fn from_headers(headers: &HeaderMap) -> MediaIdentity {
        let text = |name: header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        MediaIdentity::Http {
            etag: text(header::ETAG),
            last_modified: text(header::LAST_MODIFIED),
            content_length: text(header::CONTENT_LENGTH).and_then(|s| s.parse().ok()),
        }
    }

    /// The identity of a local file from its metadata (`None` where the system keeps no
    /// modification time).
    pub fn of_file(meta: &std::fs::Metadata) -> Option<MediaIdentity> {
        let modified = meta.modified().ok()?;
        let modified_ns = match modified.duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_nanos()).ok()?,
            Err(before) => -i64::try_from(before.duration().as_nanos()).ok()?,
        };
        Some(MediaIdentity::File {
            size: meta.len(),
            modified_ns,
        })
    }

    /// Whether a later look can show the media unchanged, and its ranges be read: a file
    /// always; http(s) only with an ETag or a Last-Modified, and a Content-Length. Media that
    /// cannot be is not printed.
    pub fn can_be_checked(&self) -> bool {
        match self {
            MediaIdentity::Http {
                etag,
                last_modified,
                content_length,
            } => (etag.is_some() || last_modified.is_some()) && content_length.is_some(),
            MediaIdentity::Archived { .. } | MediaIdentity::File { .. } => true,
        }
    }

    /// As the print keeps it (one line of JSON).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// From what a print keeps; `None` if it is not an identity this researcher wrote.
    pub fn parse(text: &str) -> Option<MediaIdentity> {
        serde_json::from_str(text).ok()
    }

    /// The whole media's length, if known.
    pub fn media_len(&self) -> Option<u64> {
        match self {
            MediaIdentity::Http { content_length, .. } => *content_length,
            MediaIdentity::Archived { size, .. } | MediaIdentity::File { size, .. } => Some(*size),
        }
    }

    /// Whether the media a 200 with `now` describes is the one this identity describes:
    /// the same strong ETag; or, neither having one, the same Last-Modified and length.
    pub(crate) fn same_as(&self, now: &MediaIdentity) -> bool {
        let (
            MediaIdentity::Http {
                etag: a,
                last_modified: la,
                content_length: ca,
            },
            MediaIdentity::Http {
                etag: b,
                last_modified: lb,
                content_length: cb,
            },
        ) = (self, now)
        else {
            return false;
        };
        match (a, b) {
            (Some(a), Some(b)) => a == b && !a.starts_with("W/") && (ca == cb || cb.is_none()),
            (None, None) => la.is_some() && la == lb && ca.is_some() && ca == cb,
            _ => false,
        }
    }
}

/// The print store's key of the print made from the archive's copy `sha256`: with a media
/// archive, an episode's print is the print of the copy researched (its chosen version),
/// whatever the episode's `media_uri` is now. (Without one, a print is keyed by the media
/// URI: [`prints::print_key`].)
pub fn archived_print_key(sha256: &str) -> String {
    prints::print_key(&format!("archive:sha256:{sha256}"))
}

/// Whether the media is still the one printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// The same media: the print may be used.
    Same,
    /// Changed (or cannot be shown unchanged): analyse in full.
    Changed,
    /// The media is gone (404, 410, no such file): the pairs fail as without a print.
    Gone(String),
}

/// Asks the server whether the media at `url` is still the one `identity` describes, with a
/// conditional GET (a 304 costs no body; a 200's body is not read).
pub async fn check_remote(
    fetcher: &Fetcher,
    url: reqwest::Url,
    identity: &MediaIdentity,
) -> Result<Freshness, String> {
    let MediaIdentity::Http {
        etag,
        last_modified,
        ..
    } = identity
    else {
        return Ok(Freshness::Changed);
    };
    if etag.is_none() && last_modified.is_none() {
        return Ok(Freshness::Changed);
    }
    let mut headers = HeaderMap::new();
    if let Some(etag) = etag {
        headers = net::fetch::with_header(headers, header::IF_NONE_MATCH, etag);
    }
    if let Some(at) = last_modified {
        headers = net::fetch::with_header(headers, header::IF_MODIFIED_SINCE, at);
    }
    let response = fetcher
        .get(&url, headers, false)
        .await
        .map_err(|e| match e {
            FetchError::Refused { .. } => format!("media address refused: {e}"),
            e => e.to_string(),
        })?;
    let status = response.status();
    if status == StatusCode::NOT_MODIFIED {
        return Ok(Freshness::Same);
    }
    if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
        return Ok(Freshness::Gone(format!("media gone: HTTP {status}")));
    }
    if status.is_success() {
        // Dropped unread: its body is the full analysis's to fetch, if it comes to that.
        let now = MediaIdentity::from_headers(response.headers());
        return Ok(if identity.same_as(&now) {
            Freshness::Same
        } else {
            Freshness::Changed
        });
    }
    Err(format!("checking the media: HTTP {status}"))
}

/// Whether the local file with metadata `meta` is still the one `identity` describes.
pub fn check_local(meta: &std::fs::Metadata, identity: &MediaIdentity) -> Freshness {
    match MediaIdentity::of_file(meta) {
        Some(now) if &now == identity => Freshness::Same,
        _ => Freshness::Changed,
    }
}

/// Why a print was not used, for the metrics and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fallback {
    /// The media changed since it was printed.
    ChangedMedia,
    /// The print is of another format version (other analyser parameters).
    OtherVersion,
    /// The print is damaged or cut short.
    Damaged,
    /// The media server ignores `Range` (answers 200 with the whole body).
    RangeIgnored,
}

impl Fallback {
    /// Its label in the metrics (`reason`).
    pub fn label(self) -> &'static str {
        match self {
            Fallback::ChangedMedia => "changed_media",
            Fallback::OtherVersion => "other_version",
            Fallback::Damaged => "damaged",
            Fallback::RangeIgnored => "range_ignored",
        }
    }

    fn says(self) -> &'static str {
        match self {
            Fallback::ChangedMedia => "the media changed since it was printed",
            Fallback::OtherVersion => "the print is of another format version",
            Fallback::Damaged => "the print is damaged",
            Fallback::RangeIgnored => "the media server ignores Range requests",
        }
    }
}

/// What a researcher counts of prints: used, written, fallbacks by reason, and the bytes and
/// requests that refinement from prints took. Each event is also said once in the log and
/// counted in the metrics (`archivist_researcher_prints_used_total`,
/// `archivist_researcher_prints_written_total`,
/// `archivist_researcher_print_fallbacks_total{reason}`,
/// `archivist_researcher_range_requests_total`, `archivist_researcher_range_bytes_total`).
/// It also counts, for every item the reference analyser answers (from a print or in full),
/// the episode audio it decoded and the bytes of episode media it read (kept here only: what
/// the demo's summary compares between a first pass and a new clip's).
#[derive(Debug, Default)]
pub struct PrintCounters {
    used: AtomicU64,
    written: AtomicU64,
    range_requests: AtomicU64,
    range_bytes: AtomicU64,
    audio_decoded_ns: AtomicU64,
    media_bytes_read: AtomicU64,
    fallbacks: Mutex<BTreeMap<Fallback, u64>>,
}

/// A snapshot of [`PrintCounters`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrintCounts {
    /// Items (episodes) answered from a print.
    pub used: u64,
    /// Prints written.
    pub written: u64,
    /// Prints not used, by reason.
    pub fallbacks: BTreeMap<Fallback, u64>,
    /// Range requests made for refinement from prints.
    pub range_requests: u64,
    /// Bytes those requests fetched.
    pub range_bytes: u64,
    /// Episode audio decoded to answer items (nanoseconds): whole episodes for full
    /// analyses, the stretches refinement needed for answers from prints.
    pub audio_decoded_ns: u64,
    /// Bytes of episode media read to answer items: whole files for full analyses (a
    /// download's, or the local file's), the byte ranges for answers from prints.
    pub media_bytes_read: u64,
}

impl PrintCounters {
    /// A print used for `episode`.
    pub fn used(&self, episode: &str) {
        self.used.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("archivist_researcher_prints_used_total").increment(1);
        tracing::info!(episode = %episode, "answered from the episode's print");
    }

    /// A print written for `episode`.
    pub fn written(&self, episode: &str, bytes: usize) {
        self.written.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("archivist_researcher_prints_written_total").increment(1);
        tracing::info!(episode = %episode, bytes, "episode print written");
    }

    /// A print of `episode` not used, for `why`: the item is analysed in full.
    pub fn fallback(&self, episode: &str, why: Fallback, detail: &str) {
        *self
            .fallbacks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(why)
            .or_default() += 1;
        metrics::counter!("archivist_researcher_print_fallbacks_total", "reason" => why.label())
            .increment(1);
        tracing::info!(episode = %episode, reason = why.label(), detail = %detail, "episode print not used: {}; analysing the episode in full", why.says());
    }

    /// An item answered after decoding `decoded_ns` of its episode's audio and reading
    /// `bytes` of its media.
    pub fn analysed(&self, decoded_ns: u64, bytes: u64) {
        self.audio_decoded_ns
            .fetch_add(decoded_ns, Ordering::Relaxed);
        self.media_bytes_read.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn ranged(&self, bytes: u64) {
        self.range_requests.fetch_add(1, Ordering::Relaxed);
        self.range_bytes.fetch_add(bytes, Ordering::Relaxed);
        metrics::counter!("archivist_researcher_range_requests_total").increment(1);
        metrics::counter!("archivist_researcher_range_bytes_total").increment(bytes);
    }

    /// What was counted so far.
    pub fn snapshot(&self) -> PrintCounts {
        PrintCounts {
            used: self.used.load(Ordering::Relaxed),
            written: self.written.load(Ordering::Relaxed),
            fallbacks: self
                .fallbacks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            range_requests: self.range_requests.load(Ordering::Relaxed),
            range_bytes: self.range_bytes.load(Ordering::Relaxed),
            audio_decoded_ns: self.audio_decoded_ns.load(Ordering::Relaxed),
            media_bytes_read: self.media_bytes_read.load(Ordering::Relaxed),
        }
    }
}

/// The most bytes one range read may return (a print asks for seconds of audio).
const MAX_RANGE: usize = 64 << 20;

/// Reads of byte ranges of remote media, one `Range` request each, through the address
/// policy's client, from a blocking thread (the analyser's). A server that answers 200 (the
/// whole body) is noticed (counted as a fallback, "range ignored") and its body not read.
///
/// Every 206 is checked whole against the media printed: its `Content-Range` must be the
/// range asked (start and end) of a media of the printed length, its ETag (when the print
/// has one) the printed one, its Last-Modified (when both have one) the printed one, and its
/// body the length of the range. `If-Range` carries the strong ETag, else the Last-Modified
/// (RFC 9110 13.1.5: a weak ETag cannot); with neither, the answer's validators are all
/// there is. Any mismatch is the media changed: the print is dropped and the episode
/// analysed in full, afresh.
pub struct HttpRanges {
    fetcher: Fetcher,
    url: reqwest::Url,
    runtime: tokio::runtime::Handle,
    len: u64,
    /// `If-Range`: the ETag (strong) or the Last-Modified the print was made from.
    if_range: Option<String>,
    cancel: CancellationToken,
    counters: Arc<PrintCounters>,
    identity: MediaIdentity,
    /// Set when a range request was answered with the whole body.
    ignored: Arc<AtomicBool>,
    /// Set when that body was of other media (the media changed while in use).
    changed: Arc<AtomicBool>,
}

impl std::fmt::Debug for HttpRanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpRanges")
            .field("url", &messagebus::redact_url(self.url.as_str()))
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl HttpRanges {
    /// Ranges of the media at `url`, which `identity` describes (its length must be known);
    /// requests are made on `runtime` and stop when `cancel` is.
    pub fn new(
        fetcher: Fetcher,
        url: reqwest::Url,
        identity: &MediaIdentity,
        runtime: tokio::runtime::Handle,
        cancel: CancellationToken,
        counters: Arc<PrintCounters>,
    ) -> Option<HttpRanges> {
        let MediaIdentity::Http {
            etag,
            last_modified,
            content_length: Some(len),
        } = identity
        else {
            return None;
        };
        let if_range = etag
            .clone()
            .filter(|e| !e.starts_with("W/"))
            .or_else(|| last_modified.clone());
        Some(HttpRanges {
            fetcher,
            url,
            runtime,
            len: *len,
            if_range,
            cancel,
            counters,
            identity: identity.clone(),
            ignored: Arc::default(),
            changed: Arc::default(),
        })
    }

    /// Why reads failed, if a range request was answered with the whole body: the media
    /// changed (under `If-Range`), or the server ignores `Range`.
    pub fn fallback(&self) -> Option<Fallback> {
        if self.changed.load(Ordering::Relaxed) {
            Some(Fallback::ChangedMedia)
        } else if self.ignored.load(Ordering::Relaxed) {
            Some(Fallback::RangeIgnored)
        } else {
            None
        }
    }

    /// The media's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the media is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `len` bytes from `start` (fewer at the end of the media).
    pub fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        if len == 0 || start >= self.len {
            return Ok(Vec::new());
        }
        let len = len.min(MAX_RANGE);
        let last = (start + len as u64 - 1).min(self.len - 1);
        let fetch = self.fetch(start, last);
        let cancel = self.cancel.clone();
        self.runtime.block_on(async move {
            tokio::select! {
                _ = cancel.cancelled() => Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "the researcher is stopping")),
                got = fetch => got,
            }
        })
    }

    fn fetch(
        &self,
        start: u64,
        last: u64,
    ) -> impl std::future::Future<Output = std::io::Result<Vec<u8>>> + Send + 'static {
        let (fetcher, url, if_range, len) = (
            self.fetcher.clone(),
            self.url.clone(),
            self.if_range.clone(),
            self.len,
        );
        let (counters, ignored, changed) = (
            self.counters.clone(),
            self.ignored.clone(),
            self.changed.clone(),
        );
        let identity = self.identity.clone();
        async move {
            let mut headers = net::fetch::with_header(
                HeaderMap::new(),
                header::RANGE,
                &format!("bytes={start}-{last}"),
            );
            if let Some(v) = if_range {
                headers = net::fetch::with_header(headers, header::IF_RANGE, &v);
            }
            let mut response = fetcher
                .get(&url, headers, false)
                .await
                .map_err(std::io::Error::other)?;
            let status = response.status();
            if status == StatusCode::OK {
                // The body is not read: a print needs seconds of it, not all of it.
                let now = MediaIdentity::from_headers(response.headers());
                if identity.same_as(&now) {
                    ignored.store(true, Ordering::Relaxed);
                } else {
                    changed.store(true, Ordering::Relaxed);
                }
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "the media server answered a range request with the whole body",
                ));
            }
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                counters.ranged(0);
                return Ok(Vec::new());
            }
            if status != StatusCode::PARTIAL_CONTENT {
                return Err(std::io::Error::other(format!(
                    "a range request: HTTP {status}"
                )));
            }
            if let Err(why) = ranged_answer_is(&identity, response.headers(), (start, last, len)) {
                changed.store(true, Ordering::Relaxed);
                return Err(std::io::Error::other(format!(
                    "a range request for bytes {start}-{last} of {len}: {why}"
                )));
            }
            let want = (last - start + 1) as usize;
            let mut out = Vec::with_capacity(want);
            while let Some(chunk) = response.chunk().await.map_err(std::io::Error::other)? {
                if out.len() + chunk.len() > want {
                    changed.store(true, Ordering::Relaxed);
                    return Err(std::io::Error::other(format!(
                        "a range request for bytes {start}-{last}: more than {want} bytes came"
                    )));
                }
                out.extend_from_slice(&chunk);
            }
            if out.len() != want {
                return Err(std::io::Error::other(
                    FetchError::Truncated {
                        expected: want as u64,
                        received: out.len() as u64,
                    }
                    .to_string(),
                ));
            }
            counters.ranged(out.len() as u64);
            Ok(out)
        }
    }
}

/// Whether a 206 with `headers` is the range `(start, last)` of the media printed, `len`
/// bytes long, that `identity` describes; why not, if not.
fn ranged_answer_is(
    identity: &MediaIdentity,
    headers: &HeaderMap,
    (start, last, len): (u64, u64, u64),
) -> Result<(), String> {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let range = text(header::CONTENT_RANGE);
    let parsed = range
        .as_deref()
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split_once('/'))
        .and_then(|(span, total)| {
            let (from, to) = span.split_once('-')?;
            Some((
                from.trim().parse::<u64>().ok()?,
                to.trim().parse::<u64>().ok()?,
                total.trim().parse::<u64>().ok(),
            ))
        });
    let Some((from, to, total)) = parsed else {
        return Err(format!("answered with Content-Range {range:?}"));
    };
    if (from, to) != (start, last) {
        return Err(format!("answered with bytes {from}-{to}"));
    }
    if total != Some(len) {
        let said = total.map_or_else(|| "an unknown".to_string(), |t| t.to_string());
        return Err(format!("answered as of media {said} bytes long"));
    }
    let MediaIdentity::Http {
        etag,
        last_modified,
        ..
    } = identity
    else {
        return Ok(());
    };
    // Compared weakly (RFC 9110 8.8.3.2): a strong one was also sent as If-Range.
    let opaque = |tag: &str| tag.trim_start_matches("W/").to_string();
    if let Some(printed) = etag {
        match text(header::ETAG) {
            Some(now) if opaque(&now) == opaque(printed) => {}
            now => return Err(format!("answered with ETag {now:?}, not {printed:?}")),
        }
    }
    if let (Some(printed), Some(now)) = (last_modified, text(header::LAST_MODIFIED)) {
        if &now != printed {
            return Err(format!(
                "answered with Last-Modified {now:?}, not {printed:?}"
            ));
        }
    }
    Ok(())
}

/// Reads of byte ranges of a local file.
#[derive(Debug)]
pub struct FileRanges {
    file: std::fs::File,
    len: u64,
}

impl FileRanges {
    /// Ranges of `file`, `len` bytes long.
    pub fn new(file: std::fs::File, len: u64) -> FileRanges {
        FileRanges { file, len }
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `len` bytes from `start` (fewer at the end of the file).
    pub fn read_at(&mut self, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let len = len.min(MAX_RANGE);
        let mut out = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = self.file.read_at(&mut out[got..], start + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        out.truncate(got);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use axum::http::HeaderMap as AxumHeaders;
    use axum::response::IntoResponse;
    use net::address_policy::AddressPolicy;

    #[test]
    fn a_files_identity_reads_back_as_written() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let meta = std::fs::metadata(file.path()).unwrap();
        let identity = MediaIdentity::of_file(&meta).unwrap();
        assert_eq!(MediaIdentity::parse(&identity.to_text()), Some(identity));
        let http = MediaIdentity::Http {
            etag: Some("\"e1\"".into()),
            last_modified: None,
            content_length: Some(36),
        };
        assert_eq!(MediaIdentity::parse(&http.to_text()), Some(http));
    }

    #[test]
    fn what_items_decoded_and_read_adds_up() {
        let counters = PrintCounters::default();
        counters.analysed(60_000_000_000, 960_044);
        counters.analysed(2_500_000_000, 40_960);
        let counts = counters.snapshot();
        assert_eq!(counts.audio_decoded_ns, 62_500_000_000);
        assert_eq!(counts.media_bytes_read, 1_001_004);
        assert_eq!((counts.used, counts.written), (0, 0));
    }

    /// Serves `BODY` at `/m` with ETag `"e1"`: conditional requests, ranges (unless `/plain`,
    /// which ignores Range) and `If-Range` as a server should.
    const BODY: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

    async fn media(headers: AxumHeaders, uri: axum::http::Uri) -> axum::response::Response {
        use axum::http::{header as h, StatusCode as S};
        // Misbehaving servers: `/other-etag` answers ranges of other media whatever the
        // `If-Range`; `/weak` has only a weak ETag (and changed since: `W/"w1"`);
        // `/wrong-end` ends its ranges a byte early, `/wrong-total` says another total.
        let path = uri.path();
        let etag = match path {
            "/other-etag" => "\"e2\"",
            "/weak" => "W/\"w1\"",
            _ => "\"e1\"",
        };
        let get = |n: h::HeaderName| headers.get(n).and_then(|v| v.to_str().ok());
        if get(h::IF_NONE_MATCH) == Some(etag) {
            return (S::NOT_MODIFIED, [(h::ETAG, etag)]).into_response();
        }
        let ranged = path != "/plain"
            && (path == "/other-etag" || get(h::IF_RANGE).is_none_or(|v| v == etag));
        if let Some((a, b)) = get(h::RANGE)
            .filter(|_| ranged)
            .and_then(|r| r.strip_prefix("bytes="))
            .and_then(|r| r.split_once('-'))
        {
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            let mut b = b.min(BODY.len() - 1);
            if path == "/wrong-end" {
                b -= 1;
            }
            let total = BODY.len() + usize::from(path == "/wrong-total");
            return (
                S::PARTIAL_CONTENT,
                [
                    (h::ETAG, etag.to_string()),
                    (h::CONTENT_RANGE, format!("bytes {a}-{b}/{total}")),
                ],
                BODY[a..=b].to_vec(),
            )
                .into_response();
        }
        (S::OK, [(h::ETAG, etag)], BODY.to_vec()).into_response()
    }

    async fn serve() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(axum::routing::get(media));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    fn client() -> Fetcher {
        Fetcher::new(
            &AddressPolicy::any(),
            net::fetch::FetchConfig::media(
                std::time::Duration::from_secs(5),
                std::time::Duration::from_secs(5),
                1 << 20,
            ),
        )
        .unwrap()
    }

    fn http(etag: &str, len: u64) -> MediaIdentity {
        MediaIdentity::Http {
            etag: Some(etag.into()),
            last_modified: None,
            content_length: Some(len),
        }
    }

    #[test]
    fn identities_round_trip_and_say_whether_they_can_be_checked() {
        let id = http("\"e1\"", 36);
        assert_eq!(MediaIdentity::parse(&id.to_text()), Some(id.clone()));
        assert!(id.can_be_checked());
        let none = MediaIdentity::Http {
            etag: None,
            last_modified: None,
            content_length: Some(3),
        };
        assert!(!none.can_be_checked(), "nothing to show it unchanged");
        assert_eq!(MediaIdentity::parse("not json"), None);
        let mut h = HeaderMap::new();
        h.insert(header::ETAG, "\"x\"".parse().unwrap());
        h.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert_eq!(MediaIdentity::from_headers(&h), http("\"x\"", 12));
        // A weak ETag never shows a 200's body to be the same bytes.
        assert!(!http("W/\"x\"", 12).same_as(&http("W/\"x\"", 12)));
        assert!(http("\"x\"", 12).same_as(&http("\"x\"", 12)));
        assert!(!http("\"x\"", 12).same_as(&http("\"y\"", 12)));
    }

    #[test]
    fn a_file_is_the_same_until_its_size_or_time_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wav");
        std::fs::write(&path, b"abc").unwrap();
        let id = MediaIdentity::of_file(&std::fs::metadata(&path).unwrap()).unwrap();
        assert_eq!(
            check_local(&std::fs::metadata(&path).unwrap(), &id),
            Freshness::Same
        );
        std::fs::write(&path, b"abcd").unwrap();
        assert_eq!(
            check_local(&std::fs::metadata(&path).unwrap(), &id),
            Freshness::Changed
        );
    }

    #[tokio::test]
    async fn conditional_checks() {
        let base = serve().await;
        let url = |p: &str| reqwest::Url::parse(&format!("{base}{p}")).unwrap();
        let c = client();
        let len = BODY.len() as u64;
        // 304.
        assert_eq!(
            check_remote(&c, url("/m"), &http("\"e1\"", len))
                .await
                .unwrap(),
            Freshness::Same
        );
        // Another ETag: the server answers 200 with its own.
        assert_eq!(
            check_remote(&c, url("/m"), &http("\"e0\"", len))
                .await
                .unwrap(),
            Freshness::Changed
        );
        // Nothing to ask with: changed, without a request.
        let none = MediaIdentity::Http {
            etag: None,
            last_modified: None,
            content_length: Some(len),
        };
        assert_eq!(
            check_remote(&c, url("/m"), &none).await.unwrap(),
            Freshness::Changed
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranges_are_read_and_counted_and_a_whole_body_is_noticed() {
        let base = serve().await;
        let counters = Arc::new(PrintCounters::default());
        let len = BODY.len() as u64;
        let make = |path: &str, etag: &str| {
            HttpRanges::new(
                client(),
                reqwest::Url::parse(&format!("{base}{path}")).unwrap(),
                &http(etag, len),
                tokio::runtime::Handle::current(),
                CancellationToken::new(),
                counters.clone(),
            )
            .unwrap()
        };
        let (mut good, mut plain, mut stale) = (
            make("/m", "\"e1\""),
            make("/plain", "\"e1\""),
            make("/m", "\"e0\""),
        );
        let (good, plain, stale) = tokio::task::spawn_blocking(move || {
            assert_eq!(good.read_at(10, 5).unwrap(), b"abcde");
            assert_eq!(good.read_at(30, 100).unwrap(), b"uvwxyz", "cut at the end");
            assert_eq!(good.read_at(100, 5).unwrap(), b"", "past the end");
            assert!(plain.read_at(0, 4).is_err());
            assert!(stale.read_at(0, 4).is_err());
            (good, plain, stale)
        })
        .await
        .unwrap();
        assert_eq!(good.fallback(), None);
        assert_eq!(plain.fallback(), Some(Fallback::RangeIgnored));
        assert_eq!(stale.fallback(), Some(Fallback::ChangedMedia));
        let counted = counters.snapshot();
        assert_eq!((counted.range_requests, counted.range_bytes), (2, 11));
    }

    /// A 206 that is not the range asked of the media printed (another end, another total
    /// length, another ETag, or a weak ETag that changed) is not read as it: the print is
    /// dropped for a full analysis of the media afresh.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ranged_answer_of_anything_but_the_range_asked_drops_the_print() {
        let base = serve().await;
        let counters = Arc::new(PrintCounters::default());
        let len = BODY.len() as u64;
        let make = |path: &str, etag: &str| {
            HttpRanges::new(
                client(),
                reqwest::Url::parse(&format!("{base}{path}")).unwrap(),
                &http(etag, len),
                tokio::runtime::Handle::current(),
                CancellationToken::new(),
                counters.clone(),
            )
            .unwrap()
        };
        let cases = vec![
            make("/wrong-end", "\"e1\""),
            make("/wrong-total", "\"e1\""),
            make("/other-etag", "\"e1\""),
            make("/weak", "W/\"w0\""),
        ];
        let checked = tokio::task::spawn_blocking(move || {
            cases
                .into_iter()
                .map(|mut r| {
                    let read = r.read_at(10, 5);
                    (read, r.fallback())
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        for ((read, fallback), case) in
            checked
                .into_iter()
                .zip(["wrong end", "wrong total", "other etag", "weak etag"])
        {
            assert!(read.is_err(), "{case}: read {read:?}");
            assert_eq!(fallback, Some(Fallback::ChangedMedia), "{case}");
        }
    }

    #[test]
    fn file_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, BODY).unwrap();
        let mut r = FileRanges::new(std::fs::File::open(&path).unwrap(), BODY.len() as u64);
        assert_eq!(r.read_at(10, 5).unwrap(), b"abcde");
        assert_eq!(r.read_at(34, 5).unwrap(), b"yz");
    }
}
