//! The HTTP layer of the API adapter: one request to the server with the bearer token,
//! connection errors and overloaded answers retried with a bounded backoff, and the answers
//! every endpoint shares (401, 403) turned into [`BusError`]s. What an endpoint's own answers
//! mean (200, 204, 409, 413, 422) is for its caller.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, DATE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use tokio::time::Instant;

use super::{ApiConfig, ApiToken, Scope};
use crate::{redact_url, BusError};

/// The longest reason quoted from a server's answer.
const MAX_REASON: usize = 300;

/// The header a researcher's requests name their slot with: the server counts each slot as
/// one researcher (many slots share one token and one address).
pub(crate) const RESEARCHER_HEADER: &str = "x-archivist-researcher";

/// One request's settings besides its method, URL and body.
struct Call<'a> {
    /// The token's scope the request needs; `None`: sent without the token.
    scope: Option<Scope>,
    researcher: Option<&'a str>,
    /// The request in words, for errors.
    what: &'a str,
    timeout: Duration,
}

/// The server's answer to one request (after any retries).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// The body, whole.
    pub(crate) body: Vec<u8>,
    /// When the request that was answered was sent (the last try), by this process's clock.
    pub(crate) sent_at: Instant,
    /// The server's clock when it answered (its `Date` header), where it said.
    pub(crate) server_date: Option<DateTime<Utc>>,
    /// Whether an earlier try of this request may have reached the server (its answer was
    /// lost): a 409 for a `finish` tried again then means the first one landed.
    pub(crate) retried: bool,
}

impl Answer {
    /// The body as JSON of type `T`, or [`BusError::Rejected`] naming what the server sent.
    pub(crate) fn json<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T, BusError> {
        serde_json::from_slice(&self.body).map_err(|e| BusError::Rejected {
            message: format!(
                "the server's answer to {what} (HTTP {}) is not what the API sends: {e}",
                self.status.as_u16()
            ),
            source: None,
        })
    }

    /// The reason the server gave, in words: its JSON `error`/`reason`/`message`, a short
    /// line of plain text, or else the status's own reason (see [`reason_of`]).
    pub(crate) fn reason(&self) -> String {
        reason_of(self.status, &self.body)
    }
}

/// The longest plain-text body quoted as a reason (one line, no markup).
const MAX_PLAIN_REASON: usize = 200;

/// The reason in an error body: its JSON `error`, `reason` or `message` string (the API's
/// answers), or a short line of plain text (a proxy's word); anything else (an HTML error
/// page, a long or many-line body) is summarised as the status's reason (`Not Found`), never
/// pasted whole.
pub(crate) fn reason_of(status: StatusCode, body: &[u8]) -> String {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(body) {
        for key in ["error", "reason", "message"] {
            if let Some(serde_json::Value::String(s)) = map.get(key) {
                return cut(s.trim());
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let plain = !text.is_empty()
        && text.len() <= MAX_PLAIN_REASON
        && !text.contains(['<', '>', '{', '\n', '\r'])
        && !text.chars().any(char::is_control);
    if plain {
        return text.to_string();
    }
    status
        .canonical_reason()
        .unwrap_or("no reason given")
        .to_string()
}

fn cut(s: &str) -> String {
    if s.len() <= MAX_REASON {
        return s.to_string();
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The client of one server: its address, the token, and the retry settings.
pub(crate) struct Client {
    http: reqwest::Client,
    /// The API's root, `…/api/v1/`.
    base: Url,
    /// The server as messages show it (credentials in the URL masked).
    pub(crate) shown: String,
    token: ApiToken,
    config: ApiConfig,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.shown)
            .field("token", &self.token)
            .finish()
    }
}

/// How a request's body is sent.
pub(crate) enum Body {
    /// No body.
    Empty,
    /// JSON lines (one message or result a line).
    Lines(Vec<u8>),
}

impl Client {
    /// A client of `config.server`; a server address that is not an http(s) URL is
    /// [`BusError::Rejected`].
    pub(crate) fn new(config: &ApiConfig) -> Result<Client, BusError> {
        let shown = redact_url(config.server.trim());
        let base = api_root(config.server.trim()).map_err(|why| BusError::Rejected {
            message: format!("the server {shown}: {why}"),
            source: None,
        })?;
        if base.scheme() == "http" && !is_loopback(&base) {
            tracing::warn!(
                server = %shown,
                "the API token goes to the server in clear text (http://): use https:// for a \
                 server on another machine"
            );
        }
        crate::api::install_crypto();
        let mut builder = reqwest::Client::builder();
        if let Some(file) = &config.ca_cert {
            for certificate in ca_certificates(file)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder
            .connect_timeout(config.connect_timeout)
            // The server is the one configured, on whatever network it is: no private-address
            // policy (that guards fetches of others' URLs), and no redirects (a token must not
            // follow one to another host).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| BusError::Rejected {
                message: "cannot build the API's HTTP client".into(),
                source: Some(Box::new(e)),
            })?;
        Ok(Client {
            http,
            base,
            shown,
            token: config.token.clone(),
            config: config.clone(),
        })
    }

    /// The longest wait for one answer, as configured.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// The URL of `segments` below the API's root (each segment percent-encoded).
    pub(crate) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    /// POSTs `body` to `url` with the token, for a request of `scope` (`what`: the request in
    /// words, for errors). Connection errors, timeouts, and the answers of an overloaded or
    /// restarting server (429, 502, 503, 504) are tried again, up to the configured
    /// attempts with a doubling backoff (a `Retry-After` in seconds is honoured up to the
    /// longest backoff), then [`BusError::Unavailable`]. 401 and 403 are
    /// [`BusError::Unauthorized`] naming `scope`. Any other answer is returned.
    /// `researcher`: the slot's name for the server's count of researchers (see
    /// [`RESEARCHER_HEADER`]).
    pub(crate) async fn post(
        &self,
        url: Url,
        body: Body,
        scope: Scope,
        researcher: Option<&str>,
        what: &str,
        timeout: Duration,
    ) -> Result<Answer, BusError> {
        let call = Call {
            scope: Some(scope),
            researcher,
            what,
            timeout,
        };
        self.send(reqwest::Method::POST, url, body, call).await
    }

    /// GETs `url` with the token, for a request of `scope`, as [`post`](Self::post) does.
    pub(crate) async fn get(&self, url: Url, scope: Scope, what: &str) -> Result<Answer, BusError> {
        let call = Call {
            scope: Some(scope),
            researcher: None,
            what,
            timeout: self.config.request_timeout,
        };
        self.send(reqwest::Method::GET, url, Body::Empty, call)
            .await
    }

    /// GETs `url` without a token (the OpenAPI document), as [`post`](Self::post) does.
    pub(crate) async fn get_public(&self, url: Url, what: &str) -> Result<Answer, BusError> {
        let call = Call {
            scope: None,
            researcher: None,
            what,
            timeout: self.config.request_timeout,
        };
        self.send(reqwest::Method::GET, url, Body::Empty, call)
            .await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Body,
        call: Call<'_>,
    ) -> Result<Answer, BusError> {
        let Call {
            scope,
            researcher,
            what,
            timeout,
        } = call;
        let attempts = self.config.attempts.max(1);
        let mut backoff = self.config.first_backoff;
        let mut retried = false;
        let mut last: Option<String> = None;
        let body = match body {
            Body::Empty => None,
            Body::Lines(bytes) => Some(bytes),
        };
        for attempt in 1..=attempts {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .timeout(timeout);
            if scope.is_some() {
                request = request.header(AUTHORIZATION, self.token.header()?);
            }
            if let Some(name) = researcher {
                request = request.header(RESEARCHER_HEADER, name);
            }
            match &body {
                Some(bytes) => {
                    request = request
                        .header(CONTENT_TYPE, "application/x-ndjson")
                        .body(bytes.clone());
                }
                // A POST says its empty body's length (some proxies refuse one without).
                None if method == reqwest::Method::POST => request = request.body(Vec::new()),
                None => {}
            }
            let sent_at = Instant::now();
            let mut wait = backoff;
            match self.try_once(request).await {
                Ok((status, headers, bytes)) => {
                    // Not 500: a failure inside the server may not pass; the caller decides.
                    let overloaded = matches!(
                        status,
                        StatusCode::TOO_MANY_REQUESTS
                            | StatusCode::BAD_GATEWAY
                            | StatusCode::SERVICE_UNAVAILABLE
                            | StatusCode::GATEWAY_TIMEOUT
                    );
                    if !overloaded {
                        let answer = Answer {
                            status,
                            server_date: headers
                                .get(DATE)
                                .and_then(|d| d.to_str().ok())
                                .and_then(|d| DateTime::parse_from_rfc2822(d).ok())
                                .map(|d| d.with_timezone(&Utc)),
                            body: bytes,
                            sent_at,
                            retried,
                        };
                        return match (status, scope) {
                            (StatusCode::UNAUTHORIZED, Some(scope)) => {
                                Err(self.refused(scope, 401, what, &answer))
                            }
                            (StatusCode::FORBIDDEN, Some(scope)) => {
                                Err(self.refused(scope, 403, what, &answer))
                            }
                            _ => Ok(answer),
                        };
                    }
                    if let Some(after) = headers
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                    {
                        wait = Duration::from_secs(after).min(self.config.max_backoff);
                    }
                    last = Some(format!(
                        "HTTP {}: {}",
                        status.as_u16(),
                        reason_of(status, &bytes)
                    ));
                    // An overloaded server may have done the work before it answered.
                    retried = true;
                }
                Err(e) => {
                    // A certificate this client does not trust does not pass: said at once,
                    // named, and not tried again.
                    if let Some(problem) = certificate_problem(&e) {
                        return Err(self.untrusted(what, &problem));
                    }
                    // A request that was written may have been acted on; one that never
                    // connected was not.
                    retried |= !e.is_connect();
                    last = Some(describe(&e));
                }
            }
            if attempt < attempts {
                tracing::debug!(server = %self.shown, attempt, error = ?last, retry_in = ?wait, "{what}: trying again");
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(self.config.max_backoff);
            }
        }
        Err(BusError::Unavailable {
            message: format!(
                "{what}: the API server {} did not answer after {attempts} tries: {}",
                self.shown,
                last.unwrap_or_default()
            ),
            source: None,
        })
    }

    async fn try_once(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Vec<u8>), reqwest::Error> {
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        Ok((status, headers, bytes.to_vec()))
    }

    /// The error of a server certificate this client does not trust: final (no retry), and
    /// naming the problem and what to do.
    fn untrusted(&self, what: &str, problem: &str) -> BusError {
        BusError::Rejected {
            message: format!(
                "{what}: the API server {}'s TLS certificate is not accepted: {problem}; give the \
                 certificate authority that signed it with --ca-cert FILE (ARCHIVIST_CA_CERT), or \
                 have the server use a certificate this machine trusts",
                self.shown
            ),
            source: None,
        }
    }

    /// The error of a refused token: which scope the request needs, and what to do.
    fn refused(&self, scope: Scope, status: u16, what: &str, answer: &Answer) -> BusError {
        let reason = answer.reason();
        let canonical = answer.status.canonical_reason().unwrap_or_default();
        // The API's own reasons say what this message says (a token, its scope): said once.
        let said = if reason.is_empty() || reason.contains("token") || reason == canonical {
            String::new()
        } else {
            format!(" ({reason})")
        };
        let message = if status == 401 {
            format!(
                "{what}: the API server {} refused the token (HTTP 401: none, unknown or \
                 revoked){said}; this needs a valid token of scope {scope} (ARCHIVIST_TOKEN, \
                 --token; `archivist token create --scope {scope}` on the server makes one)",
                self.shown
            )
        } else {
            format!(
                "{what}: the API server {} refused the token (HTTP 403: another scope){said}; \
                 this needs a token of scope {scope} (`archivist token create --scope {scope}` \
                 on the server makes one)",
                self.shown
            )
        };
        BusError::Unauthorized {
            scope: scope.to_string(),
            message,
        }
    }
}

/// What is wrong with the server's certificate when `e` is a TLS handshake that failed on
/// it (an unknown issuer, a CA certificate used as the server's own, another host's name,
/// expired…): the problem in words, or `None` for any other error. The connector wraps
/// rustls's error in boxes and I/O errors whose `source` skips it, so the chain is read as
/// rustls words it: `invalid peer certificate: …`.
fn certificate_problem(e: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(rustls::Error::InvalidCertificate(c)) = s.downcast_ref::<rustls::Error>() {
            return Some(certificate_words(&format!("{c:?}")));
        }
        let text = s.to_string();
        if let Some((_, name)) = text.split_once("invalid peer certificate: ") {
            return Some(certificate_words(name));
        }
        source = s.source();
    }
    None
}

/// A certificate problem in words, with rustls's (or webpki's) name for it, from that name as
/// rustls writes it (`UnknownIssuer`, `Other(OtherError(CaUsedAsEndEntity))`).
fn certificate_words(name: &str) -> String {
    const KNOWN: [(&str, &str); 9] = [
        (
            "CaUsedAsEndEntity",
            "it is a certificate authority's own certificate used as the server's \
             (CaUsedAsEndEntity): serve a server certificate that authority signed",
        ),
        (
            "UnknownIssuer",
            "signed by an authority this machine does not trust (UnknownIssuer)",
        ),
        (
            "NotValidForName",
            "it is not for this host name: its subject alternative names do not include it \
             (NotValidForName)",
        ),
        ("NotValidYet", "it is not valid yet (NotValidYet)"),
        ("Expired", "it has expired (Expired)"),
        ("Revoked", "it has been revoked (Revoked)"),
        (
            "BadSignature",
            "its signature does not verify (BadSignature)",
        ),
        (
            "InvalidPurpose",
            "it is not for a TLS server (InvalidPurpose)",
        ),
        ("BadEncoding", "it cannot be read (BadEncoding)"),
    ];
    KNOWN
        .iter()
        .find(|(key, _)| name.contains(key))
        .map_or_else(
            || format!("rustls says {}", name.trim()),
            |(_, words)| words.to_string(),
        )
}

/// A transport error in words, without the URL (the caller names the server once).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "the connection failed"
    };
    let mut text = kind.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The certificate authorities in the PEM file `file` (`--ca-cert`), trusted beside the
/// system's; a file that cannot be read or holds no certificate is [`BusError::Rejected`]
/// naming it.
fn ca_certificates(file: &std::path::Path) -> Result<Vec<reqwest::Certificate>, BusError> {
    let shown = file.display();
    let bad = |why: String| BusError::Rejected {
        message: format!("--ca-cert (ARCHIVIST_CA_CERT) {shown}: {why}"),
        source: None,
    };
    let pem = std::fs::read(file).map_err(|e| bad(format!("cannot be read ({e})")))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| bad(format!("is not a PEM file of certificates ({e})")))?;
    if certificates.is_empty() {
        return Err(bad(
            "holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certificates)
}

/// The API's root below `server`: `…/api/v1/`, appended unless the address ends with it
/// already (a server behind a reverse proxy keeps its own path prefix).
fn api_root(server: &str) -> Result<Url, String> {
    let mut url = Url::parse(server).map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("expected an http:// or https:// URL of `archivist serve --api`".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("expected the server's address without a query or fragment".into());
    }
    let path = url.path().trim_end_matches('/').to_string();
    let root = if path.ends_with("/api/v1") {
        format!("{path}/")
    } else {
        format!("{path}/api/v1/")
    };
    url.set_path(&root);
    Ok(url)
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

impl ApiToken {
    /// The `Authorization` header's value, marked sensitive (left out of reqwest's Debug).
    fn header(&self) -> Result<HeaderValue, BusError> {
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", self.secret())).map_err(|_| {
                BusError::Rejected {
                    message: "the API token holds characters no HTTP header may carry".into(),
                    source: None,
                }
            })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_api_root_is_found_below_any_prefix() {
        let root = |s| api_root(s).map(|u| u.to_string());
        assert_eq!(
            root("https://a.example").unwrap(),
            "https://a.example/api/v1/"
        );
        assert_eq!(
            root("https://a.example/").unwrap(),
            "https://a.example/api/v1/"
        );
        assert_eq!(
            root("https://a.example/archivist/").unwrap(),
            "https://a.example/archivist/api/v1/"
        );
        assert_eq!(
            root("http://127.0.0.1:8080/api/v1").unwrap(),
            "http://127.0.0.1:8080/api/v1/"
        );
        assert!(root("ftp://a.example").is_err());
        assert!(root("a.example").is_err());
        assert!(root("https://a.example/?x=1").is_err());
    }

    #[test]
    fn reasons_come_from_json_or_text() {
        let ok = StatusCode::CONFLICT;
        assert_eq!(
            reason_of(ok, br#"{"error":"no such receipt"}"#),
            "no such receipt"
        );
        assert_eq!(reason_of(ok, b"  plain words \n"), "plain words");
        assert!(reason_of(
            ok,
            format!(r#"{{"error":"{}"}}"#, "y".repeat(1000)).as_bytes()
        )
        .ends_with('…'));
    }

    #[test]
    fn certificate_problems_are_named() {
        assert!(certificate_words("UnknownIssuer").contains("(UnknownIssuer)"));
        assert!(certificate_words("Other(OtherError(CaUsedAsEndEntity))")
            .contains("(CaUsedAsEndEntity)"));
        assert_eq!(certificate_words("Mystery"), "rustls says Mystery");
    }

    #[test]
    fn a_page_is_summarised_as_its_status_never_pasted() {
        let page = b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n\
                     <body><h1>Not Found</h1><p>The requested URL was not found.</p></body></html>";
        assert_eq!(reason_of(StatusCode::NOT_FOUND, page), "Not Found");
        assert_eq!(
            reason_of(StatusCode::BAD_GATEWAY, &[b'x'; 1000]),
            "Bad Gateway"
        );
        assert_eq!(reason_of(StatusCode::BAD_GATEWAY, b""), "Bad Gateway");
    }
}
