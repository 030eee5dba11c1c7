//! `research --metrics-addr`: the researcher's own small server, since it has no datastore
//! to show: `/metrics` (Prometheus), `/healthz`, and `/api/researcher` (the analyser, and what
//! each slot is working on since when). Served as the status page is (`net::server`): on a
//! loopback address only to loopback host names (the slots show episode titles and leases),
//! with bounded connections and deadlines.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

use super::Context;

/// Buckets of the researcher's `_seconds` histograms: from a cached clip to an hour of audio.
const BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0,
];

struct App {
    ctx: Arc<Context>,
    prometheus: PrometheusHandle,
    concurrency: usize,
}

/// Serves until `token` is cancelled; returns the bound address.
pub(super) async fn spawn(
    addr: SocketAddr,
    ctx: Arc<Context>,
    concurrency: usize,
    token: &CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), BUCKETS)
        .context("metric buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let listener = crate::web::listen(addr, "ARCHIVIST_METRICS_ADDR (--metrics-addr)").await?;
    let app = Arc::new(App {
        ctx,
        prometheus,
        concurrency,
    });
    let router = Router::new()
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/researcher", get(researcher))
        .with_state(app);
    let bound = net::server::spawn(listener, router, token)?;
    tracing::info!("serving /metrics, /healthz and /api/researcher on http://{bound}");
    Ok(bound)
}

async fn scrape(State(app): State<Arc<App>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.prometheus.render(),
    )
}

async fn researcher(State(app): State<Arc<App>>) -> impl IntoResponse {
    let slots = app.ctx.slots();
    let busy = slots
        .iter()
        .filter(|s| matches!(s, super::SlotState::Working { .. }))
        .count();
    Json(serde_json::json!({
        "analyser": app.ctx.analyser_shown(),
        "concurrency": app.concurrency,
        "busy": busy,
        "slots": slots,
    }))
}
