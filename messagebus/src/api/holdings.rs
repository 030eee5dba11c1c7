//! The server's media archive and print store, through its API, for a remote researcher:
//! [`ApiArchive`] (an [`archive::MediaArchive`] over `/api/v1/archive/…`) and
//! [`ApiPrintStore`] (a [`prints::PrintStore`] over `/api/v1/prints/…`), with a researcher's
//! token; [`ApiHoldings::offered`] says which of them the server has.
//!
//! What the API does not offer (listing, checking, choosing, removing) is
//! `Unavailable("… not offered through the API")`: an operator does those where the archive
//! is. The last check's report is the server's to apply: [`ApiArchive`]'s is `None`, and a
//! copy the server's last check found damaged is [`ArchiveError::Damaged`] when asked for.
//!
//! A copy is checked against its SHA-256 on this side before it is given, and when it is
//! read whole ([`MediaArchive::copy_to`]); a print crosses the network in its envelope both
//! ways, so that one damaged on the way is found.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use archive::{ArchiveError, CopyInfo, EpisodeVersions, Kept, MediaArchive, VerifyReport, Version};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use prints::{PrintInfo, PrintStore, StoreError};
use reqwest::header::{HeaderValue, CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use reqwest::{Method, StatusCode};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::client::{Answer, Body, Call, Client, Done};
use super::{ApiConfig, Scope};
use crate::BusError;

/// What is not offered through the API.
const NOT_OFFERED: &str = "not offered through the API";

/// The slowest a copy is taken to cross the network when its request's time is set (a
/// request for a copy of N bytes waits the configured request timeout and N / this).
const SLOWEST: u64 = 256 * 1024;

/// The longest answer with an episode's versions read.
const MAX_VERSIONS: usize = 4 << 20;

/// The longest print read (its envelope included).
const MAX_PRINT: usize = 1 << 30;

/// What a server keeps for its researchers (`GET /api/v1/archive`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Offer {
    /// Whether it has a media archive.
    pub media: bool,
    /// Whether it has a print store.
    pub prints: bool,
    /// The largest copy it takes, in bytes.
    #[serde(default)]
    pub max_media_bytes: u64,
    /// The largest print it takes, in bytes (its envelope included).
    #[serde(default)]
    pub max_print_bytes: u64,
}

/// What a remote researcher may ask of the server's holdings.
#[derive(Debug)]
pub struct ApiHoldings {
    client: Client,
}

impl ApiHoldings {
    /// The holdings of the API at `config.server` (its queue names are not used). Connects to
    /// nothing yet; a server address that is not an http(s) URL, or a `ca_cert` that cannot be
    /// read, is [`BusError::Rejected`].
    pub fn new(config: &ApiConfig) -> Result<ApiHoldings, BusError> {
        Ok(ApiHoldings {
            client: Client::new(config)?,
        })
    }

    /// `GET /api/v1/archive`: what the server keeps for its researchers. A server that does
    /// not know the request (an older one) offers nothing.
    pub async fn offered(&self) -> Result<Offer, BusError> {
        let what = "asking what the server's archive offers";
        let answer = self
            .client
            .get(self.client.url(&["archive"]), Scope::Researcher, what)
            .await?;
        match answer.status {
            StatusCode::OK => answer.json(what),
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => Ok(Offer {
                media: false,
                prints: false,
                max_media_bytes: 0,
                max_print_bytes: 0,
            }),
            status => Err(BusError::Rejected {
                message: format!(
                    "{what}: the API server {} answered HTTP {} ({})",
                    self.client.shown,
                    status.as_u16(),
                    answer.reason()
                ),
                source: None,
            }),
        }
    }
}

/// The server's media archive through its API (`/api/v1/archive/…`), with a researcher's
/// token. See the module's documentation.
#[derive(Debug)]
pub struct ApiArchive {
    client: Client,
}

impl ApiArchive {
    /// The media archive of the API at `config.server`. Connects to nothing yet; a server
    /// address that is not an http(s) URL, or a `ca_cert` that cannot be read, is
    /// [`BusError::Rejected`].
    pub fn new(config: &ApiConfig) -> Result<ApiArchive, BusError> {
        Ok(ApiArchive {
            client: Client::new(config)?,
        })
    }

    fn unavailable(&self, why: impl Into<String>) -> ArchiveError {
        ArchiveError::Unavailable {
            archive: self.describe(),
            why: why.into(),
        }
    }

    /// A failed request as the archive's error: a refused token is a configuration to
    /// change, anything else may pass.
    fn failed(&self, e: BusError) -> ArchiveError {
        match e {
            BusError::Unauthorized { message, .. } => ArchiveError::Config {
                archive: self.describe(),
                why: message,
            },
            other => self.unavailable(other.to_string()),
        }
    }

    /// An answer the request does not expect.
    fn unexpected(&self, what: &str, answer: &Answer) -> ArchiveError {
        self.unavailable(format!(
            "{what}: HTTP {} ({})",
            answer.status.as_u16(),
            answer.reason()
        ))
    }

    fn media_url(&self, sha256: &str) -> reqwest::Url {
        self.client.url(&["archive", "media", sha256])
    }

    /// How long a request carrying `size` bytes may take.
    fn timeout_for(&self, size: u64) -> Duration {
        self.client.request_timeout() + Duration::from_secs(size / SLOWEST)
    }

    async fn call(
        &self,
        method: Method,
        url: reqwest::Url,
        body: Body,
        call: Call<'_>,
    ) -> Result<Answer, ArchiveError> {
        self.client
            .send(method, url, body, call)
            .await
            .map_err(|e| self.failed(e))
    }
}

/// The SHA-256 of the file at `path` and its length.
async fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&path)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok((hex(&hasher.finalize()), total));
            }
            hasher.update(&buf[..n]);
            total += n as u64;
        }
    })
    .await
    .map_err(std::io::Error::other)?
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The length a `Content-Range: bytes …/SIZE` names.
fn range_size(answer: &Answer) -> Option<u64> {
    answer
        .headers
        .get(CONTENT_RANGE)?
        .to_str()
        .ok()?
        .rsplit_once('/')?
        .1
        .trim()
        .parse()
        .ok()
}

/// The range `bytes A-B/…` a `Content-Range` names, as `A..B+1`.
fn range_sent(answer: &Answer) -> Option<Range<u64>> {
    let value = answer.headers.get(CONTENT_RANGE)?.to_str().ok()?;
    let (span, _) = value.trim().strip_prefix("bytes ")?.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end): (u64, u64) = (start.trim().parse().ok()?, end.trim().parse().ok()?);
    Some(start..end.checked_add(1)?)
}

#[async_trait]
impl MediaArchive for ApiArchive {
    async fn keep(&self, sha256: &str, file: &Path) -> Result<Kept, ArchiveError> {
        let sha256 = archive::check_key(sha256)?;
        // Checked here first: a file that is not its name never crosses the network.
        let (found, len) = hash_file(file)
            .await
            .map_err(|e| self.unavailable(format!("cannot read {}: {e}", file.display())))?;
        if found != sha256 {
            return Err(ArchiveError::Mismatch {
                expected: sha256.to_string(),
                found,
            });
        }
        if self.size(sha256).await? == Some(len) {
            return Ok(Kept::Already);
        }
        let what = "giving the server's archive a copy";
        let call = Call::new(Scope::Researcher, what, self.timeout_for(len));
        let answer = self
            .call(
                Method::PUT,
                self.media_url(sha256),
                Body::File(file.to_path_buf()),
                Call {
                    max_answer: Some(64 * 1024),
                    ..call
                },
            )
            .await?;
        match answer.status {
            StatusCode::CREATED => Ok(Kept::New),
            StatusCode::OK => Ok(Kept::Already),
            StatusCode::UNPROCESSABLE_ENTITY => Err(self.unavailable(format!(
                "{what}: the server found other bytes than were sent ({})",
                answer.reason()
            ))),
            StatusCode::PAYLOAD_TOO_LARGE => Err(self.unavailable(format!(
                "{what}: the server keeps no copy this long ({len} bytes): {}",
                answer.reason()
            ))),
            _ => Err(self.unexpected(what, &answer)),
        }
    }

    async fn size(&self, sha256: &str) -> Result<Option<u64>, ArchiveError> {
        let sha256 = archive::check_key(sha256)?;
        let what = "asking the server's archive for a copy's length";
        let call = Call::new(Scope::Researcher, what, self.client.request_timeout());
        let answer = self
            .call(Method::HEAD, self.media_url(sha256), Body::Empty, call)
            .await?;
        match answer.status {
            StatusCode::OK => answer
                .headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok())
                .map(Some)
                .ok_or_else(|| self.unavailable(format!("{what}: no Content-Length"))),
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::CONFLICT => Err(ArchiveError::Damaged {
                sha256: sha256.to_string(),
                why: "the server's last check found it damaged".into(),
            }),
            _ => Err(self.unexpected(what, &answer)),
        }
    }

    async fn read(&self, sha256: &str, range: Range<u64>) -> Result<Vec<u8>, ArchiveError> {
        let sha256 = archive::check_key(sha256)?;
        let bad = |size: u64| ArchiveError::BadRange {
            sha256: sha256.to_string(),
            size,
            start: range.start,
            end: range.end,
        };
        if range.start > range.end || range.end - range.start > archive::MAX_READ {
            let size = self.size(sha256).await?.unwrap_or(0);
            return Err(bad(size));
        }
        if range.start == range.end {
            return match self.size(sha256).await? {
                None => Err(ArchiveError::NotFound(format!("copy {sha256}"))),
                Some(size) if range.end <= size => Ok(Vec::new()),
                Some(size) => Err(bad(size)),
            };
        }
        let len = range.end - range.start;
        let what = "reading a range of the server's archive";
        let header = HeaderValue::from_str(&format!("bytes={}-{}", range.start, range.end - 1))
            .map_err(|e| self.unavailable(e.to_string()))?;
        let call = Call {
            headers: vec![(RANGE, header)],
            max_answer: Some(usize::try_from(len).unwrap_or(usize::MAX)),
            ..Call::new(Scope::Researcher, what, self.timeout_for(len))
        };
        let answer = self
            .call(Method::GET, self.media_url(sha256), Body::Empty, call)
            .await?;
        match answer.status {
            StatusCode::PARTIAL_CONTENT => {
                // HTTP serves what there is of a range past the end: the archive does not.
                if let Some(size) = range_size(&answer).filter(|size| range.end > *size) {
                    return Err(bad(size));
                }
                if range_sent(&answer) != Some(range.clone()) || answer.body.len() as u64 != len {
                    return Err(self.unavailable(format!(
                        "{what}: the server sent {} bytes ({:?}) for {}..{}",
                        answer.body.len(),
                        answer.headers.get(CONTENT_RANGE),
                        range.start,
                        range.end
                    )));
                }
                Ok(answer.body)
            }
            // The whole copy, asked for whole.
            StatusCode::OK if range.start == 0 && answer.body.len() as u64 == len => {
                Ok(answer.body)
            }
            StatusCode::RANGE_NOT_SATISFIABLE => Err(bad(range_size(&answer).unwrap_or(0))),
            StatusCode::NOT_FOUND => Err(ArchiveError::NotFound(format!("copy {sha256}"))),
            StatusCode::CONFLICT => Err(ArchiveError::Damaged {
                sha256: sha256.to_string(),
                why: answer.reason(),
            }),
            _ => Err(self.unexpected(what, &answer)),
        }
    }

    async fn copy_to(&self, sha256: &str, dest: &Path) -> Result<u64, ArchiveError> {
        let sha256 = archive::check_key(sha256)?;
        let Some(size) = self.size(sha256).await? else {
            return Err(ArchiveError::NotFound(format!("copy {sha256}")));
        };
        let what = "copying a copy of the server's archive";
        let call = Call::new(Scope::Researcher, what, self.timeout_for(size));
        let response = match self
            .client
            .open(Method::GET, self.media_url(sha256), call)
            .await
            .map_err(|e| self.failed(e))?
        {
            Done::Open(response) => response,
            Done::Whole(answer) => {
                return Err(match answer.status {
                    StatusCode::NOT_FOUND => ArchiveError::NotFound(format!("copy {sha256}")),
                    StatusCode::CONFLICT => ArchiveError::Damaged {
                        sha256: sha256.to_string(),
                        why: answer.reason(),
                    },
                    _ => self.unexpected(what, &answer),
                })
            }
        };
        let written = self.write_checked(sha256, response, dest, size).await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(dest).await;
        }
        written
    }

    fn local_path(&self, _sha256: &str) -> Option<PathBuf> {
        None
    }

    async fn copies(&self) -> Result<Vec<CopyInfo>, ArchiveError> {
        Err(self.unavailable(format!("listing the copies: {NOT_OFFERED}")))
    }

    async fn verify(&self, _sha256: &str) -> Result<Option<String>, ArchiveError> {
        Err(self.unavailable(format!("checking a copy: {NOT_OFFERED}")))
    }

    async fn versions(&self, key: &str) -> Result<Option<EpisodeVersions>, ArchiveError> {
        let key = archive::check_key(key)?;
        let what = "reading an episode's versions from the server's archive";
        let call = Call {
            max_answer: Some(MAX_VERSIONS),
            ..Call::new(Scope::Researcher, what, self.client.request_timeout())
        };
        let answer = self
            .call(
                Method::GET,
                self.client.url(&["archive", "episodes", key]),
                Body::Empty,
                call,
            )
            .await?;
        match answer.status {
            StatusCode::OK => answer
                .json(what)
                .map(Some)
                .map_err(|e| self.unavailable(e.to_string())),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.unexpected(what, &answer)),
        }
    }

    async fn episodes(&self) -> Result<Vec<EpisodeVersions>, ArchiveError> {
        Err(self.unavailable(format!("listing the episodes: {NOT_OFFERED}")))
    }

    async fn record(
        &self,
        key: &str,
        title: &str,
        date_aired: DateTime<Utc>,
        version: Version,
    ) -> Result<EpisodeVersions, ArchiveError> {
        let key = archive::check_key(key)?;
        archive::check_key(&version.sha256)?;
        let what = "recording a version in the server's archive";
        #[derive(serde::Serialize)]
        struct Recording<'a> {
            title: &'a str,
            date_aired: DateTime<Utc>,
            version: &'a Version,
        }
        let body = serde_json::to_vec(&Recording {
            title,
            date_aired,
            version: &version,
        })
        .map_err(|e| self.unavailable(e.to_string()))?;
        let call = Call {
            max_answer: Some(MAX_VERSIONS),
            ..Call::new(Scope::Researcher, what, self.client.request_timeout())
        };
        let answer = self
            .call(
                Method::POST,
                self.client.url(&["archive", "episodes", key, "versions"]),
                Body::Json(body),
                call,
            )
            .await?;
        match answer.status {
            StatusCode::OK => answer
                .json(what)
                .map_err(|e| self.unavailable(e.to_string())),
            StatusCode::CONFLICT => Err(ArchiveError::Damaged {
                sha256: version.sha256.clone(),
                why: answer.reason(),
            }),
            StatusCode::UNPROCESSABLE_ENTITY => Err(self.unavailable(format!(
                "{what}: the server refused it: {}",
                answer.reason()
            ))),
            _ => Err(self.unexpected(what, &answer)),
        }
    }

    async fn choose(&self, _key: &str, _sha256: &str) -> Result<EpisodeVersions, ArchiveError> {
        Err(self.unavailable(format!("choosing a version: {NOT_OFFERED}")))
    }

    async fn put_report(&self, _report: &VerifyReport) -> Result<(), ArchiveError> {
        Err(self.unavailable(format!("keeping a check's report: {NOT_OFFERED}")))
    }

    /// `None`: the server applies its last check itself. A copy it found damaged is never
    /// sent: asked for, it is [`ArchiveError::Damaged`] (HTTP 409).
    async fn report(&self) -> Result<Option<VerifyReport>, ArchiveError> {
        Ok(None)
    }

    fn describe(&self) -> String {
        format!("the archive of {} (through its API)", self.client.shown)
    }
}

impl ApiArchive {
    /// Writes the body of `response` (the whole copy `sha256`, `size` bytes) to `dest`,
    /// hashing it on the way: its length, or what is wrong.
    async fn write_checked(
        &self,
        sha256: &str,
        mut response: reqwest::Response,
        dest: &Path,
        size: u64,
    ) -> Result<u64, ArchiveError> {
        let mut out = tokio::fs::File::create(dest)
            .await
            .map_err(|e| self.unavailable(format!("cannot write {}: {e}", dest.display())))?;
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| self.unavailable(format!("the copy {sha256} was cut short: {e}")))?;
            let Some(chunk) = chunk else { break };
            total += chunk.len() as u64;
            if total > size {
                return Err(
                    self.unavailable(format!("the server sent more than the copy's {size} bytes"))
                );
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| self.unavailable(format!("cannot write {}: {e}", dest.display())))?;
        }
        out.flush()
            .await
            .map_err(|e| self.unavailable(format!("cannot write {}: {e}", dest.display())))?;
        if total != size {
            return Err(self.unavailable(format!(
                "the copy {sha256} was cut short: {total} of {size} bytes"
            )));
        }
        let found = hex(&hasher.finalize());
        if found != sha256 {
            return Err(ArchiveError::Damaged {
                sha256: sha256.to_string(),
                why: format!("the bytes the server sent hash to {found}"),
            });
        }
        Ok(total)
    }
}

/// The server's print store through its API (`/api/v1/prints/…`), with a researcher's
/// token. See the module's documentation.
#[derive(Debug)]
pub struct ApiPrintStore {
    client: Client,
}

impl ApiPrintStore {
    /// The print store of the API at `config.server`. Connects to nothing yet; a server
    /// address that is not an http(s) URL, or a `ca_cert` that cannot be read, is
    /// [`BusError::Rejected`].
    pub fn new(config: &ApiConfig) -> Result<ApiPrintStore, BusError> {
        Ok(ApiPrintStore {
            client: Client::new(config)?,
        })
    }

    fn unavailable(&self, why: impl Into<String>) -> StoreError {
        StoreError::Unavailable {
            store: self.describe(),
            why: why.into(),
        }
    }

    fn failed(&self, e: BusError) -> StoreError {
        match e {
            BusError::Unauthorized { message, .. } => StoreError::Config {
                store: self.describe(),
                why: message,
            },
            other => self.unavailable(other.to_string()),
        }
    }
}

#[async_trait]
impl PrintStore for ApiPrintStore {
    async fn put(&self, key: &str, print: &[u8]) -> Result<(), StoreError> {
        let key = prints::check_key(key)?;
        let what = "giving the server's print store a print";
        let body = prints::envelope::wrap(print);
        let call = Call {
            max_answer: Some(64 * 1024),
            ..Call::new(
                Scope::Researcher,
                what,
                self.client.request_timeout() + Duration::from_secs(body.len() as u64 / SLOWEST),
            )
        };
        let answer = self
            .client
            .send(
                Method::PUT,
                self.client.url(&["prints", key]),
                Body::Octets(body),
                call,
            )
            .await
            .map_err(|e| self.failed(e))?;
        match answer.status {
            StatusCode::NO_CONTENT | StatusCode::OK | StatusCode::CREATED => Ok(()),
            status => Err(self.unavailable(format!(
                "{what}: HTTP {} ({})",
                status.as_u16(),
                answer.reason()
            ))),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let key = prints::check_key(key)?;
        let what = "reading a print from the server's print store";
        let call = Call {
            max_answer: Some(MAX_PRINT),
            ..Call::new(Scope::Researcher, what, self.client.request_timeout())
        };
        let answer = self
            .client
            .send(
                Method::GET,
                self.client.url(&["prints", key]),
                Body::Empty,
                call,
            )
            .await
            .map_err(|e| self.failed(e))?;
        match answer.status {
            StatusCode::OK => match prints::envelope::unwrap(&answer.body) {
                Ok(payload) => Ok(Some(payload.to_vec())),
                Err(why) => Err(StoreError::Damaged {
                    key: key.to_string(),
                    why: format!("as the server sent it: {why}"),
                }),
            },
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::CONFLICT => Err(StoreError::Damaged {
                key: key.to_string(),
                why: answer.reason(),
            }),
            status => Err(self.unavailable(format!(
                "{what}: HTTP {} ({})",
                status.as_u16(),
                answer.reason()
            ))),
        }
    }

    async fn list(&self) -> Result<Vec<PrintInfo>, StoreError> {
        Err(self.unavailable(format!("listing the prints: {NOT_OFFERED}")))
    }

    async fn remove(&self, _key: &str) -> Result<bool, StoreError> {
        Err(self.unavailable(format!("removing a print: {NOT_OFFERED}")))
    }

    fn describe(&self) -> String {
        format!("the print store of {} (through its API)", self.client.shown)
    }
}
