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
//! - `browse.rs`: `/clips`, `/episodes` and each one's page: the archive for people.
//! - `browse_api.rs`: `/api/clips`, `/api/episodes` and each one's page as JSON.
//! - `layout.rs`, `style.css`: what every page shares: the head, the top bar, the stylesheet
//!   (`/style.css`).
//!
//! The status page and the API are served by `serve` and `run`; the one-archivist
//! subcommands serve metrics and health checks only.

mod api;
mod browse;
mod browse_api;
mod health;
mod history;
mod layout;
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
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{BusKind, Config};

pub(crate) use history::History;

/// How long one request may wait on the datastore or the bus: a scraper gives up after ten
/// seconds by default, and a page that answers late is worse than one that says what it
/// could not read.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The bus as the server sees it: in another process, connected, or not (yet) reachable.
#[derive(Clone)]
pub(crate) struct BusSlot {
    /// The queues live in another process (the in-memory bus): nothing to read here.
    elsewhere: bool,
    bus: Arc<std::sync::OnceLock<Arc<dyn Bus>>>,
    /// Why the bus is not connected yet (credentials masked).
    why_not: Arc<std::sync::Mutex<String>>,
    redactor: Arc<crate::panic_hook::Redactor>,
}

impl BusSlot {
    fn new(bus: Option<Arc<dyn Bus>>, redactor: crate::panic_hook::Redactor) -> Self {
        let slot = BusSlot {
            elsewhere: bus.is_none(),
            bus: Arc::default(),
            why_not: Arc::default(),
            redactor: Arc::new(redactor),
        };
        if let Some(bus) = bus {
            let _ = slot.bus.set(bus);
        }
        slot
    }

    /// The bus: `Ok(None)` when its queues live in another process; `Err` saying why when it
    /// could not be reached (yet).
    pub(crate) fn get(&self) -> Result<Option<Arc<dyn Bus>>, String> {
        if self.elsewhere {
            return Ok(None);
        }
        match self.bus.get() {
            Some(bus) => Ok(Some(bus.clone())),
            None => Err(self
                .why_not
                .lock()
                .map(|w| w.clone())
                .unwrap_or_else(|_| "bus not connected".to_string())),
        }
    }

    /// The bus is connected now.
    pub(crate) fn connected(&self, bus: Arc<dyn Bus>) {
        let _ = self.bus.set(bus);
    }

    /// Why it is still not connected (credentials are masked here).
    pub(crate) fn still_not(&self, why: &str) {
        if let Ok(mut w) = self.why_not.lock() {
            *w = self.redactor.apply(why);
        }
    }
}

/// Where the served data comes from.
pub(crate) struct Sources {
    pub(crate) store: Arc<dyn DataStore>,
    pub(crate) bus: BusSlot,
    pub(crate) queues: Vec<String>,
    /// The work-item queue among them (the status page counts researchers on it).
    pub(crate) work_items: String,
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
        let redactor = crate::panic_hook::Redactor::new(&[Some(&database_url), Some(&bus_url)]);
        Sources {
            store,
            bus: BusSlot::new(bus, redactor.clone()),
            queues: config.queues.all().iter().map(|q| q.to_string()).collect(),
            work_items: config.queues.pending_research.clone(),
            datastore_shown: datastore::redact_url(&database_url),
            bus_shown,
            redactor,
        }
    }

    /// The sources of `config`'s datastore, with a bus that could not be reached yet
    /// (`why_not`): the returned slot is filled in once it is.
    pub(crate) fn without_bus_yet(
        config: &Config,
        store: Arc<dyn DataStore>,
        why_not: String,
    ) -> (Self, BusSlot) {
        let mut sources = Sources::new(config, store, None);
        sources.bus.elsewhere = false;
        sources.bus.still_not(&why_not);
        let slot = sources.bus.clone();
        (sources, slot)
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
    let listener = listen(addr, setting).await?;
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
            .route(layout::STYLESHEET_PATH, get(layout::stylesheet))
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
            .route("/api/episodes/{id}", get(browse_api::episode));
        tokio::spawn(history::sample(app.clone(), token.clone()));
        tracing::info!(
            "serving the status page, /api/…, /metrics, /healthz and /readyz on http://{bound}"
        );
    } else {
        tracing::info!("serving /metrics, /healthz and /readyz on http://{bound}");
    }
    Ok(net::server::spawn(listener, router.with_state(app), token)?)
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
