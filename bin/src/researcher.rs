//! The researcher's wiring below its subcommand, shared with the demo (as `archivists.rs` is
//! for the archivists): the receivers and the sender it takes from the bus, `research::start`,
//! the `--metrics-addr` server beside the library's `/api/researcher`, the wait, and the
//! library's errors as the binary's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use axum::http::header;
use axum::routing::get;
use axum::Router;
use messagebus::{Bus, Receiver};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use research::{
    Analyser, Ended, Later, Media, ResearchError, ResearcherHandle, ResearcherSettings, Status,
};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::connect;
use crate::values::usage;

/// The library's error as the command's: a setting that cannot be used is a usage error
/// (exit 2), anything else fatal (exit 1).
pub(crate) fn from_library(e: ResearchError) -> anyhow::Error {
    match e {
        ResearchError::Config(message) => usage(message),
        e => anyhow::Error::new(e),
    }
}

/// What a researcher runs with, besides the bus: from `research`'s options, or the demo's.
pub(crate) struct Setup {
    pub(crate) analyser: Arc<dyn Analyser>,
    pub(crate) media: Media,
    /// Slots: work items at once, one receiver (one consumer) each.
    pub(crate) concurrency: usize,
    /// Take what is waiting, finish it, and return.
    pub(crate) once: bool,
    pub(crate) stall_timeout: Duration,
    pub(crate) drain_timeout: Duration,
    /// Holds of items whose analyser asked for a later try.
    pub(crate) later: Later,
    /// What the researcher counts of episode prints.
    pub(crate) print_counters: Arc<research::printing::PrintCounters>,
}

/// Runs a researcher on `bus` until `token` is cancelled (then the drain) or, with `once`,
/// until the queue is drained; with `--metrics-addr`, its server meanwhile. The caller owns
/// the bus and closes it.
pub(crate) async fn run_on(
    config: &Config,
    bus: &dyn Bus,
    setup: Setup,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let results = connect::sender(bus, &config.queues.completed_research).await?;
    // One receiver per slot, made before any receives: each counts as a researcher from the
    // start, so work assignment sees the whole capacity at once.
    let mut receivers: Vec<Arc<dyn Receiver>> = Vec::with_capacity(setup.concurrency);
    for _ in 0..setup.concurrency {
        receivers.push(connect::receiver(bus, &config.queues.pending_research).await?);
    }
    // The recorder before the start, so that the researcher's first metrics are recorded.
    let server = match config.metrics_addr {
        Some(addr) => Some(MetricsServer::bind(addr).await?),
        None => None,
    };
    let settings = ResearcherSettings {
        once: setup.once,
        stall_timeout: setup.stall_timeout,
        drain_timeout: setup.drain_timeout,
        later: setup.later,
        max_receives: config.max_receives,
        retry_budget: config.retry_budget,
        print_counters: setup.print_counters.clone(),
    };
    let handle = research::start(
        token.clone(),
        receivers,
        results,
        setup.analyser,
        setup.media,
        settings,
    );
    if let Some(server) = server {
        if let Err(e) = server.spawn(handle.status.clone(), token) {
            // The slots stop; what they hold goes back.
            token.cancel();
            let _ = wait(handle).await;
            return Err(e);
        }
    }
    match wait(handle).await? {
        Ended::Failed(e) => Err(from_library(e)),
        _ => Ok(()),
    }
}

/// Waits for the researcher's report, its non-fatal errors logged for debugging as they come
/// (the library logs them already); how it ended.
async fn wait(handle: ResearcherHandle) -> anyhow::Result<Ended> {
    let ResearcherHandle {
        mut errors, done, ..
    } = handle;
    tokio::pin!(done);
    let mut errors_open = true;
    let report = loop {
        tokio::select! {
            biased;
            e = errors.recv(), if errors_open => match e {
                Some(e) => tracing::debug!("researcher: {e}"),
                None => errors_open = false,
            },
            r = &mut done => break r,
        }
    };
    let report = report.map_err(|_| anyhow!("the researcher stopped without a report"))?;
    tracing::debug!(
        received = report.received,
        finished = report.finished,
        released = report.released,
        dead_lettered = report.dead_lettered,
        results_sent = report.results_sent,
        "researcher report"
    );
    Ok(report.ended)
}

/// Buckets of the researcher's `_seconds` histograms: from a cached clip to an hour of audio.
const BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// `--metrics-addr`: the researcher's own small server, since it has no datastore to show:
/// `/metrics` (Prometheus), `/healthz`, and the library's `/api/researcher` (the analyser,
/// and what each slot is working on since when). Served as the status page is
/// (`net::server`): on a loopback address only to loopback host names (the slots show
/// episode titles and leases), with bounded connections and deadlines.
struct MetricsServer {
    listener: tokio::net::TcpListener,
    prometheus: PrometheusHandle,
}

impl MetricsServer {
    /// Installs the metrics recorder and binds `addr`.
    async fn bind(addr: SocketAddr) -> anyhow::Result<Self> {
        let prometheus = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), BUCKETS)
            .context("metric buckets")?
            .install_recorder()
            .context("cannot install the metrics recorder")?;
        metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        let listener = crate::web::listen(addr, "ARCHIVIST_METRICS_ADDR (--metrics-addr)").await?;
        Ok(MetricsServer {
            listener,
            prometheus,
        })
    }

    /// Serves until `token` is cancelled.
    fn spawn(self, status: Status, token: &CancellationToken) -> anyhow::Result<SocketAddr> {
        let prometheus = self.prometheus;
        let router = Router::new()
            .route(
                "/metrics",
                get(move || {
                    let text = prometheus.render();
                    async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
                }),
            )
            .route("/healthz", get(|| async { "ok\n" }))
            .merge(research::status::router(status));
        let bound = net::server::spawn(self.listener, router, token)?;
        tracing::info!("serving /metrics, /healthz and /api/researcher on http://{bound}");
        Ok(bound)
    }
}
