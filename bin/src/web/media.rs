//! `GET /media/{sha256}` (and `HEAD`): a kept copy of the media archive, for the pages'
//! players, under the pages' access rules. One byte range at a time (`Range: bytes=…`: 206
//! with `Content-Range`; 416 for a range outside the copy; the whole copy, 200, for no range,
//! several ranges or one that cannot be read); the copy never changes, so its `ETag` is its
//! SHA-256. The body is streamed, read from the archive in pieces of at most [`PIECE`] bytes:
//! a whole episode is never held in memory.
//!
//! 400 for a name that is not a SHA-256, 404 for a copy not kept (or that the last
//! `archive verify` found damaged: it is never played), and 404 without an archive.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::app::{App, CHECK_TIMEOUT};

/// The most bytes read from the archive at once while a body is sent.
pub(super) const PIECE: u64 = if archive::MAX_READ < 4 << 20 {
    archive::MAX_READ
} else {
    4 << 20
};

/// The part of a copy of `size` bytes a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wanted {
    /// The whole copy (no `Range`, or one this server does not honour).
    Whole,
    /// The bytes `first..=last`.
    Part { first: u64, last: u64 },
    /// A range that starts past the end: 416.
    Unsatisfiable,
}

/// What `Range: range` asks of a copy of `size` bytes: one byte range (`bytes=A-B`,
/// `bytes=A-`, `bytes=-N`); several ranges, another unit or a malformed one are the whole
/// copy, as RFC 9110 lets a server answer.
pub(super) fn wanted(range: Option<&str>, size: u64) -> Wanted {
    let Some(range) = range else {
        return Wanted::Whole;
    };
    let Some((unit, spec)) = range.trim().split_once('=') else {
        return Wanted::Whole;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
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
    match (first.trim().is_empty(), last.trim().is_empty()) {
        // bytes=-N: the last N bytes.
        (true, false) => match number(last) {
            Some(0) => Wanted::Unsatisfiable,
            Some(_) if size == 0 => Wanted::Unsatisfiable,
            Some(n) => Wanted::Part {
                first: size - n.min(size),
                last: size - 1,
            },
            None => Wanted::Whole,
        },
        // bytes=A-: from A to the end.
        (false, true) => match number(first) {
            Some(a) if a >= size => Wanted::Unsatisfiable,
            Some(a) => Wanted::Part {
                first: a,
                last: size - 1,
            },
            None => Wanted::Whole,
        },
        // bytes=A-B.
        (false, false) => match (number(first), number(last)) {
            (Some(a), Some(b)) if a > b => Wanted::Whole,
            (Some(a), Some(_)) if a >= size => Wanted::Unsatisfiable,
            (Some(a), Some(b)) => Wanted::Part {
                first: a,
                last: b.min(size - 1),
            },
            _ => Wanted::Whole,
        },
        (true, true) => Wanted::Whole,
    }
}

/// The `Content-Type` of a copy whose version was recorded with `media_type` (an extension,
/// as `mp3`, or a MIME type of audio or video); `application/octet-stream` otherwise.
pub(super) fn content_type(media_type: Option<&str>) -> HeaderValue {
    const UNKNOWN: HeaderValue = HeaderValue::from_static("application/octet-stream");
    let Some(given) = media_type.map(|t| t.trim().to_ascii_lowercase()) else {
        return UNKNOWN;
    };
    let known = match given.trim_start_matches('.') {
        "mp3" | "mpeg" | "mpga" => "audio/mpeg",
        "m4a" | "m4b" | "mp4" | "aac" | "adts" => {
            if given.ends_with("aac") || given.ends_with("adts") {
                "audio/aac"
            } else {
                "audio/mp4"
            }
        }
        "ogg" | "oga" | "opus" => "audio/ogg",
        "wav" | "wave" => "audio/wav",
        "flac" => "audio/flac",
        "webm" | "weba" => "audio/webm",
        other => {
            // A MIME type of audio or video, of the characters such a type is made of.
            let plain = other
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/.+-".contains(&b));
            if plain
                && other.matches('/').count() == 1
                && (other.starts_with("audio/") || other.starts_with("video/"))
            {
                return HeaderValue::from_str(other).unwrap_or(UNKNOWN);
            }
            return UNKNOWN;
        }
    };
    HeaderValue::from_static(known)
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{why}\n"),
    )
        .into_response()
}

/// `GET /media/{sha256}`, `HEAD /media/{sha256}`.
pub(super) async fn media(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let Some(view) = &app.archive else {
        return refuse(
            StatusCode::NOT_FOUND,
            "this server keeps no media archive (--media-archive)",
        );
    };
    let Ok(sha256) = archive::check_key(&name) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "not a SHA-256: a copy is named by 64 lowercase hexadecimal digits",
        );
    };
    let sha256 = sha256.to_string();
    let archive = view.archive().clone();
    let size = match tokio::time::timeout(CHECK_TIMEOUT, archive.size(&sha256)).await {
        Ok(Ok(Some(size))) => size,
        Ok(Ok(None)) => return refuse(StatusCode::NOT_FOUND, "no copy is kept under this name"),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "a copy's size not read");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the media archive cannot be read now",
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "the media archive did not answer in time",
            )
        }
    };
    if view.damaged().await.contains(&sha256) {
        return refuse(
            StatusCode::NOT_FOUND,
            "this copy failed the last archive verify: it is not played",
        );
    }
    let etag = format!("\"{sha256}\"");
    let mut out = HeaderMap::new();
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        out.insert(header::ETAG, v);
    }
    out.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=31536000, immutable"),
    );
    out.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    out.insert(
        header::CONTENT_TYPE,
        content_type(view.media_type(&sha256).as_deref()),
    );
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(tags) = text(header::IF_NONE_MATCH) {
        if tags.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == etag
        }) {
            return (StatusCode::NOT_MODIFIED, out).into_response();
        }
    }
    // A range is honoured only for this very copy (If-Range with another validator: whole).
    let range = match text(header::IF_RANGE) {
        Some(tag) if tag.trim() != etag => None,
        _ => text(header::RANGE),
    };
    let (status, first, end) = match wanted(range, size) {
        Wanted::Whole => (StatusCode::OK, 0, size),
        Wanted::Part { first, last } => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {first}-{last}/{size}")) {
                out.insert(header::CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, first, last + 1)
        }
        Wanted::Unsatisfiable => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                out.insert(header::CONTENT_RANGE, v);
            }
            out.insert(header::CONTENT_LENGTH, HeaderValue::from(0u64));
            return (StatusCode::RANGE_NOT_SATISFIABLE, out).into_response();
        }
    };
    out.insert(header::CONTENT_LENGTH, HeaderValue::from(end - first));
    if method == Method::HEAD {
        return (status, out, Body::empty()).into_response();
    }
    (
        status,
        out,
        Body::from_stream(pieces(archive, sha256, first, end)),
    )
        .into_response()
}

/// The bytes `first..end` of the copy `sha256`, read as they are sent, [`PIECE`] at a time. A
/// read that fails ends the body early (the client sees it cut short), said in the log.
fn pieces(
    archive: Arc<dyn archive::MediaArchive>,
    sha256: String,
    first: u64,
    end: u64,
) -> impl futures::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    futures::stream::try_unfold(first, move |at| {
        let archive = archive.clone();
        let sha256 = sha256.clone();
        async move {
            if at >= end {
                return Ok(None);
            }
            let to = end.min(at.saturating_add(PIECE));
            match archive.read(&sha256, at..to).await {
                Ok(bytes) if bytes.len() as u64 == to - at => Ok(Some((bytes, to))),
                Ok(bytes) => {
                    tracing::warn!(
                        copy = %sha256,
                        "the media archive gave {} bytes for {at}..{to}: the answer is cut short",
                        bytes.len()
                    );
                    Err(std::io::Error::other("short read"))
                }
                Err(e) => {
                    tracing::warn!(copy = %sha256, "the copy could not be read for a player: {e}");
                    Err(std::io::Error::other(e.to_string()))
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        let part = |first, last| Wanted::Part { first, last };
        assert_eq!(wanted(None, 100), Wanted::Whole);
        assert_eq!(wanted(Some("bytes=0-9"), 100), part(0, 9));
        assert_eq!(wanted(Some("bytes=10-"), 100), part(10, 99));
        assert_eq!(wanted(Some("bytes=-10"), 100), part(90, 99));
        assert_eq!(wanted(Some("bytes=-1000"), 100), part(0, 99));
        assert_eq!(wanted(Some("bytes=50-1000"), 100), part(50, 99));
        assert_eq!(wanted(Some("BYTES = 1-1"), 100), part(1, 1));
        assert_eq!(wanted(Some("bytes=100-"), 100), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=200-300"), 100), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-0"), 100), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=0-"), 0), Wanted::Unsatisfiable);
        assert_eq!(wanted(Some("bytes=-5"), 0), Wanted::Unsatisfiable);
        for whole in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=9-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=+1-2",
            "bytes=1",
            "bytes=99999999999999999999999-",
            "",
        ] {
            assert_eq!(wanted(Some(whole), 100), Wanted::Whole, "{whole}");
        }
    }

    #[test]
    fn media_types_become_content_types() {
        let ct = |t: Option<&str>| content_type(t).to_str().unwrap_or("").to_string();
        assert_eq!(ct(Some("mp3")), "audio/mpeg");
        assert_eq!(ct(Some("M4A")), "audio/mp4");
        assert_eq!(ct(Some("aac")), "audio/aac");
        assert_eq!(ct(Some("wav")), "audio/wav");
        assert_eq!(ct(Some("audio/x-custom")), "audio/x-custom");
        assert_eq!(ct(Some("text/html")), "application/octet-stream");
        assert_eq!(ct(Some("audio/mpeg\r\nx: y")), "application/octet-stream");
        assert_eq!(ct(Some("exe")), "application/octet-stream");
        assert_eq!(ct(None), "application/octet-stream");
    }
}
