//! One fetch of someone else's URL, with one set of rules, for everything archivist fetches
//! over HTTP: the curators' feeds, the researchers' media (and an episode print's conditional
//! checks and byte ranges), and `archivist analyse` on URLs.
//!
//! The rules, each in one place here:
//!
//! - **Addresses** ([`crate::address_policy`]): a URL the user typed is fetched *as given*,
//!   whatever it resolves to; what others wrote (a feed's enclosures, a redirect's target)
//!   connects only to public addresses, unless the policy allows private ones. A URL fetched
//!   as given that answered from a non-public address (a show on the user's own network)
//!   has its redirects followed as given too; one that answered from a public address has
//!   them checked.
//! - **Redirects** are followed here, not by reqwest, at most [`FetchConfig::max_redirects`],
//!   each hop checked, only to http(s); the answer says where it came from and whether every
//!   hop was permanent (a feed's remembered address moves with a 301 or 308).
//! - **Timeouts**: one to connect and one between reads of the body; a whole fetch's deadline
//!   (or a minimum rate) is the caller's, which knows what it waits for.
//! - **Sizes**: an answer whose `Content-Length` is over [`FetchConfig::max_bytes`] is not
//!   read; a body without one is cut off there as it comes ([`FetchError::TooLarge`]).
//! - **Truncation**: a body that ends (or breaks off) before the length its `Content-Length`
//!   announced is [`FetchError::Truncated`], naming both sizes; never a short file taken for
//!   the whole (a cut MP3 decodes, as a shorter episode).
//! - **TLS**: rustls, the system's roots, and any [`FetchConfig::extra_roots`].
//! - **User agent**: [`user_agent`], on every request.
//! - **Retry classes**: [`Status::of`] sorts an answer's status (gone, busy and worth another
//!   try after `Retry-After`, not modified, refused); [`FetchError::is_retryable`] sorts the
//!   failures. Each caller decides how often to try again.

use std::time::{Duration, SystemTime};

use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::StatusCode;
use url::Url;

use crate::address_policy::{self, AddressPolicy, Redirects, Refused};

/// The User-Agent of every fetch: who is asking, and where to read about it.
pub fn user_agent() -> String {
    format!(
        "archivist/{} (+{})",
        env!("CARGO_PKG_VERSION"),
        env!("CARGO_PKG_REPOSITORY")
    )
}

/// The settings of a [`Fetcher`].
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// The longest wait to connect.
    pub connect_timeout: Duration,
    /// The longest wait for the next bytes of an answer (its head or its body); `None`: no
    /// limit but the caller's.
    pub read_timeout: Option<Duration>,
    /// The largest body read, in bytes.
    pub max_bytes: u64,
    /// Redirects followed for one request, at most.
    pub max_redirects: usize,
    /// Whether to ask for gzip and decompress it (feeds); media is fetched as served, so that
    /// its bytes, its length and its ranges are the server's.
    pub gzip: bool,
    /// Certificate authorities trusted beside the system's.
    pub extra_roots: Vec<reqwest::Certificate>,
}

impl FetchConfig {
    /// Media's settings: `connect_timeout`, `read_timeout`, bodies up to `max_bytes`, 10
    /// redirects (reqwest's default), no gzip, the system's roots.
    pub fn media(connect_timeout: Duration, read_timeout: Duration, max_bytes: u64) -> Self {
        FetchConfig {
            connect_timeout,
            read_timeout: Some(read_timeout),
            max_bytes,
            max_redirects: 10,
            gzip: false,
            extra_roots: Vec::new(),
        }
    }
}

/// Why a fetch failed. The text says it in words a person reads in a report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The address (of the URL, or of a redirect's target, `redirected_to`) is not allowed.
    #[error("{}{refused}", .redirected_to.as_ref().map(|u| format!("redirected to {u}: ")).unwrap_or_default())]
    Refused {
        /// The refusal, naming the host, the address and the flag that allows it.
        refused: Refused,
        /// The redirect's target (credentials masked), if it was one.
        redirected_to: Option<String>,
    },
    /// More redirects than allowed.
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    /// A redirect without a usable `Location`, or to something other than http(s).
    #[error("a redirect without a usable Location ({0})")]
    BadRedirect(String),
    /// Nothing arrived for the read timeout.
    #[error("the server sent nothing for {}", humantime::format_duration(*.0))]
    ReadTimeout(Duration),
    /// Connecting or reading failed (the causes, each once).
    #[error("{0}")]
    Network(String),
    /// The body is larger than the limit.
    #[error("over {0} bytes")]
    TooLarge(u64),
    /// The body ended before the length announced.
    #[error("cut short: {received} of the {expected} bytes announced arrived")]
    Truncated {
        /// The length announced (`Content-Length`).
        expected: u64,
        /// The bytes that arrived.
        received: u64,
    },
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

impl FetchError {
    /// Whether another try may succeed: a network failure, a timeout, a body cut short; not
    /// a refused address, a bad redirect or a body over the limit.
    pub fn is_retryable(&self) -> bool {
        match self {
            FetchError::ReadTimeout(_) | FetchError::Network(_) | FetchError::Truncated { .. } => {
                true
            }
            FetchError::Refused { .. }
            | FetchError::TooManyRedirects(_)
            | FetchError::BadRedirect(_)
            | FetchError::TooLarge(_)
            | FetchError::Client(_) => false,
        }
    }
}

/// What an answer's status means for a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 2xx: the body is the answer.
    Success,
    /// 304: unchanged since the validators sent.
    NotModified,
    /// 404, 410: not there (a person or the curator must change something).
    Gone,
    /// 429, 5xx: busy or broken for now; worth another try, after `Retry-After` if said.
    Busy,
    /// Any other status (401, 403, …): refused as asked; a person can fix it.
    Refused,
}

impl Status {
    /// The class of `status` (redirects are followed before an answer is classed).
    pub fn of(status: StatusCode) -> Status {
        if status.is_success() {
            Status::Success
        } else if status == StatusCode::NOT_MODIFIED {
            Status::NotModified
        } else if status == StatusCode::NOT_FOUND || status == StatusCode::GONE {
            Status::Gone
        } else if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Status::Busy
        } else {
            Status::Refused
        }
    }
}

/// `Retry-After` in `headers`, as a wait from now (seconds, or an HTTP date; a date past is
/// no wait), at most `cap`.
pub fn retry_after(headers: &HeaderMap, cap: Duration) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    };
    Some(wait.min(cap))
}

/// The client of one component (a researcher, a curator run, one `analyse`), shared by its
/// fetches: cheap to clone.
#[derive(Debug, Clone)]
pub struct Fetcher {
    /// For URLs fetched as given: any address.
    given: address_policy::Client,
    /// For the rest: the addresses the policy allows.
    checked: address_policy::Client,
    config: FetchConfig,
}

/// An answer, after its redirects, with its body not yet read.
#[derive(Debug)]
pub struct Answer {
    response: reqwest::Response,
    /// Where the answer came from, after redirects.
    pub url: Url,
    /// Where the address asked moved for good (every hop a 301 or 308), if it did.
    pub moved_to: Option<Url>,
    /// Whether what the answer leads to is fetched as given: it was asked as given and
    /// answered from a non-public address.
    pub as_given: bool,
    max_bytes: u64,
    read_timeout: Option<Duration>,
    /// `Content-Length`, read once: reqwest's `content_length` is what is left to read.
    announced: Option<u64>,
    received: u64,
}

impl Fetcher {
    /// A fetcher keeping to `policy` (for what is not fetched as given) with `config`.
    pub fn new(policy: &AddressPolicy, config: FetchConfig) -> Result<Fetcher, FetchError> {
        let client = |policy: &AddressPolicy| {
            let mut builder = policy
                .client_builder()
                .user_agent(user_agent())
                .gzip(config.gzip)
                .connect_timeout(config.connect_timeout);
            if let Some(read) = config.read_timeout {
                builder = builder.read_timeout(read);
            }
            for root in &config.extra_roots {
                builder = builder.add_root_certificate(root.clone());
            }
            address_policy::Client::build(policy, builder, Redirects::Shown)
                .map_err(|e| FetchError::Client(describe(&e)))
        };
        Ok(Fetcher {
            given: client(&AddressPolicy::any())?,
            checked: client(policy)?,
            config,
        })
    }

    /// The policy what is not fetched as given keeps to.
    pub fn policy(&self) -> &AddressPolicy {
        self.checked.policy()
    }

    /// The settings.
    pub fn config(&self) -> &FetchConfig {
        &self.config
    }

    /// A GET of `url` with `headers`, its redirects followed (each hop checked, see the
    /// module's documentation); `as_given`: `url` is the user's, fetched whatever it resolves
    /// to. The answer's status is the caller's to class ([`Status::of`]).
    pub async fn get(
        &self,
        url: &Url,
        headers: HeaderMap,
        mut as_given: bool,
    ) -> Result<Answer, FetchError> {
        let mut url = url.clone();
        let mut moved_to: Option<Url> = None;
        let mut all_permanent = true;
        for hop in 0..=self.config.max_redirects {
            let client = if as_given { &self.given } else { &self.checked };
            let refused = |r: &Refused| FetchError::Refused {
                refused: r.clone(),
                redirected_to: (hop > 0).then(|| shown(&url)),
            };
            let response = client
                .get(url.clone())
                .map_err(|r| refused(&r))?
                .headers(headers.clone())
                .send()
                .await
                .map_err(|e| match address_policy::refused_in(&e) {
                    Some(r) => refused(r),
                    None => self.failed(&e),
                })?;
            as_given &= response
                .remote_addr()
                .is_some_and(|a| self.checked.policy().check("", a.ip()).is_err());
            let status = response.status();
            if !status.is_redirection() || status == StatusCode::NOT_MODIFIED {
                let announced = response
                    .headers()
                    .get(header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse().ok());
                return Ok(Answer {
                    announced,
                    response,
                    url,
                    moved_to,
                    as_given,
                    max_bytes: self.config.max_bytes,
                    read_timeout: self.config.read_timeout,
                    received: 0,
                });
            }
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| FetchError::BadRedirect(status.to_string()))?;
            let next = url.join(location).map_err(|e| {
                FetchError::BadRedirect(format!("{status}, Location {location:?}: {e}"))
            })?;
            if !matches!(next.scheme(), "http" | "https") {
                return Err(FetchError::BadRedirect(format!(
                    "{status} to {}, not http(s)",
                    shown(&next)
                )));
            }
            all_permanent &= matches!(
                status,
                StatusCode::MOVED_PERMANENTLY | StatusCode::PERMANENT_REDIRECT
            );
            if all_permanent {
                moved_to = Some(next.clone());
            }
            url = next;
        }
        Err(FetchError::TooManyRedirects(self.config.max_redirects))
    }

    fn failed(&self, e: &reqwest::Error) -> FetchError {
        failed(e, self.config.read_timeout)
    }
}

fn failed(e: &reqwest::Error, read_timeout: Option<Duration>) -> FetchError {
    match read_timeout {
        Some(limit) if e.is_timeout() => FetchError::ReadTimeout(limit),
        _ => FetchError::Network(describe(e)),
    }
}

impl Answer {
    /// The status.
    pub fn status(&self) -> StatusCode {
        self.response.status()
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        self.response.headers()
    }

    /// A header as text, trimmed; `None` if absent, empty or not text.
    pub fn header(&self, name: header::HeaderName) -> Option<String> {
        self.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// The body's length as announced (`Content-Length`; none for a body decompressed here).
    pub fn announced_len(&self) -> Option<u64> {
        self.announced
    }

    /// Refuses a body announced over the limit, before any of it is read.
    pub fn check_announced(&self) -> Result<(), FetchError> {
        match self.announced_len() {
            Some(n) if n > self.max_bytes => Err(FetchError::TooLarge(self.max_bytes)),
            _ => Ok(()),
        }
    }

    /// The bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The body's next bytes, `None` at its end: over the limit is [`FetchError::TooLarge`],
    /// an end (or a break) before the announced length [`FetchError::Truncated`].
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, FetchError> {
        let expected = self.announced_len();
        let short = |received: u64| {
            expected
                .filter(|&n| received < n)
                .map(|expected| FetchError::Truncated { expected, received })
        };
        match self.response.chunk().await {
            Ok(Some(bytes)) => {
                self.received += bytes.len() as u64;
                if self.received > self.max_bytes {
                    return Err(FetchError::TooLarge(self.max_bytes));
                }
                Ok(Some(bytes))
            }
            Ok(None) => match short(self.received) {
                Some(cut) => Err(cut),
                None => Ok(None),
            },
            Err(e) if e.is_timeout() => Err(failed(&e, self.read_timeout)),
            // hyper notices a connection closed before the announced length: say the sizes.
            Err(e) => Err(short(self.received).unwrap_or_else(|| failed(&e, None))),
        }
    }

    /// The whole body (within the limit, checked for truncation).
    pub async fn bytes(mut self) -> Result<Vec<u8>, FetchError> {
        self.check_announced()?;
        let mut out = Vec::new();
        while let Some(chunk) = self.chunk().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// `url` as messages show it: credentials masked.
fn shown(url: &Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    if !u.username().is_empty() {
        let _ = u.set_username("***");
    }
    u.to_string()
}

/// reqwest's error and its causes, each once ("error sending request" alone says nothing).
pub fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_decode() {
        "cannot decode the answer".to_string()
    } else if e.is_body() {
        "the answer broke off".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `headers` with `name: value`, if `value` is a valid header value.
pub fn with_header(mut headers: HeaderMap, name: header::HeaderName, value: &str) -> HeaderMap {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
    headers
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering every connection with `head` then `body`, then closing.
    async fn raw(head: String, body: Vec<u8>) -> Url {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            }
        });
        Url::parse(&format!("http://{addr}/a.mp3")).unwrap()
    }

    fn fetcher(max: u64) -> Fetcher {
        Fetcher::new(
            &AddressPolicy::any(),
            FetchConfig::media(Duration::from_secs(5), Duration::from_secs(5), max),
        )
        .unwrap()
    }

    /// A body that ends before its Content-Length is cut short, naming both sizes.
    #[tokio::test]
    async fn a_body_shorter_than_announced_is_truncated() {
        let url = raw(
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n".into(),
            vec![b'x'; 603],
        )
        .await;
        let got = fetcher(10_000)
            .get(&url, HeaderMap::new(), true)
            .await
            .unwrap()
            .bytes()
            .await;
        assert_eq!(
            got,
            Err(FetchError::Truncated {
                expected: 1000,
                received: 603
            })
        );
        let text = got.unwrap_err().to_string();
        assert!(text.contains("603") && text.contains("1000"), "{text}");
    }

    #[tokio::test]
    async fn whole_bodies_and_limits() {
        let url = raw(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n".into(),
            b"audio".to_vec(),
        )
        .await;
        let got = fetcher(100)
            .get(&url, HeaderMap::new(), true)
            .await
            .unwrap();
        assert_eq!(got.header(header::CONTENT_LENGTH).as_deref(), Some("5"));
        assert_eq!(got.bytes().await.unwrap(), b"audio");
        let small = fetcher(4).get(&url, HeaderMap::new(), true).await.unwrap();
        assert_eq!(small.bytes().await, Err(FetchError::TooLarge(4)));
        let unannounced = raw(
            "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".into(),
            vec![0u8; 50],
        )
        .await;
        let got = fetcher(10).get(&unannounced, HeaderMap::new(), true).await;
        assert_eq!(got.unwrap().bytes().await, Err(FetchError::TooLarge(10)));
    }

    #[test]
    fn statuses_and_retry_after() {
        assert_eq!(Status::of(StatusCode::OK), Status::Success);
        assert_eq!(Status::of(StatusCode::GONE), Status::Gone);
        assert_eq!(Status::of(StatusCode::SERVICE_UNAVAILABLE), Status::Busy);
        assert_eq!(Status::of(StatusCode::FORBIDDEN), Status::Refused);
        let mut h = HeaderMap::new();
        h.insert(header::RETRY_AFTER, "3".parse().unwrap());
        let cap = Duration::from_secs(120);
        assert_eq!(retry_after(&h, cap), Some(Duration::from_secs(3)));
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        h.insert(header::RETRY_AFTER, later.parse().unwrap());
        let wait = retry_after(&h, cap).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30));
        h.insert(header::RETRY_AFTER, "99999999".parse().unwrap());
        assert_eq!(retry_after(&h, cap), Some(cap));
        assert!(user_agent().starts_with("archivist/") && user_agent().contains("(+http"));
    }
}
