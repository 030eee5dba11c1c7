//! [`HttpAnalyser`] (`archivist research --http URL`): the analyser as an HTTP service. Each
//! work item is POSTed to the URL (the same JSON object `--exec` writes on standard input,
//! `Content-Type: application/json`); the response body streams the protocol's lines. 2xx
//! and the whole body: done; 429 or 503: try later; any other status or a body cut short: the item fails.
//! The media paths are local to the researcher: the service must see the same files (run it
//! on the same host, or share the cache directory).
//!
//! The client has only a connect timeout: the researcher puts the wait for the headers and
//! for each line under its stall timeout and the drain (`work.rs`), dropping the request when
//! either runs out.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::StatusCode;

use crate::analyser::{Analyser, BoxError, Ending, Run};
use crate::protocol::MAX_LINE_BYTES;
use crate::ResearchError;

/// POSTs each work item to one URL.
#[derive(Debug, Clone)]
pub struct HttpAnalyser {
    client: reqwest::Client,
    url: reqwest::Url,
    /// The URL as logs show it: credentials masked.
    shown: String,
}

impl HttpAnalyser {
    /// An analyser at `url` (http or https), connecting within `connect_timeout`. A `url`
    /// that is not an http(s) URL is [`ResearchError::Config`], named as `--http` (with its
    /// credentials masked).
    pub fn new(url: &str, connect_timeout: Duration) -> Result<Self, ResearchError> {
        let shown = messagebus::redact_url(url);
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ResearchError::Config(format!("--http {shown}: not a URL ({e})")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ResearchError::Config(format!(
                "--http {shown}: expected an http:// or https:// URL"
            )));
        }
        net::install_crypto();
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(ResearchError::HttpClient)?;
        Ok(HttpAnalyser {
            client,
            url: parsed,
            shown,
        })
    }
}

#[async_trait]
impl Analyser for HttpAnalyser {
    async fn start(&self, input: Vec<u8>, _lease: &str) -> Result<Box<dyn Run>, BoxError> {
        let response = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(input)
            .send()
            .await
            // reqwest's error names the URL: say it once, masked.
            .map_err(|e| {
                format!(
                    "the analyser at {} did not answer: {}",
                    self.shown,
                    e.without_url()
                )
            })?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            return Ok(Box::new(HttpRun::Ended(Ending::TryLater(format!(
                "the analyser answered HTTP {status}"
            )))));
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            let why = match reason(&text) {
                Some(reason) => format!("the analyser answered HTTP {status}: {reason}"),
                None => format!("the analyser answered HTTP {status}"),
            };
            return Ok(Box::new(HttpRun::Ended(Ending::Failed(why))));
        }
        Ok(Box::new(HttpRun::Streaming {
            response,
            pending: Vec::new(),
            done: false,
            broken: None,
        }))
    }

    fn describe(&self) -> String {
        format!("http {}", self.shown)
    }
}

/// The reason in an error answer's body, when it gives one a person can read in a line: a
/// JSON `error`, `reason` or `message`, or a short line of plain text. An HTML page or a long
/// body is never pasted into the error: the status says it.
fn reason(body: &str) -> Option<String> {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(body) {
        return ["error", "reason", "message"]
            .iter()
            .find_map(|key| match map.get(*key) {
                Some(serde_json::Value::String(s)) => {
                    Some(crate::protocol::truncate(s.trim(), 300))
                }
                _ => None,
            });
    }
    let text = body.trim();
    let plain = !text.is_empty()
        && text.len() <= 200
        && !text.contains(['<', '>', '{', '\n', '\r'])
        && !text.chars().any(char::is_control);
    plain.then(|| text.to_string())
}

enum HttpRun {
    /// The answer had no body to read.
    Ended(Ending),
    Streaming {
        response: reqwest::Response,
        /// Bytes received and not yet returned as lines.
        pending: Vec<u8>,
        /// The body ended.
        done: bool,
        /// The body broke off.
        broken: Option<String>,
    },
}

#[async_trait]
impl Run for HttpRun {
    async fn next_line(&mut self) -> Result<Option<String>, BoxError> {
        let HttpRun::Streaming {
            response,
            pending,
            done,
            broken,
        } = self
        else {
            return Ok(None);
        };
        loop {
            if let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let rest = pending.split_off(end + 1);
                let mut line = std::mem::replace(pending, rest);
                line.pop();
                return Ok(Some(utf8_line(line)?));
            }
            if pending.len() > MAX_LINE_BYTES {
                return Err(
                    format!("the analyser sent a line longer than {MAX_LINE_BYTES} bytes").into(),
                );
            }
            if *done || broken.is_some() {
                if pending.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(utf8_line(std::mem::take(pending))?));
            }
            match response.chunk().await {
                Ok(Some(bytes)) => pending.extend_from_slice(&bytes),
                Ok(None) => *done = true,
                Err(e) => *broken = Some(e.without_url().to_string()),
            }
        }
    }

    async fn finish(&mut self) -> Ending {
        match self {
            HttpRun::Ended(ending) => ending.clone(),
            HttpRun::Streaming {
                broken: Some(why), ..
            } => Ending::Failed(format!("the analyser's response broke off: {why}")),
            HttpRun::Streaming { .. } => Ending::Done,
        }
    }

    async fn stop(self: Box<Self>) {
        // Dropping the response closes the connection: the service sees the client gone.
    }
}

fn utf8_line(mut bytes: Vec<u8>) -> Result<String, BoxError> {
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    String::from_utf8(bytes).map_err(|_| "the analyser sent a line that is not UTF-8".into())
}

#[cfg(test)]
mod tests {
    use super::reason;

    #[test]
    fn an_error_page_is_not_pasted_into_the_failure() {
        let page = "<!DOCTYPE html>\n<html><body><h1>502 Bad Gateway</h1></body></html>\n";
        assert_eq!(reason(page), None);
        assert_eq!(reason(&"x".repeat(1000)), None);
        assert_eq!(
            reason(r#"{"error": "no such clip"}"#).as_deref(),
            Some("no such clip")
        );
        assert_eq!(reason("busy decoding\n").as_deref(), Some("busy decoding"));
    }
}
