//! The server's media archive for its researchers: what it offers (`GET /api/v1/archive`),
//! an episode's versions (`GET /api/v1/archive/episodes/{key}`), a kept copy read whole or
//! by range (`GET`/`HEAD /api/v1/archive/media/{sha256}`), a copy given back
//! (`PUT /api/v1/archive/media/{sha256}`) and a version recorded
//! (`POST /api/v1/archive/episodes/{key}/versions`), with a researcher's token.
//!
//! A researcher is outside, token or not: every key is checked (64 lowercase hex digits)
//! before it names anything, no path comes from a request, every body is bounded
//! ([`Limits::max_media_bytes`](crate::Limits::max_media_bytes), [`MAX_RECORD_BYTES`]), a
//! copy is kept only if its bytes hash to its name, and a version is recorded only for a
//! copy kept whole. A copy the archive's last check (`archive verify`) found damaged is not
//! served.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use archive::{ArchiveError, EpisodeVersions, Kept, MediaArchive, Version};
use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::auth::Caller;
#[allow(unused_imports)]
use crate::error::ErrorAnswer;
use crate::state::Gateway;
use crate::{lines, ApiError};

/// The most bytes one piece of an answer's body is read from the archive with (at most
/// [`archive::MAX_READ`]): what one request holds in memory at a time.
const PIECE: u64 = 1 << 20;

/// The largest body of `POST /api/v1/archive/episodes/{key}/versions`.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// How long the archive's last check is believed before it is read again.
const REPORT_KEPT: Duration = Duration::from_secs(30);

/// The longest media URI, title, `ETag` or `Last-Modified` a recorded version may carry.
const MAX_URI: usize = 4096;
const MAX_TITLE: usize = 4096;
const MAX_VALIDATOR: usize = 512;
const MAX_MEDIA_TYPE: usize = 16;
/// The most other URIs a recorded version may name (`also_from`).
const MAX_ALSO_FROM: usize = 16;
/// The most versions and URIs an episode may gather through the API: past it, a version is
/// refused (an operator records more where the archive is).
const MAX_EPISODE_URIS: usize = 256;

/// 200's body of `GET /api/v1/archive`: what the server keeps for its researchers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Offered {
    /// Whether it has a media archive (`/api/v1/archive/…`).
    media: bool,
    /// Whether it has a print store (`/api/v1/prints/…`).
    prints: bool,
    /// The largest copy it takes, in bytes.
    max_media_bytes: u64,
    /// The largest print it takes, in bytes (its envelope included).
    max_print_bytes: u64,
    /// The longest range one request should ask for (longer ones are served too, in pieces).
    max_read: u64,
}

/// 200's and 201's body of `PUT /api/v1/archive/media/{sha256}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Given {
    /// The copy's SHA-256.
    sha256: String,
    /// Its length in bytes.
    size: u64,
    /// `new` (its bytes were kept now) or `already` (a whole copy was kept before).
    kept: &'static str,
}

/// The body of `POST /api/v1/archive/episodes/{key}/versions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Recording {
    /// The episode's title.
    title: String,
    /// When it aired: with the title, the episode's key.
    date_aired: DateTime<Utc>,
    /// The version: `sha256`, `size`, `media_uri`, `kept_at`, and where known `etag`,
    /// `last_modified`, `media_type`.
    #[schema(value_type = Object)]
    version: Version,
}

fn no_archive() -> ApiError {
    ApiError::NotFound("this server keeps no media archive (`serve --api --media-archive`)".into())
}

fn archive_of(gateway: &Gateway) -> Result<&Arc<dyn MediaArchive>, ApiError> {
    gateway.holdings.archive.as_ref().ok_or_else(no_archive)
}

/// The answer to an archive's error: what it is about, never where the archive is.
fn refused(e: ArchiveError) -> ApiError {
    match e {
        ArchiveError::NotFound(what) => ApiError::NotFound(format!("the archive holds no {what}")),
        ArchiveError::BadKey(_) => ApiError::BadRequest(e.to_string()),
        ArchiveError::Mismatch { .. } => ApiError::Unprocessable(e.to_string()),
        ArchiveError::BadRange { size, .. } => ApiError::RangeNotSatisfiable { size },
        ArchiveError::Damaged { .. } => ApiError::Conflict(e.to_string()),
        other => {
            // Its words may name the archive's directory or bucket: logged, not shown.
            tracing::warn!(error = %other, "the media archive failed");
            ApiError::Unavailable(
                "the media archive cannot be read or written now: try again later".into(),
            )
        }
    }
}

/// `key` if it is a SHA-256 or an episode key (64 lowercase hex digits), else 400.
fn checked(key: &str) -> Result<&str, ApiError> {
    archive::check_key(key).map_err(|_| {
        ApiError::BadRequest(format!(
            "not a key: {:?} (64 lowercase hexadecimal digits)",
            key.chars().take(80).collect::<String>()
        ))
    })
}

/// Whether the archive's last check found the copy `sha256` damaged (read again at most
/// every [`REPORT_KEPT`]). An archive whose report cannot be read is believed whole.
async fn damaged(gateway: &Gateway, archive: &dyn MediaArchive, sha256: &str) -> bool {
    let known = gateway
        .damaged
        .lock()
        .ok()
        .and_then(|d| d.clone())
        .filter(|(at, _)| at.elapsed() < REPORT_KEPT)
        .map(|(_, set)| set);
    let set = match known {
        Some(set) => set,
        None => {
            let set: HashSet<String> = match archive.report().await {
                Ok(Some(report)) => report.failed.into_iter().map(|(sha, _)| sha).collect(),
                Ok(None) => HashSet::new(),
                Err(e) => {
                    tracing::debug!(error = %e, "the archive's last check could not be read");
                    HashSet::new()
                }
            };
            let set = Arc::new(set);
            if let Ok(mut d) = gateway.damaged.lock() {
                *d = Some((Instant::now(), set.clone()));
            }
            set
        }
    };
    set.contains(sha256)
}

#[utoipa::path(
    get,
    path = "/api/v1/archive",
    tag = "researchers",
    description = "What the server keeps for its researchers: a media archive, a print store, and their bounds.",
    responses(
        (status = 200, description = "What is offered", body = Offered),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn offered(State(gateway): State<Arc<Gateway>>) -> Json<Offered> {
    Json(Offered {
        media: gateway.holdings.archive.is_some(),
        prints: gateway.holdings.prints.is_some(),
        max_media_bytes: gateway.limits.max_media_bytes,
        max_print_bytes: gateway.limits.max_print_bytes as u64,
        max_read: archive::MAX_READ,
    })
}

#[utoipa::path(
    get,
    path = "/api/v1/archive/episodes/{key}",
    tag = "researchers",
    description = "The versions the archive kept of an episode's media, and the one research reads and answers for.",
    params(("key" = String, Path, description = "The episode's key: the SHA-256 (hex) of its title, a line feed, and its airing time in RFC 3339 with nanoseconds and `Z`")),
    responses(
        (status = 200, description = "`title`, `date_aired`, `chosen` (a SHA-256) and `versions` (each `sha256`, `size`, `media_uri`, `kept_at`, and where known `etag`, `last_modified`, `media_type`)", content_type = "application/json"),
        (status = 400, description = "Not a key", body = ErrorAnswer),
        (status = 404, description = "No such episode, or no media archive", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn versions(
    State(gateway): State<Arc<Gateway>>,
    Path(key): Path<String>,
) -> Result<Json<EpisodeVersions>, ApiError> {
    let key = checked(&key)?;
    let archive = archive_of(&gateway)?;
    match archive.versions(key).await.map_err(refused)? {
        Some(episode) => Ok(Json(episode)),
        None => Err(ApiError::NotFound(format!(
            "the archive holds no episode {key}"
        ))),
    }
}

/// What a `Range` header asks of a copy of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    /// No range (or one this server ignores, as HTTP allows: another unit, several ranges,
    /// one that cannot be read): the whole copy, 200.
    Whole,
    /// One range within the copy: 206.
    Part(Range<u64>),
    /// One range wholly outside it: 416.
    Outside,
}

/// Reads a `Range` header (`bytes=A-B`, `bytes=A-`, `bytes=-N`) for a copy of `size` bytes.
fn wanted(header: Option<&HeaderValue>, size: u64) -> Wanted {
    let Some(spec) = header
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.trim().strip_prefix("bytes="))
    else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Wanted::Whole;
    };
    let number = |s: &str| -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (first.trim().is_empty(), number(first), number(last)) {
        // bytes=-N: the last N bytes.
        (true, _, Some(n)) => {
            if n == 0 || size == 0 {
                Wanted::Outside
            } else {
                Wanted::Part(size.saturating_sub(n)..size)
            }
        }
        // bytes=A- and bytes=A-B.
        (false, Some(start), end) if last.trim().is_empty() || end.is_some() => {
            if end.is_some_and(|end| end < start) {
                return Wanted::Whole;
            }
            if start >= size {
                return Wanted::Outside;
            }
            let end = end.map_or(size, |end| end.saturating_add(1).min(size));
            Wanted::Part(start..end)
        }
        _ => Wanted::Whole,
    }
}

/// The bytes `range` of the copy `sha256`, read from the archive in pieces of at most
/// [`PIECE`] as the body is sent.
fn streamed(archive: Arc<dyn MediaArchive>, sha256: String, range: Range<u64>) -> Body {
    let pieces = futures::stream::unfold(range.start, move |at| {
        let archive = archive.clone();
        let sha256 = sha256.clone();
        let end = range.end;
        async move {
            if at >= end {
                return None;
            }
            let to = end.min(at.saturating_add(PIECE.min(archive::MAX_READ)));
            match archive.read(&sha256, at..to).await {
                Ok(bytes) => Some((Ok(axum::body::Bytes::from(bytes)), to)),
                Err(e) => {
                    // The answer is cut short: the client sees a body shorter than it was
                    // told, never other bytes.
                    tracing::warn!(%sha256, error = %e, "a copy could not be read while it was sent");
                    Some((Err(std::io::Error::other(e.to_string())), end))
                }
            }
        }
    });
    Body::from_stream(pieces)
}

#[utoipa::path(
    get,
    path = "/api/v1/archive/media/{sha256}",
    tag = "researchers",
    description = "A kept copy, whole or one range of it (`Range: bytes=A-B`, `bytes=A-`, `bytes=-N`), as HTTP serves ranges; `HEAD` says its length. A copy the archive's last check found damaged is not served.",
    params(("sha256" = String, Path, description = "The copy's SHA-256 (64 lowercase hex digits)")),
    responses(
        (status = 200, description = "The whole copy", content_type = "application/octet-stream"),
        (status = 206, description = "The range asked for, with `Content-Range`", content_type = "application/octet-stream"),
        (status = 416, description = "A range outside the copy, with `Content-Range: bytes */SIZE`", body = ErrorAnswer),
        (status = 400, description = "Not a SHA-256", body = ErrorAnswer),
        (status = 404, description = "No such copy, or no media archive", body = ErrorAnswer),
        (status = 409, description = "The copy is damaged (`archive verify` found it): not served", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn read(
    State(gateway): State<Arc<Gateway>>,
    method: Method,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let sha256 = checked(&sha256)?.to_string();
    let archive = archive_of(&gateway)?.clone();
    let Some(size) = archive.size(&sha256).await.map_err(refused)? else {
        return Err(ApiError::NotFound(format!(
            "the archive holds no copy {sha256}"
        )));
    };
    if damaged(&gateway, archive.as_ref(), &sha256).await {
        return Err(ApiError::Conflict(format!(
            "the archive's copy {sha256} is damaged (`archive verify` found it): not served"
        )));
    }
    let (status, range) = match wanted(headers.get(header::RANGE), size) {
        Wanted::Whole => (StatusCode::OK, 0..size),
        Wanted::Part(range) => (StatusCode::PARTIAL_CONTENT, range),
        Wanted::Outside => return Err(ApiError::RangeNotSatisfiable { size }),
    };
    let length = range.end - range.start;
    let body = if method == Method::HEAD || length == 0 {
        Body::empty()
    } else {
        streamed(archive, sha256.clone(), range.clone())
    };
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, length)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, format!("\"{sha256}\""))
        .header(
            header::CACHE_CONTROL,
            "private, max-age=31536000, immutable",
        );
    if status == StatusCode::PARTIAL_CONTENT {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{size}", range.start, range.end - 1),
        );
    }
    response
        .body(body)
        .map_err(|e| ApiError::Unavailable(format!("the answer could not be made: {e}")))
}

/// Writes `body` to a new temporary file in `dir`, at most `limit` bytes (413 past it).
async fn received(
    body: Body,
    dir: &std::path::Path,
    limit: u64,
) -> Result<(tempfile::NamedTempFile, u64), ApiError> {
    let unwritable = |e: std::io::Error| {
        tracing::warn!(error = %e, dir = %dir.display(), "a copy being given could not be written");
        ApiError::Unavailable("the copy could not be written down: try again later".into())
    };
    let tmp = tempfile::Builder::new()
        .prefix(".archivist-upload-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(unwritable)?;
    let mut file = tokio::fs::File::from_std(tmp.reopen().map_err(unwritable)?);
    let mut stream = body.into_data_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::BadRequest(format!("the body could not be read: {e}")))?;
        total = total.saturating_add(chunk.len() as u64);
        if total > limit {
            return Err(ApiError::TooLarge(
                usize::try_from(limit).unwrap_or(usize::MAX),
            ));
        }
        file.write_all(&chunk).await.map_err(unwritable)?;
    }
    file.flush().await.map_err(unwritable)?;
    Ok((tmp, total))
}

#[utoipa::path(
    put,
    path = "/api/v1/archive/media/{sha256}",
    tag = "researchers",
    description = "Gives the archive a copy: the body is the whole file, kept only if its bytes hash to the SHA-256 named.",
    params(("sha256" = String, Path, description = "The copy's SHA-256 (64 lowercase hex digits)")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The whole media file"),
    responses(
        (status = 201, description = "Kept", body = Given),
        (status = 200, description = "A whole copy was kept already", body = Given),
        (status = 422, description = "The bytes hash to another SHA-256: nothing kept", body = ErrorAnswer),
        (status = 413, description = "Longer than the server takes (`max_media_bytes` of `GET /api/v1/archive`)", body = ErrorAnswer),
        (status = 400, description = "Not a SHA-256, or a body cut short", body = ErrorAnswer),
        (status = 404, description = "No media archive", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn give(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let sha256 = checked(&sha256)?.to_string();
    let archive = archive_of(&gateway)?;
    let limit = gateway.limits.max_media_bytes;
    let said = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if said.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge(
            usize::try_from(limit).unwrap_or(usize::MAX),
        ));
    }
    let dir = gateway
        .holdings
        .upload_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let (tmp, size) = received(body, &dir, limit).await?;
    let kept = archive.keep(&sha256, tmp.path()).await;
    drop(tmp);
    let kept = match kept {
        Ok(kept) => kept,
        Err(e @ ArchiveError::Mismatch { .. }) => {
            tracing::info!(token = %caller.name, %sha256, "a copy refused: its bytes hash to another SHA-256");
            return Err(refused(e));
        }
        Err(e) => return Err(refused(e)),
    };
    let (status, word) = match kept {
        Kept::New => {
            tracing::info!(token = %caller.name, %sha256, size, "a copy given and kept");
            (StatusCode::CREATED, "new")
        }
        Kept::Already => (StatusCode::OK, "already"),
    };
    Ok((
        status,
        Json(Given {
            sha256,
            size,
            kept: word,
        }),
    )
        .into_response())
}

/// `text` if it is at most `max` bytes without control characters, else why not.
fn plain(what: &str, text: &str, max: usize) -> Result<(), String> {
    if text.len() > max {
        return Err(format!("{what}: longer than {max} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what}: holds control characters"));
    }
    Ok(())
}

/// What is wrong with a version a researcher would record, if anything.
fn refuses(version: &Version, title: &str) -> Result<(), String> {
    plain("title", title, MAX_TITLE)?;
    if archive::check_key(&version.sha256).is_err() {
        return Err("version.sha256: not a SHA-256 (64 lowercase hexadecimal digits)".into());
    }
    if version.also_from.len() > MAX_ALSO_FROM {
        return Err(format!("version.also_from: more than {MAX_ALSO_FROM} URIs"));
    }
    for (what, uri) in std::iter::once(("version.media_uri", &version.media_uri)).chain(
        version
            .also_from
            .iter()
            .map(|uri| ("version.also_from", uri)),
    ) {
        plain(what, uri, MAX_URI)?;
        if !lines::is_http(uri) {
            return Err(format!("{what}: not an http(s) URL"));
        }
    }
    for (what, value) in [
        ("version.etag", &version.etag),
        ("version.last_modified", &version.last_modified),
    ] {
        if let Some(value) = value {
            plain(what, value, MAX_VALIDATOR)?;
        }
    }
    if let Some(kind) = &version.media_type {
        let ok = !kind.is_empty()
            && kind.len() <= MAX_MEDIA_TYPE
            && kind.bytes().all(|b| b.is_ascii_alphanumeric());
        if !ok {
            return Err(format!(
                "version.media_type: at most {MAX_MEDIA_TYPE} letters and digits (mp3, m4a, …)"
            ));
        }
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/api/v1/archive/episodes/{key}/versions",
    tag = "researchers",
    description = "Records a version of an episode's media, its copy kept already (`PUT /api/v1/archive/media/{sha256}`): the first recorded becomes the one research reads and answers for; one recorded before changes nothing.",
    params(("key" = String, Path, description = "The episode's key (see `GET /api/v1/archive/episodes/{key}`)")),
    request_body(content = Recording, description = "The episode's `title` and `date_aired` (they must give the key) and the `version`"),
    responses(
        (status = 200, description = "What the archive knows of the episode now (as `GET /api/v1/archive/episodes/{key}`)", content_type = "application/json"),
        (status = 422, description = "A title and date that do not give the key, a version whose copy is not kept (or of another length), a field out of bounds: nothing recorded", body = ErrorAnswer),
        (status = 400, description = "Not a key, or not the JSON asked for", body = ErrorAnswer),
        (status = 409, description = "The copy is damaged (`archive verify` found it)", body = ErrorAnswer),
        (status = 413, description = "The body is over the limit", body = ErrorAnswer),
        (status = 404, description = "No media archive", body = ErrorAnswer),
        (status = 401, description = "No valid token", body = ErrorAnswer),
        (status = 403, description = "A token of another scope", body = ErrorAnswer),
        (status = 429, description = "Too many failed attempts or requests", body = ErrorAnswer),
    )
)]
pub(crate) async fn record(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    body: Body,
) -> Result<Json<EpisodeVersions>, ApiError> {
    let key = checked(&key)?.to_string();
    let archive = archive_of(&gateway)?;
    let body = lines::read(body, MAX_RECORD_BYTES).await?;
    let Recording {
        title,
        date_aired,
        mut version,
    } = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("not a version to record: {e}")))?;
    refuses(&version, &title).map_err(ApiError::Unprocessable)?;
    if archive::episode_key(&title, &date_aired) != key {
        return Err(ApiError::Unprocessable(format!(
            "the title and date_aired give another key than {key}"
        )));
    }
    match archive.size(&version.sha256).await.map_err(refused)? {
        None => {
            return Err(ApiError::Unprocessable(format!(
                "the copy {} is not kept: give it first (PUT /api/v1/archive/media/{})",
                version.sha256, version.sha256
            )))
        }
        Some(size) if size != version.size => {
            return Err(ApiError::Unprocessable(format!(
                "the copy {} is {size} bytes long, not {}",
                version.sha256, version.size
            )))
        }
        Some(_) => {}
    }
    if damaged(&gateway, archive.as_ref(), &version.sha256).await {
        return Err(ApiError::Conflict(format!(
            "the archive's copy {} is damaged (`archive verify` found it): not recorded",
            version.sha256
        )));
    }
    if let Some(known) = archive.versions(&key).await.map_err(refused)? {
        let uris: usize = known.versions.iter().map(|v| 1 + v.also_from.len()).sum();
        let already = known.versions.iter().any(|v| {
            v.sha256 == version.sha256
                && (v.media_uri == version.media_uri || v.also_from.contains(&version.media_uri))
        });
        if uris >= MAX_EPISODE_URIS && !already {
            return Err(ApiError::Unprocessable(format!(
                "the episode has {uris} versions and URIs already: no more are recorded \
                 through the API"
            )));
        }
    }
    // Kept when the server says: a researcher's clock is not the archive's.
    version.kept_at = version.kept_at.min(Utc::now());
    let sha256 = version.sha256.clone();
    let episode = archive
        .record(&key, &title, date_aired, version)
        .await
        .map_err(refused)?;
    tracing::info!(token = %caller.name, episode = %key, %sha256, versions = episode.versions.len(), "a version recorded");
    Ok(Json(episode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_http_reads_them() {
        let h = |s: &str| HeaderValue::from_str(s).ok();
        let w = |s: &str, size| wanted(h(s).as_ref(), size);
        assert_eq!(wanted(None, 100), Wanted::Whole);
        assert_eq!(w("bytes=0-9", 100), Wanted::Part(0..10));
        assert_eq!(w("bytes=90-200", 100), Wanted::Part(90..100));
        assert_eq!(w("bytes=50-", 100), Wanted::Part(50..100));
        assert_eq!(w("bytes=-10", 100), Wanted::Part(90..100));
        assert_eq!(w("bytes=-1000", 100), Wanted::Part(0..100));
        assert_eq!(w("bytes=100-", 100), Wanted::Outside);
        assert_eq!(w("bytes=100-200", 100), Wanted::Outside);
        assert_eq!(w("bytes=-0", 100), Wanted::Outside);
        assert_eq!(w("bytes=0-0", 0), Wanted::Outside);
        // Ignored, as HTTP allows: the whole copy.
        for ignored in [
            "items=0-9",
            "bytes=0-9,20-29",
            "bytes=9-0",
            "bytes=x-9",
            "bytes=",
            "bytes=-",
            "bytes=+1-2",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(w(ignored, 100), Wanted::Whole, "{ignored}");
        }
    }
}
