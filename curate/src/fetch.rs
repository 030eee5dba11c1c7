//! Fetching a feed politely, as podcast indexes do: an identifying User-Agent, conditional GET
//! (If-None-Match / If-Modified-Since from the last answer), gzip, 304 honoured, 429 and 503
//! waited out when their Retry-After is short (else the feed is put off until then), one
//! timeout over the whole request, a size limit while reading the body, and redirects
//! followed here rather than by reqwest, so that a permanent one (301, 308) is seen and the
//! feed's remembered address moves with it.
//!
//! Addresses: the feed's address as the user typed it is fetched as given, whatever it
//! resolves to; what a feed leads to (its redirects, its further pages) connects only to public
//! addresses ([`net::address_policy`]) unless the typed address itself answered from a
//! non-public one (a feed on the user's own network), or when the policy allows private
//! addresses (`--allow-private-addresses`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;
use url::Url;

use net::address_policy::AddressPolicy;
use net::fetch::Status;

use crate::CurateError;

/// Redirects followed for one request, at most (browsers allow about 20; feeds need few).
const MAX_REDIRECTS: usize = 10;
/// Waits for a 429/503 within one fetch, at most; a feed still refusing goes to the next pass.
const MAX_RETRIES: usize = 2;
/// How long connecting may take, within the request's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a Retry-After puts a feed off (unless `--max-retry-wait` is longer): a date
/// in the year 9999 is a mistake, not a plan, and must not stop the feed for good.
const MAX_PUT_OFF: Duration = Duration::from_secs(24 * 3600);

/// The User-Agent: who is asking, and where to read about it (every fetch's, [`net::fetch`]).
#[cfg(test)]
pub(crate) fn user_agent() -> String {
    net::fetch::user_agent()
}

/// The validators of the last answer, sent back for a conditional GET.
#[derive(Debug, Clone, Default)]
pub(crate) struct Validators {
    pub(crate) etag: Option<String>,
    pub(crate) last_modified: Option<String>,
}

/// What a fetch gave.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// 304: the feed has not changed since the validators were given.
    NotModified { moved_to: Option<Url> },
    /// The feed's bytes (decompressed).
    Body {
        bytes: Vec<u8>,
        validators: Validators,
        /// Where the body came from, after redirects (relative links resolve against it).
        url: Url,
        /// The address the feed moved to for good (301/308 from the address asked), if so.
        moved_to: Option<Url>,
        /// Whether what the body leads to (further pages) is fetched as given: the address
        /// asked was fetched as given and answered from a non-public address.
        as_given: bool,
    },
}

/// Why a fetch failed; the text says it in words for the report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("no complete answer within {} (--timeout)", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("the feed is larger than {0} bytes (--max-feed-size): not read")]
    TooLarge(u64),
    #[error("the server answered {0}")]
    Status(String),
    #[error("the server answered {status} and asks to wait until {until} (Retry-After): the feed is put off until then")]
    RetryLater {
        status: String,
        until: DateTime<Utc>,
    },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("a redirect without a usable Location ({0})")]
    BadRedirect(String),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Network(String),
    #[error("interrupted")]
    Cancelled,
}

/// The HTTP client of one curator run, and its limits.
#[derive(Debug)]
pub(crate) struct Fetcher {
    /// Every fetch's rules ([`net::fetch`]): addresses, redirects, sizes, the user agent.
    fetcher: net::fetch::Fetcher,
    timeout: Duration,
    max_retry_wait: Duration,
}

impl Fetcher {
    /// A client with the curator's limits, gzip, and redirects seen (a permanent one moves
    /// the feed).
    pub(crate) fn new(
        timeout: Duration,
        max_bytes: u64,
        max_retry_wait: Duration,
        addresses: &AddressPolicy,
    ) -> Result<Self, CurateError> {
        let config = net::fetch::FetchConfig {
            connect_timeout: CONNECT_TIMEOUT.min(timeout),
            read_timeout: None,
            max_bytes,
            max_redirects: MAX_REDIRECTS,
            gzip: true,
            extra_roots: Vec::new(),
        };
        let fetcher = net::fetch::Fetcher::new(addresses, config)
            .map_err(|error| CurateError::HttpClient { error })?;
        Ok(Fetcher {
            fetcher,
            timeout,
            max_retry_wait,
        })
    }

    /// Fetches `url`, conditionally on `validators`: one timeout over each request (the body
    /// included), 429/503 waited out within `max_retry_wait`. `as_given`: `url` is the
    /// user's (typed, or reached from a typed address on their own network), fetched whatever
    /// address it resolves to; otherwise it is checked as its redirects are.
    pub(crate) async fn fetch(
        &self,
        token: &CancellationToken,
        url: &Url,
        validators: &Validators,
        as_given: bool,
    ) -> Result<Fetched, FetchError> {
        let mut retries = 0;
        loop {
            let attempt =
                tokio::time::timeout(self.timeout, self.fetch_once(url, validators, as_given));
            let outcome = tokio::select! {
                _ = token.cancelled() => return Err(FetchError::Cancelled),
                r = attempt => r.unwrap_or(Err(FetchError::Timeout(self.timeout))),
            };
            let Err(FetchError::RetryLater { status, until }) = outcome else {
                return outcome;
            };
            let wait = (until - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            if retries >= MAX_RETRIES || wait > self.max_retry_wait {
                return Err(FetchError::RetryLater { status, until });
            }
            retries += 1;
            tracing::info!(feed = %url, %status, wait = ?wait, "the server asks to wait (Retry-After): waiting");
            tokio::select! {
                _ = token.cancelled() => return Err(FetchError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn fetch_once(
        &self,
        url: &Url,
        validators: &Validators,
        as_given: bool,
    ) -> Result<Fetched, FetchError> {
        let mut headers = HeaderMap::new();
        if let Some(v) = validators.etag.as_deref().and_then(header_value) {
            headers.insert(header::IF_NONE_MATCH, v);
        }
        if let Some(v) = validators.last_modified.as_deref().and_then(header_value) {
            headers.insert(header::IF_MODIFIED_SINCE, v);
        }
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5",
            ),
        );
        let answer = self.fetcher.get(url, headers, as_given).await?;
        let status = answer.status();
        match Status::of(status) {
            Status::NotModified => {
                return Ok(Fetched::NotModified {
                    moved_to: answer.moved_to,
                })
            }
            Status::Success => {}
            _ if status == StatusCode::TOO_MANY_REQUESTS
                || status == StatusCode::SERVICE_UNAVAILABLE =>
            {
                let until = answer
                    .headers()
                    .get(header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| retry_after(v, MAX_PUT_OFF.max(self.max_retry_wait)));
                return Err(match until {
                    Some(until) => FetchError::RetryLater {
                        status: status.to_string(),
                        until,
                    },
                    None => FetchError::Status(format!(
                        "{status} without Retry-After: trying again at the next pass"
                    )),
                });
            }
            _ => return Err(FetchError::Status(status.to_string())),
        }
        let got = Validators {
            etag: answer.header(header::ETAG),
            last_modified: answer.header(header::LAST_MODIFIED),
        };
        let (moved_to, as_given, url) =
            (answer.moved_to.clone(), answer.as_given, answer.url.clone());
        let bytes = answer.bytes().await?;
        Ok(Fetched::Body {
            bytes,
            validators: got,
            url,
            moved_to,
            as_given,
        })
    }
}

fn header_value(s: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(s).ok()
}

/// Retry-After as a time: seconds from now, or an HTTP date; `cap` from now at the latest,
/// in either form.
fn retry_after(value: &str, cap: Duration) -> Option<DateTime<Utc>> {
    let v = value.trim();
    let now = Utc::now();
    let latest = now + chrono::Duration::from_std(cap).unwrap_or(chrono::Duration::MAX);
    let at = if let Ok(secs) = v.parse::<u64>() {
        let secs = i64::try_from(secs).unwrap_or(i64::MAX);
        chrono::Duration::try_seconds(secs)
            .and_then(|d| now.checked_add_signed(d))
            .unwrap_or(latest)
    } else {
        DateTime::<Utc>::from(httpdate::parse_http_date(v).ok()?)
    };
    Some(at.min(latest))
}

impl From<net::fetch::FetchError> for FetchError {
    fn from(e: net::fetch::FetchError) -> Self {
        use net::fetch::FetchError as Net;
        match e {
            Net::Refused { .. } => FetchError::Refused(e.to_string()),
            Net::TooManyRedirects(_) => FetchError::TooManyRedirects,
            Net::BadRedirect(why) => FetchError::BadRedirect(why),
            Net::TooLarge(max) => FetchError::TooLarge(max),
            other => FetchError::Network(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn retry_after_forms() {
        let day = Duration::from_secs(24 * 3600);
        let t = retry_after("120", day).unwrap();
        let d = (t - Utc::now()).num_seconds();
        assert!((118..=120).contains(&d), "{d}");
        let t = retry_after("Wed, 21 Oct 2015 07:28:00 GMT", day).unwrap();
        assert_eq!(t.to_rfc3339(), "2015-10-21T07:28:00+00:00");
        assert!(retry_after("soon", day).is_none());
    }

    /// Both forms are capped the same way: a date in the year 9999 is no longer kept.
    #[test]
    fn retry_after_is_capped_in_both_forms() {
        let day = Duration::from_secs(24 * 3600);
        for value in [
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "99999999999",
            "18446744073709551615",
        ] {
            let t = retry_after(value, day).unwrap();
            let d = (t - Utc::now()).num_seconds();
            assert!((86_390..=86_400).contains(&d), "{value}: {d}");
        }
    }

    #[test]
    fn user_agent_names_us() {
        assert!(user_agent().starts_with("archivist/"));
        assert!(user_agent().contains("(+http"));
    }
}
