//! The HTTP layer of the API adapter: one request to the server with the bearer token,
//! connection errors and overloaded answers retried with a bounded backoff, and the answers
//! every endpoint shares (401, 403) turned into [`BusError`]s. What an endpoint's own answers
//! mean (200, 204, 409, 413, 422) is for its caller.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{
    HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, DATE, RETRY_AFTER,
};
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
pub(crate) struct Call<'a> {
    /// The token's scope the request needs; `None`: sent without the token.
    pub(crate) scope: Option<Scope>,
    pub(crate) researcher: Option<&'a str>,
    /// The request in words, for errors.
    pub(crate) what: &'a str,
    pub(crate) timeout: Duration,
    /// Headers besides the token's (`Range`).
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The longest body read of an answer; a longer one is [`BusError::Rejected`].
    /// `None`: any length.
    pub(crate) max_answer: Option<usize>,
}

impl<'a> Call<'a> {
    /// A request of `scope` (`what`: in words, for errors) with the token, waiting at most
    /// `timeout` for its answer.
    pub(crate) fn new(scope: Scope, what: &'a str, timeout: Duration) -> Self {
        Call {
            scope: Some(scope),
            researcher: None,
            what,
            timeout,
            headers: Vec::new(),
            max_answer: None,
        }
    }
}

/// The longest body of an answer read to say why a request was refused or tried again.
const MAX_REFUSAL: usize = 64 * 1024;

/// What one try of a request gave.
enum Got {
    /// The answer, its body read whole.
    Whole(StatusCode, reqwest::header::HeaderMap, Vec<u8>),
    /// The answer with its body still to read ([`Client::open`]).
    Open(reqwest::Response),
}

/// Why one try of a request gave no answer.
enum TryError {
    /// The connection failed or timed out.
    Transport(reqwest::Error),
    /// The answer's body is longer than the request allows.
    TooLong(usize),
    /// The body to send cannot be read.
    Local(String),
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
    /// The answer's headers.
    pub(crate) headers: reqwest::header::HeaderMap,
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
    /// One JSON value.
    Json(Vec<u8>),
    /// Bytes (`application/octet-stream`).
    Octets(Vec<u8>),
    /// The file at this path, read as it is sent (`application/octet-stream`), opened again
    /// at each try.
    File(std::path::PathBuf),
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
            researcher,
            ..Call::new(scope, what, timeout)
        };
        self.send(reqwest::Method::POST, url, body, call).await
    }

    /// GETs `url` with the token, for a request of `scope`, as [`post`](Self::post) does.
    pub(crate) async fn get(&self, url: Url, scope: Scope, what: &str) -> Result<Answer, BusError> {
        let call = Call::new(scope, what, self.config.request_timeout);
        self.send(reqwest::Method::GET, url, Body::Empty, call)
            .await
    }

    /// GETs `url` without a token (the OpenAPI document), as [`post`](Self::post) does.
    pub(crate) async fn get_public(&self, url: Url, what: &str) -> Result<Answer, BusError> {
        let call = Call {
            scope: None,
            ..Call::new(Scope::Reader, what, self.config.request_timeout)
        };
        self.send(reqwest::Method::GET, url, Body::Empty, call)
            .await
    }

    /// Sends `method` to `url` with `body`, as [`post`](Self::post) does, and reads its
    /// answer whole (at most `call.max_answer` bytes).
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Body,
        call: Call<'_>,
    ) -> Result<Answer, BusError> {
        match self.exchange(method, url, body, call, false).await? {
            Done::Whole(answer) => Ok(answer),
            // Not asked for.
            Done::Open(response) => Err(BusError::Rejected {
                message: format!(
                    "an answer of HTTP {} left unread",
                    response.status().as_u16()
                ),
                source: None,
            }),
        }
    }

    /// Sends `method` to `url` as [`send`](Self::send) does; a successful answer comes with
    /// its body still to read (a long one, read as it comes), any other read whole (its first
    /// 64 KiB). The tries end once a successful answer starts: a body cut short is the
    /// caller's to try again.
    pub(crate) async fn open(
        &self,
        method: reqwest::Method,
        url: Url,
        call: Call<'_>,
    ) -> Result<Done, BusError> {
        self.exchange(method, url, Body::Empty, call, true).await
    }

    async fn exchange(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Body,
        call: Call<'_>,
        open: bool,
    ) -> Result<Done, BusError> {
        let Call {
            scope,
            researcher,
            what,
            timeout,
            headers: extra,
            max_answer,
        } = call;
        let attempts = self.config.attempts.max(1);
        let mut backoff = self.config.first_backoff;
        let mut retried = false;
        let mut last: Option<String> = None;
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
            for (name, value) in &extra {
                request = request.header(name.clone(), value.clone());
            }
            request = match &body {
                Body::Lines(bytes) => request
                    .header(CONTENT_TYPE, "application/x-ndjson")
                    .body(bytes.clone()),
                Body::Json(bytes) => request
                    .header(CONTENT_TYPE, "application/json")
                    .body(bytes.clone()),
                Body::Octets(bytes) => request
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(bytes.clone()),
                Body::File(path) => {
                    let (file, len) = match open_file(path).await {
                        Ok(opened) => opened,
                        Err(why) => {
                            return Err(BusError::Rejected {
                                message: format!("{what}: {why}"),
                                source: None,
                            })
                        }
                    };
                    request
                        .header(CONTENT_TYPE, "application/octet-stream")
                        .header(CONTENT_LENGTH, len)
                        .body(reqwest::Body::wrap(FileBody::new(file, len)))
                }
                // A POST or PUT says its empty body's length (some proxies refuse one without).
                Body::Empty
                    if method == reqwest::Method::POST || method == reqwest::Method::PUT =>
                {
                    request.body(Vec::new())
                }
                Body::Empty => request,
            };
            let sent_at = Instant::now();
            let mut wait = backoff;
            let limit = if open { Some(MAX_REFUSAL) } else { max_answer };
            match self.try_once(request, open, limit).await {
                Ok(Got::Open(response)) => return Ok(Done::Open(response)),
                Ok(Got::Whole(status, headers, bytes)) => {
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
                            headers,
                        };
                        return match (status, scope) {
                            (StatusCode::UNAUTHORIZED, Some(scope)) => {
                                Err(self.refused(scope, 401, what, &answer))
                            }
                            (StatusCode::FORBIDDEN, Some(scope)) => {
                                Err(self.refused(scope, 403, what, &answer))
                            }
                            _ => Ok(Done::Whole(answer)),
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
                Err(TryError::TooLong(most)) => {
                    return Err(BusError::Rejected {
                        message: format!(
                            "{what}: the API server {}'s answer is longer than the {most} bytes \
                             it can be",
                            self.shown
                        ),
                        source: None,
                    })
                }
                Err(TryError::Local(why)) => {
                    return Err(BusError::Rejected {
                        message: format!("{what}: {why}"),
                        source: None,
                    })
                }
                Err(TryError::Transport(e)) => {
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

    /// One try: the answer, its body read whole (at most `limit` bytes) unless `open` and
    /// the answer is one its caller reads (not overloaded, not a refused token).
    async fn try_once(
        &self,
        request: reqwest::RequestBuilder,
        open: bool,
        limit: Option<usize>,
    ) -> Result<Got, TryError> {
        let mut response = request.send().await.map_err(|e| {
            // A file body that could not be read is said as such.
            match local_cause(&e) {
                Some(why) => TryError::Local(why),
                None => TryError::Transport(e),
            }
        })?;
        let status = response.status();
        let passes_through = !matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::BAD_GATEWAY
                | StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::GATEWAY_TIMEOUT
                | StatusCode::UNAUTHORIZED
                | StatusCode::FORBIDDEN
        );
        if open && passes_through && status.is_success() {
            return Ok(Got::Open(response));
        }
        let headers = response.headers().clone();
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(TryError::Transport)? {
            if limit.is_some_and(|most| bytes.len() + chunk.len() > most) {
                if !status.is_success() {
                    // A refusal's words: the first of them are enough.
                    break;
                }
                return Err(TryError::TooLong(limit.unwrap_or_default()));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Got::Whole(status, headers, bytes))
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

/// What a request gave its caller.
pub(crate) enum Done {
    /// The answer, read whole.
    Whole(Answer),
    /// A successful answer, its body still to read ([`Client::open`]).
    Open(reqwest::Response),
}

/// Opens the file at `path` to send it: the file and its length, or why it cannot be read.
async fn open_file(path: &std::path::Path) -> Result<(tokio::fs::File, u64), String> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .len();
    Ok((file, len))
}

/// Why sending a request failed on this side (its file could not be read), if it did.
fn local_cause(e: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<FileReadError>() {
            return Some(io.0.clone());
        }
        source = s.source();
    }
    None
}

/// A file that could not be read while it was sent.
#[derive(Debug)]
struct FileReadError(String);

impl fmt::Display for FileReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileReadError {}

/// The most bytes of a file one frame of a request's body holds.
const FILE_FRAME: usize = 64 * 1024;

/// A file as a request's body, read as it is sent: exactly the length it had when it was
/// opened (a file that got shorter is an error, never a shorter body).
struct FileBody {
    file: tokio::fs::File,
    left: u64,
    buf: Box<[u8]>,
}

impl FileBody {
    fn new(file: tokio::fs::File, len: u64) -> Self {
        FileBody {
            file,
            left: len,
            buf: vec![0u8; FILE_FRAME].into_boxed_slice(),
        }
    }
}

impl http_body::Body for FileBody {
    type Data = bytes::Bytes;
    type Error = FileReadError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.left)
            .unwrap_or(FILE_FRAME)
            .min(FILE_FRAME);
        let mut read = tokio::io::ReadBuf::new(&mut this.buf[..want]);
        match tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut this.file), cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(FileReadError(format!(
                "the file being sent could not be read: {e}"
            ))))),
            Poll::Ready(Ok(())) => {
                let filled = read.filled();
                if filled.is_empty() {
                    return Poll::Ready(Some(Err(FileReadError(
                        "the file being sent got shorter while it was sent".into(),
                    ))));
                }
                this.left -= filled.len() as u64;
                Poll::Ready(Some(Ok(http_body::Frame::data(
                    bytes::Bytes::copy_from_slice(filled),
                ))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.left)
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
