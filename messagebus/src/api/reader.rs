//! A reader's requests: `GET /api/v1/status` and `GET /api/v1/matches` with a token of scope
//! `reader`, for `archivist status --server` and `archivist matches --server`. The answers are
//! read into the caller's types (the datastore's, which this crate does not know).

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use super::client::Client;
use super::{ApiConfig, Scope};
use crate::BusError;

/// The filters of `GET /api/v1/matches`, as `archivist matches` takes them. Empty filters
/// match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MatchesQuery {
    /// Only matches of the clip with this title.
    pub clip: Option<String>,
    /// Only matches in episodes with this title.
    pub episode: Option<String>,
    /// At most this many (the server lists at most its own limit).
    pub limit: Option<u64>,
    /// Only matches researched at or after this time.
    pub since: Option<DateTime<Utc>>,
}

/// A reader of the API of `archivist serve --api`: the status and the matches, with a token
/// of scope `reader`. Requests are tried again as the bus's are (connection errors and
/// overloaded answers, a bounded number of times); a refused token is
/// [`BusError::Unauthorized`] naming the scope `reader`; a certificate the client does not
/// trust is [`BusError::Rejected`] at once.
#[derive(Debug)]
pub struct ApiReader {
    client: Client,
}

impl ApiReader {
    /// A reader of the API at `config.server` (its queue names are not used). Connects to
    /// nothing yet; a server address that is not an http(s) URL, or a `ca_cert` that cannot
    /// be read, is [`BusError::Rejected`].
    pub fn new(config: &ApiConfig) -> Result<ApiReader, BusError> {
        Ok(ApiReader {
            client: Client::new(config)?,
        })
    }

    /// The server as messages show it (credentials in its URL masked).
    pub fn server(&self) -> &str {
        &self.client.shown
    }

    /// `GET /api/v1/status`: the object of `archivist status --json`, as `T`.
    pub async fn status<T: DeserializeOwned>(&self) -> Result<T, BusError> {
        let what = "reading the status";
        let answer = self
            .client
            .get(self.client.url(&["status"]), Scope::Reader, what)
            .await?;
        self.check(&answer, "GET /api/v1/status")?;
        answer.json(what)
    }

    /// `GET /api/v1/matches` with `query`'s filters: one `T` per line of the answer.
    pub async fn matches<T: DeserializeOwned>(
        &self,
        query: &MatchesQuery,
    ) -> Result<Vec<T>, BusError> {
        let what = "reading the matches";
        let mut url = self.client.url(&["matches"]);
        {
            let mut pairs = url.query_pairs_mut();
            if let Some(clip) = &query.clip {
                pairs.append_pair("clip", clip);
            }
            if let Some(episode) = &query.episode {
                pairs.append_pair("episode", episode);
            }
            if let Some(limit) = query.limit {
                pairs.append_pair("limit", &limit.to_string());
            }
            if let Some(since) = query.since {
                pairs.append_pair(
                    "since",
                    &since.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                );
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        let answer = self.client.get(url, Scope::Reader, what).await?;
        self.check(&answer, "GET /api/v1/matches")?;
        answer
            .body
            .split(|&b| b == b'\n')
            .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
            .enumerate()
            .map(|(i, line)| {
                serde_json::from_slice(line).map_err(|e| BusError::Rejected {
                    message: format!(
                        "{what}: line {} of the server's answer is not a match: {e}",
                        i + 1
                    ),
                    source: None,
                })
            })
            .collect()
    }

    /// An answer other than 200: a server error is [`BusError::Unavailable`] (it may pass),
    /// anything else [`BusError::Rejected`] (likely no archivist API at that address).
    fn check(&self, answer: &super::client::Answer, request: &str) -> Result<(), BusError> {
        if answer.status == StatusCode::OK {
            return Ok(());
        }
        let said = format!(
            "{request} at the API server {} answered HTTP {} ({})",
            self.client.shown,
            answer.status.as_u16(),
            answer.reason()
        );
        if answer.status.is_server_error() {
            return Err(BusError::Unavailable {
                message: said,
                source: None,
            });
        }
        Err(BusError::Rejected {
            message: format!(
                "{said}: is it `archivist serve --api`, and is the address the server's own (a \
                 reverse proxy's path prefix included)?"
            ),
            source: None,
        })
    }
}
