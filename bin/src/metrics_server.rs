//! `--metrics-addr` (ARCHIVIST_METRICS_ADDR): Prometheus metrics on `/metrics`, and health
//! checks on `/healthz` (the process is up) and `/readyz` (the datastore and the bus answer
//! now), served by the long-running subcommands.
//!
//! The library crates count through the `metrics` facade; this module installs the
//! Prometheus recorder that collects them, and on each scrape sets the gauges read from the
//! datastore and the bus (pairs, leases, queue depths), so that they are as fresh as the scrape.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use datastore::DataStore;
use messagebus::Bus;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// How long one scrape or readiness check may wait on the datastore or the bus: a scraper
/// gives up after ten seconds by default.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Histogram buckets of the `_seconds` metrics: from a local SQLite call to a slow SQS one.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

struct Shared {
    prometheus: PrometheusHandle,
    store: Arc<dyn DataStore>,
    bus: Arc<dyn Bus>,
    queues: Vec<String>,
}

/// Installs the Prometheus recorder and serves `/metrics`, `/healthz` and `/readyz` on
/// `addr` until `token` is cancelled. Fails (exit 1) when the address cannot be bound.
pub(crate) async fn spawn(
    addr: SocketAddr,
    store: Arc<dyn DataStore>,
    bus: Arc<dyn Bus>,
    queues: Vec<String>,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), LATENCY_BUCKETS)
        .context("metric buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("cannot listen on ARCHIVIST_METRICS_ADDR (--metrics-addr) {addr}")
    })?;
    let bound = listener
        .local_addr()
        .context("the metrics listener's address")?;
    let shared = Arc::new(Shared {
        prometheus,
        store,
        bus,
        queues,
    });
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(shared);
    tracing::info!("serving /metrics, /healthz and /readyz on http://{bound}");
    let token = token.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the metrics server stopped");
        }
    });
    Ok(())
}

/// `/metrics`: the counters, with the gauges read now.
async fn metrics_page(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if let Err(why) = tokio::time::timeout(CHECK_TIMEOUT, refresh_gauges(&shared))
        .await
        .unwrap_or_else(|_| Err("timed out".to_string()))
    {
        // The counters are still worth serving; the stale gauges say when they were read.
        tracing::debug!("metrics gauges not refreshed: {why}");
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.prometheus.render(),
    )
}

/// Reads the datastore's counts and the queues' depths into gauges.
async fn refresh_gauges(shared: &Shared) -> Result<(), String> {
    let started = Instant::now();
    let status = shared.store.status(chrono::Utc::now()).await;
    metrics::histogram!("archivist_datastore_call_duration_seconds", "call" => "status")
        .record(started.elapsed().as_secs_f64());
    let status = status.map_err(|e| format!("datastore: {e}"))?;
    let pairs_to_do = status
        .research_pairs
        .saturating_sub(status.researched_pairs);
    for (name, value) in [
        ("archivist_episodes", status.episodes),
        ("archivist_clips", status.clips),
        ("archivist_research_pairs", status.research_pairs),
        ("archivist_pairs_researched", status.researched_pairs),
        ("archivist_pairs_to_do", pairs_to_do),
        ("archivist_pairs_leased", status.leased_pairs),
        ("archivist_matches", status.matched_pairs),
    ] {
        metrics::gauge!(name).set(value as f64);
    }
    for (state, value) in [
        ("active", status.active_leases),
        ("awaiting_late_results", status.awaiting_late_results),
        ("expired", status.expired_leases),
    ] {
        metrics::gauge!("archivist_leases", "state" => state).set(value as f64);
    }
    for queue in &shared.queues {
        let started = Instant::now();
        let stats = match shared.bus.sender(queue).await {
            Ok(sender) => sender.inspect().await,
            Err(e) => Err(e),
        };
        metrics::histogram!("archivist_bus_call_duration_seconds", "call" => "inspect")
            .record(started.elapsed().as_secs_f64());
        let stats = stats.map_err(|e| format!("queue {queue}: {e}"))?;
        let q = queue.clone();
        metrics::gauge!("archivist_queue_messages", "queue" => q.clone(), "state" => "waiting")
            .set(stats.waiting as f64);
        metrics::gauge!("archivist_queue_messages", "queue" => q.clone(), "state" => "in_flight")
            .set(stats.in_flight as f64);
        metrics::gauge!("archivist_queue_dead_letters", "queue" => q)
            .set(stats.dead_letters as f64);
    }
    Ok(())
}

/// `/readyz`: 200 when the datastore and every queue answer within the check timeout, else
/// 503 naming which did not (without its URL).
async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let check = async {
        shared
            .store
            .status(chrono::Utc::now())
            .await
            .map_err(|_| "datastore unreachable".to_string())?;
        for queue in &shared.queues {
            let sender = shared
                .bus
                .sender(queue)
                .await
                .map_err(|_| format!("bus unreachable (queue {queue})"))?;
            sender
                .inspect()
                .await
                .map_err(|_| format!("bus unreachable (queue {queue})"))?;
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(CHECK_TIMEOUT, check).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n".to_string()),
        Ok(Err(why)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the datastore or the bus did not answer in time\n".to_string(),
        ),
    }
}
