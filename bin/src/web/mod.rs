//! The HTTP server: `archivist serve --addr`, and the long-running subcommands with
//! `--metrics-addr`. Every route only reads: nothing served changes the datastore or the bus.
//!
//! # Layout
//!
//! - `metrics.rs`: the Prometheus recorder, `/metrics` (gauges read at each scrape).
//! - `health.rs`: `/healthz` (the process is up), `/readyz` (the datastore and queues answer).
//! - `snapshot.rs`: what the page and the API show, read from the datastore and the bus.
//! - `history.rs`: the research progress sampled over time, kept in this process.
//! - `status_page.rs`: `/`, the status page (server-rendered HTML, refreshing itself).
//! - `api.rs`: `/api/…`, the page's data as JSON.
//!
//! The status page and the API are served by `serve` and `run`; the one-archivist
//! subcommands serve metrics and health checks only.

mod api;
mod health;
mod history;
mod metrics;
mod snapshot;
mod status_page;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::routing::get;
use axum::Router;
use datastore::DataStore;
use messagebus::Bus;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};

pub(crate) use history::History;

/// How long one request may wait on the datastore or the bus: a scraper gives up after ten
/// seconds by default, and a page that answers late is worse than one that says what it
/// could not read.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the served data comes from.
pub(crate) struct Sources {
    pub(crate) store: Arc<dyn DataStore>,
    /// `None`: the queues live in another process (the in-memory bus).
    pub(crate) bus: Option<Arc<dyn Bus>>,
    pub(crate) queues: Vec<String>,
    /// The datastore and the bus as the page names them: URLs with credentials masked.
    pub(crate) datastore_shown: String,
    pub(crate) bus_shown: String,
    /// Masks the credentials of the configured URLs in error texts shown to a visitor.
    pub(crate) redactor: crate::panic_hook::Redactor,
}

impl Sources {
    /// The sources of `config`'s datastore and bus.
    pub(crate) fn new(
        config: &Config,
        store: Arc<dyn DataStore>,
        bus: Option<Arc<dyn Bus>>,
    ) -> Self {
        let database_url = config.database_url();
        let bus_url = config.bus_url();
        let bus_shown = match config.bus {
            BusKind::Memory => "in-memory (inside another process)".to_string(),
            BusKind::Sqs => "SQS".to_string(),
            BusKind::Sqlite | BusKind::Postgres => {
                format!("database bus at {}", messagebus::redact_url(&bus_url))
            }
            BusKind::Rabbitmq => format!("RabbitMQ at {}", messagebus::redact_url(&bus_url)),
        };
        Sources {
            store,
            bus,
            queues: config.queues.all().iter().map(|q| q.to_string()).collect(),
            datastore_shown: datastore::redact_url(&database_url),
            bus_shown,
            redactor: crate::panic_hook::Redactor::new(&[Some(&database_url), Some(&bus_url)]),
        }
    }
}

/// What one server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Routes {
    /// `/metrics`, `/healthz`, `/readyz`.
    MetricsAndHealth,
    /// Those, and the status page with its JSON API.
    Everything,
}

/// State every handler shares.
pub(crate) struct App {
    sources: Sources,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
    history: History,
}

/// Installs the metrics recorder and serves `routes` on `addr` until `token` is cancelled;
/// returns the bound address (port 0 picks a free one). `setting` names the flag and
/// variable the address came from, for the error when it cannot be bound (exit 1).
pub(crate) async fn spawn(
    addr: SocketAddr,
    setting: &str,
    sources: Sources,
    routes: Routes,
    token: &CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let prometheus = metrics::install()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {setting} {addr}"))?;
    let bound = listener.local_addr().context("the listener's address")?;
    let app = Arc::new(App {
        sources,
        prometheus,
        history: History::default(),
    });
    let mut router = Router::new()
        .route("/metrics", get(metrics::scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(health::readyz));
    if routes == Routes::Everything {
        router = router
            .route("/", get(status_page::page))
            .route("/api/status", get(api::status))
            .route("/api/progress", get(api::progress))
            .route("/api/leases", get(api::leases))
            .route("/api/queues", get(api::queues))
            .route("/api/dead-letters", get(api::dead_letters))
            .route("/api/matches", get(api::matches));
        tokio::spawn(history::sample(app.clone(), token.clone()));
        tracing::info!(
            "serving the status page, /api/…, /metrics, /healthz and /readyz on http://{bound}"
        );
    } else {
        tracing::info!("serving /metrics, /healthz and /readyz on http://{bound}");
    }
    let router = router.with_state(app);
    let token = token.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the HTTP server stopped");
        }
    });
    Ok(bound)
}
