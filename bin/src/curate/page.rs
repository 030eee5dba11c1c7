//! `curate feed --every --metrics-addr`: the curator's own small server. A curator has no
//! datastore (the status page of `archivist serve` knows nothing of it), so, as a researcher
//! does with `/api/researcher`, it serves what it knows itself: `/metrics` (Prometheus),
//! `/healthz`, a page on `/` (and `/curator`) and its JSON on `/api/curator` — each feed's
//! address, last poll and its outcome, and the items sent, not-modified answers and errors
//! since the curator started. Served through the archivists' server guard (bounded
//! connections, deadlines, own host names only on loopback).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use net::server as guard;

/// How one feed's last poll ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
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
pub(crate) struct FeedStatus {
    /// The address given on the command line.
    pub(crate) feed: String,
    /// Where it is fetched from (another after a permanent redirect).
    pub(crate) url: String,
    pub(crate) title: Option<String>,
    /// The last time it was asked (a put-off feed is not asked, and keeps its last poll).
    pub(crate) last_poll: Option<DateTime<Utc>>,
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
    pub(crate) deferred_until: Option<DateTime<Utc>>,
    /// Since the curator started: polls (requests made), episodes sent, 304s, failures.
    pub(crate) polls: u64,
    pub(crate) items_sent: u64,
    pub(crate) not_modified: u64,
    pub(crate) errors: u64,
}

/// What the curator's passes did, per feed in the order given; shared with the server.
#[derive(Debug, Clone)]
pub(crate) struct Board {
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

struct App {
    prometheus: PrometheusHandle,
    board: Option<Board>,
}

/// Serves `/metrics`, `/healthz` and, with a board, `/`, `/curator` and `/api/curator` on
/// `addr` (`--metrics-addr`) until `token` is cancelled; returns the bound address.
pub(crate) async fn serve(
    addr: SocketAddr,
    board: Option<Board>,
    token: &CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on ARCHIVIST_METRICS_ADDR (--metrics-addr) {addr}")
    })?;
    let bound = listener.local_addr().context("the listener's address")?;
    let with_board = board.is_some();
    let app = Arc::new(App { prometheus, board });
    let mut router = axum::Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok\n" }));
    if with_board {
        router = router
            .route("/", get(page))
            .route("/curator", get(page))
            .route("/api/curator", get(api));
    }
    if with_board {
        tracing::info!(
            "serving the curator's page (/), /api/curator, /metrics and /healthz on http://{bound}"
        );
    } else {
        tracing::info!("serving /metrics and /healthz on http://{bound}");
    }
    // The archivists' server guard: bounded connections, deadlines, own host names only.
    guard::spawn(listener, router.with_state(app), token)?;
    Ok(bound)
}

async fn scrape(State(app): State<Arc<App>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.prometheus.render(),
    )
}

async fn page(State(app): State<Arc<App>>) -> impl IntoResponse {
    match &app.board {
        Some(b) => b.page().into_response(),
        None => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

async fn api(State(app): State<Arc<App>>) -> impl IntoResponse {
    match &app.board {
        Some(b) => Json(b.json()).into_response(),
        None => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}
