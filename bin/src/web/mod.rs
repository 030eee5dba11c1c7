//! The HTTP server: `archivist serve --addr`, and the long-running subcommands with
//! `--metrics-addr`. Every route only reads: nothing served changes the datastore or the bus.
//!
//! # Layout
//!
//! - `app.rs`: what every handler shares: the datastore and the bus (`Sources`), the
//!   progress history and its sampler.
//! - `metrics.rs`: the Prometheus recorder, `/metrics` (gauges read at each scrape).
//! - `health.rs`: `/healthz` (the process is up), `/readyz` (the datastore and queues answer).
//! - `snapshot.rs`: what the page and the API show, read from the datastore and the bus.
//! - `history.rs`: the research progress sampled over time, kept in this process.
//! - `status_page.rs`: `/`, the status page (server-rendered HTML, refreshing itself).
//! - `api.rs`: `/api/…`, the page's data as JSON.
//! - `browse.rs`: `/clips`, `/episodes` and each one's page: the archive for people.
//! - `browse_api.rs`: `/api/clips`, `/api/episodes` and each one's page as JSON.
//! - `media.rs`: `/media/{sha256}`, the media archive's kept copies for the pages' players
//!   (byte ranges, streamed).
//! - `archive_view.rs`: the media archive as the pages read it, with what it answered kept
//!   a minute (a large archive on S3 is slow to list), its figures counted in the background.
//! - `sign_in.rs`: `/sign-in` and `/sign-out`, a reader's way in from a browser to the pages
//!   `serve --api` guards (the sessions themselves are [`::api::ReaderSessions`]).
//! - `layout.rs`, `style.css`: what every page shares: the head, the top bar, the stylesheet
//!   (`/style.css`).
//!
//! The status page and the API are served by `serve` and `run`; the one-archivist
//! subcommands serve metrics and health checks only.

mod api;
mod app;
mod archive_view;
mod browse;
mod browse_api;
mod health;
mod history;
mod layout;
mod media;
mod metrics;
mod sign_in;
mod snapshot;
mod status_page;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::app::{App, History};

pub(crate) use self::app::{BusSlot, Sources};

/// What one server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routes {
    /// `/metrics`, `/healthz`, `/readyz`.
    MetricsAndHealth,
    /// Those, and the status page with its JSON API.
    Everything,
}

/// Installs the metrics recorder, registers the counters of `archivists` at 0, and serves
/// `routes` on `addr` until `token` is cancelled;
/// returns the bound address (port 0 picks a free one). `setting` names the flag and
/// variable the address came from, for the error when it cannot be bound (exit 1).
pub(crate) async fn spawn(
    addr: SocketAddr,
    setting: &str,
    sources: Sources,
    routes: Routes,
    archivists: &[&str],
    token: &CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let listener = listen(addr, setting).await?;
    let bound = listener.local_addr().context("the listener's address")?;
    let (health, rest) = routers(sources, routes, token)?;
    // The counters of the archivists this process runs exist from the start, at 0 (an alert
    // on a rate needs a series), before the address is announced: the first scrape has them.
    archivist::describe_metrics(archivists);
    if routes == Routes::Everything {
        tracing::info!(
            "serving the status page, /api/…, /metrics, /healthz and /readyz on http://{bound}"
        );
    } else {
        tracing::info!("serving /metrics, /healthz and /readyz on http://{bound}");
    }
    Ok(net::server::spawn(listener, health.merge(rest), token)?)
}

/// Installs the metrics recorder and builds the routes: `/healthz`, `/readyz` and the
/// stylesheet (open to all: the sign-in page needs it too), and the rest (`/metrics`, and
/// with [`Routes::Everything`] the pages and `/api/…`), which `serve --api` puts behind a
/// reader token.
pub(crate) fn routers(
    sources: Sources,
    routes: Routes,
    token: &CancellationToken,
) -> anyhow::Result<(Router, Router)> {
    let prometheus = metrics::install()?;
    let archive = sources.archive.clone().map(|archive| {
        Arc::new(archive_view::ArchiveView::new(
            archive,
            sources.redactor.clone(),
        ))
    });
    let app = Arc::new(App {
        sources,
        prometheus,
        history: History::default(),
        archive,
    });
    let health = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(health::readyz))
        .route(layout::STYLESHEET_PATH, get(layout::stylesheet))
        .with_state(app.clone());
    let mut router = Router::new().route("/metrics", get(metrics::scrape));
    if routes == Routes::Everything {
        router = router
            .route("/", get(status_page::page))
            .route("/api/status", get(api::status))
            .route("/api/progress", get(api::progress))
            .route("/api/leases", get(api::leases))
            .route("/api/queues", get(api::queues))
            .route("/api/dead-letters", get(api::dead_letters))
            .route("/api/matches", get(api::matches))
            .route("/clips", get(browse::clips))
            .route("/clips/{id}", get(browse::clip))
            .route("/episodes", get(browse::episodes))
            .route("/episodes/{id}", get(browse::episode))
            .route("/api/clips", get(browse_api::clips))
            .route("/api/clips/{id}", get(browse_api::clip))
            .route("/api/episodes", get(browse_api::episodes))
            .route("/api/episodes/{id}", get(browse_api::episode))
            .route("/media/{sha256}", get(media::media));
        tokio::spawn(app::sample_history(app.clone(), token.clone()));
    }
    Ok((health, router.with_state(app)))
}

/// `/sign-in` and `/sign-out` over `sessions` (`serve --api`: open to all, the way in).
pub(crate) fn sign_in_routes(sessions: Arc<::api::ReaderSessions>) -> Router {
    sign_in::router(sessions)
}

/// [`net::server::bind`], its configuration errors usage errors (exit 2).
pub(crate) async fn listen(addr: SocketAddr, setting: &str) -> anyhow::Result<TcpListener> {
    net::server::bind(addr, setting).await.map_err(|e| {
        if e.is_configuration() {
            crate::values::usage(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })
}
