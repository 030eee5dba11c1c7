//! The feed curator's board and page. A curator has no datastore (the status page of
//! `archivist serve` knows nothing of it), so, as a researcher does with `/api/researcher`,
//! it shows what it knows itself: a page on `/` (and `/curator`) and its JSON on
//! `/api/curator` — each feed's address, last poll and its outcome, and the items sent,
//! not-modified answers and errors since the curator started.
//!
//! [`router`] serves those three routes; the host adds its own (`/metrics`, `/healthz`) and
//! serves them through [`net::server`] (bounded connections, deadlines, own host names only
//! on loopback), as `archivist curate feed --every --metrics-addr` does.

use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use serde::Serialize;

/// How one feed's last poll ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Not polled since the curator started.
    NotYetPolled,
    /// Fetched and read.
    Read,
    /// 304: unchanged since the last read.
    NotModified,
    /// Not asked: it is waiting out an earlier Retry-After.
    PutOff,
    /// Failed (the error says why).
    Failed,
}

impl Outcome {
    fn words(self) -> &'static str {
        match self {
            Outcome::NotYetPolled => "not polled yet",
            Outcome::Read => "read",
            Outcome::NotModified => "not modified (304)",
            Outcome::PutOff => "put off (Retry-After)",
            Outcome::Failed => "failed",
        }
    }
}

/// One feed as the page shows it. Addresses are shown masked (a private feed's key never).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct FeedStatus {
    /// The address given (to the curator's settings).
    pub feed: String,
    /// Where it is fetched from (another after a permanent redirect).
    pub url: String,
    /// The feed's own title, once read.
    pub title: Option<String>,
    /// The last time it was asked (a put-off feed is not asked, and keeps its last poll).
    pub last_poll: Option<DateTime<Utc>>,
    /// How the last poll ended.
    pub outcome: Outcome,
    /// Why the last poll failed, if it did.
    pub error: Option<String>,
    /// The time the feed is put off until (its Retry-After), if it is.
    pub deferred_until: Option<DateTime<Utc>>,
    /// Polls (requests made) since the curator started.
    pub polls: u64,
    /// Episodes sent since the curator started.
    pub items_sent: u64,
    /// 304 answers since the curator started.
    pub not_modified: u64,
    /// Failed polls since the curator started.
    pub errors: u64,
}

/// What the curator's passes did, per feed in the order given; shared with the server.
/// Cloning is cheap: every clone is the same board. Made by
/// [`FeedCurator::board`](crate::feeds::FeedCurator::board).
#[derive(Debug, Clone)]
pub struct Board {
    inner: Arc<Mutex<BoardInner>>,
}

#[derive(Debug)]
struct BoardInner {
    started_at: DateTime<Utc>,
    every_seconds: u64,
    passes: u64,
    feeds: Vec<FeedStatus>,
}

impl Board {
    /// A board for `feeds` (shown addresses), polled every `every`.
    pub(crate) fn new(feeds: &[String], every: std::time::Duration) -> Board {
        let feeds = feeds
            .iter()
            .map(|f| FeedStatus {
                feed: f.clone(),
                url: f.clone(),
                title: None,
                last_poll: None,
                outcome: Outcome::NotYetPolled,
                error: None,
                deferred_until: None,
                polls: 0,
                items_sent: 0,
                not_modified: 0,
                errors: 0,
            })
            .collect();
        Board {
            inner: Arc::new(Mutex::new(BoardInner {
                started_at: Utc::now(),
                every_seconds: every.as_secs(),
                passes: 0,
                feeds,
            })),
        }
    }

    /// What the board says now.
    pub fn snapshot(&self) -> BoardSnapshot {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        BoardSnapshot {
            started_at: inner.started_at,
            every_seconds: inner.every_seconds,
            passes: inner.passes,
            feeds: inner.feeds.clone(),
        }
    }

    /// Changes the status of `feed` (its shown address) with `f`.
    pub(crate) fn update(&self, feed: &str, f: impl FnOnce(&mut FeedStatus)) {
        // A panic elsewhere while holding the lock leaves counts that are still counts.
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(status) = inner.feeds.iter_mut().find(|s| s.feed == feed) {
            f(status);
        }
    }

    /// Counts a finished pass.
    pub(crate) fn pass_done(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.passes += 1;
    }

    fn json(&self) -> serde_json::Value {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        serde_json::json!({
            "started_at": inner.started_at,
            "every_seconds": inner.every_seconds,
            "passes": inner.passes,
            "feeds": inner.feeds,
        })
    }

    fn page(&self) -> Markup {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Utc::now();
        let ago = |t: Option<DateTime<Utc>>| match t {
            Some(t) => format!(
                "{} ({} s ago)",
                t.format("%Y-%m-%d %H:%M:%S UTC"),
                (now - t).num_seconds().max(0)
            ),
            None => "never".to_string(),
        };
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta http-equiv="refresh" content="5";
                    title { "archivist curator" }
                    style { "body{font-family:system-ui,sans-serif;margin:1rem;max-width:70rem}\
                             .scroll{overflow-x:auto}table{border-collapse:collapse}\
                             th,td{padding:.25rem .5rem;border-bottom:1px solid #ccc;text-align:left;vertical-align:top}\
                             td.n{text-align:right}" }
                }
                body {
                    h1 { "archivist curator" }
                    p {
                        "Polling " (inner.feeds.len()) " feeds every "
                        (humantime::format_duration(std::time::Duration::from_secs(inner.every_seconds)))
                        "; " (inner.passes) " passes since "
                        (inner.started_at.format("%Y-%m-%d %H:%M:%S UTC")) "."
                    }
                    div.scroll {
                        table {
                            thead { tr {
                                th { "feed" } th { "last poll" } th { "outcome" }
                                th { "items sent" } th { "not modified" } th { "errors" } th { "polls" }
                            } }
                            tbody {
                                @for f in &inner.feeds {
                                    tr {
                                        td {
                                            @if let Some(t) = &f.title { strong { (t) } br; }
                                            (f.feed)
                                            @if f.url != f.feed { br; "fetched from " (f.url) }
                                        }
                                        td { (ago(f.last_poll)) }
                                        td {
                                            (f.outcome.words())
                                            @if let Some(e) = &f.error { br; (e) }
                                            @if let Some(t) = f.deferred_until {
                                                br; "until " (t.format("%Y-%m-%d %H:%M:%S UTC"))
                                            }
                                        }
                                        td.n { (f.items_sent) }
                                        td.n { (f.not_modified) }
                                        td.n { (f.errors) }
                                        td.n { (f.polls) }
                                    }
                                }
                            }
                        }
                    }
                    p { "The same as JSON: " a href="/api/curator" { "/api/curator" } "; metrics: "
                        a href="/metrics" { "/metrics" } "." }
                }
            }
        }
    }
}

/// The board at one moment (`/api/curator` serves it as JSON).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct BoardSnapshot {
    /// When the curator started.
    pub started_at: DateTime<Utc>,
    /// The interval between passes, in seconds.
    pub every_seconds: u64,
    /// Passes finished.
    pub passes: u64,
    /// Each feed, in the order given.
    pub feeds: Vec<FeedStatus>,
}

/// The curator's page on `/` and `/curator`, and the same as JSON on `/api/curator`, for
/// `board`. The host merges its own routes into it and serves it.
pub fn router(board: Board) -> axum::Router {
    axum::Router::new()
        .route("/", get(page))
        .route("/curator", get(page))
        .route("/api/curator", get(api))
        .with_state(board)
}

async fn page(State(board): State<Board>) -> impl IntoResponse {
    board.page()
}

async fn api(State(board): State<Board>) -> impl IntoResponse {
    Json(board.json())
}
