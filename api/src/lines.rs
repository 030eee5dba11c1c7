//! Request bodies: read within the limit, split into JSON lines, each checked with the
//! archivists' own rules before anything is done with any of them.

use archivist::messages::{self, Message};
use axum::body::Body;

use crate::error::LineError;
use crate::ApiError;

/// Reads `body`, at most `limit` bytes (413 past it).
pub(crate) async fn read(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        // A body over the limit, or one the client stopped sending.
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            || e.to_string().contains("length limit")
        {
            ApiError::TooLarge(limit)
        } else {
            ApiError::BadRequest(format!("the body could not be read: {e}"))
        }
    })
}

/// One line of a body: its number (from 1) and its bytes (without the line ending).
pub(crate) struct Line<'a> {
    pub(crate) number: usize,
    pub(crate) bytes: &'a [u8],
}

/// The non-blank lines of `body`, at most `max`: 400 naming the first line that is not
/// JSON, or when there is no line at all; 413 past `max` lines (counted before anything is
/// decoded, so that a body of millions of tiny lines costs no more than its bytes).
pub(crate) fn split(body: &[u8], max: usize) -> Result<Vec<Line<'_>>, ApiError> {
    let mut lines = Vec::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if lines.len() >= max {
            return Err(ApiError::TooManyLines(max));
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            return Err(ApiError::BadRequest(format!(
                "line {}: not JSON: {e}",
                i + 1
            )));
        }
        lines.push(Line {
            number: i + 1,
            bytes: line,
        });
    }
    if lines.is_empty() {
        return Err(ApiError::BadRequest(
            "the body holds no message: one JSON object, or one a line".into(),
        ));
    }
    Ok(lines)
}

/// A message with a media address that must be http(s) when it comes through the API.
pub(crate) trait HasMedia {
    fn media_uri(&self) -> &str;
}

impl HasMedia for messages::EpisodeInfo {
    fn media_uri(&self) -> &str {
        &self.media_uri
    }
}

impl HasMedia for messages::ClipInfo {
    fn media_uri(&self) -> &str {
        &self.media_uri
    }
}

/// Whether `uri` is an http(s) URL: a curator's token must not make a researcher read its
/// own disk (`file://`, a plain path).
pub(crate) fn is_http(uri: &str) -> bool {
    let lower = uri.get(..8).unwrap_or(uri).to_ascii_lowercase();
    (lower.starts_with("http://") && uri.len() > 7)
        || (lower.starts_with("https://") && uri.len() > 8)
}

/// Decodes every line as `M` with [`messages::decode`]; 422 with the bad lines' reasons (the
/// first [`MAX_LISTED`](crate::error::MAX_LISTED) listed, all counted).
pub(crate) fn decode_all<M: Message>(
    lines: &[Line<'_>],
    also: impl Fn(&M) -> Result<(), String>,
) -> Result<Vec<M>, ApiError> {
    let mut errors = Vec::new();
    let mut refused = 0;
    let mut decoded = Vec::with_capacity(lines.len());
    for line in lines {
        let reason = match messages::decode::<M>(line.bytes) {
            Ok(message) => match also(&message) {
                Ok(()) => {
                    decoded.push(message);
                    continue;
                }
                Err(reason) => reason,
            },
            Err(e) => e.to_string(),
        };
        refused += 1;
        if errors.len() < crate::error::MAX_LISTED {
            errors.push(LineError {
                line: line.number,
                reason,
            });
        }
    }
    if refused == 0 {
        Ok(decoded)
    } else {
        Err(ApiError::Invalid { errors, refused })
    }
}

/// 422's reason for a media address that is not http(s).
pub(crate) fn http_media<M: HasMedia>(message: &M) -> Result<(), String> {
    if is_http(message.media_uri()) {
        Ok(())
    } else {
        Err(format!(
            "media_uri {:?}: only http:// and https:// addresses are taken through the API",
            message.media_uri()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_media() {
        assert!(is_http("https://example.com/a.mp3"));
        assert!(is_http("HTTP://example.com/a.mp3"));
        assert!(!is_http("file:///etc/passwd"));
        assert!(!is_http("/etc/passwd"));
        assert!(!is_http("https://"));
        assert!(!is_http("ftp://example.com/a.mp3"));
    }

    #[test]
    fn lines_are_numbered_and_blank_ones_skipped() {
        let lines = split(b"{}\n\n  \r\n{\"a\":1}\r\n", 10)
            .ok()
            .unwrap_or_default();
        let numbers: Vec<_> = lines.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [1, 4]);
        let err = split(b"{}\nnope\n", 10).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.starts_with("line 2: not JSON")));
        assert!(split(b"\n \n", 10).is_err());
    }

    #[test]
    fn lines_are_counted_before_they_are_decoded_and_refusals_listed_within_bounds() {
        let body = "{}\n".repeat(1000);
        assert!(matches!(
            split(body.as_bytes(), 999),
            Err(ApiError::TooManyLines(999))
        ));
        let lines = split(body.as_bytes(), 1000).unwrap_or_default();
        assert_eq!(lines.len(), 1000);
        let refused = match decode_all::<messages::EpisodeInfo>(&lines, |_| Ok(())) {
            Err(ApiError::Invalid { errors, refused }) => Some((errors.len(), refused)),
            _ => None,
        };
        assert_eq!(refused, Some((crate::error::MAX_LISTED, 1000)));
    }
}
