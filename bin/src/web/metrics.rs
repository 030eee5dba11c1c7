//! `/metrics`: Prometheus metrics.
//!
//! The library crates count through the `metrics` facade; this module installs the
//! Prometheus recorder that collects them, and on each scrape sets the gauges read from the
//! datastore and the bus (pairs, leases, queue depths), so that they are as fresh as the scrape.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::app::{App, CHECK_TIMEOUT};

/// Histogram buckets of the `_seconds` metrics: from a local SQLite call to a slow SQS one.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Installs the Prometheus recorder (once per process).
pub(super) fn install() -> anyhow::Result<PrometheusHandle> {
    let prometheus = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), LATENCY_BUCKETS)
        .context("metric buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    metrics::gauge!("archivist_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    describe_gauges();
    // The archivists' counters and histograms: described here, registered at 0 by each
    // subcommand for the archivists it runs.
    archivist::describe_metrics(&[]);
    Ok(prometheus)
}

/// The `# HELP` lines of the gauges this module sets.
fn describe_gauges() {
    for (name, help) in [
        (
            "archivist_build_info",
            "The binary's version, in the version label (always 1).",
        ),
        ("archivist_episodes", "Episodes in the datastore."),
        ("archivist_clips", "Clips in the datastore."),
        (
            "archivist_research_pairs",
            "Research pairs: episodes times clips.",
        ),
        (
            "archivist_pairs_researched",
            "Research pairs researched (not counting failed ones).",
        ),
        (
            "archivist_pairs_failed",
            "Research pairs that failed for good (media gone, not audio): not leased again \
             until retry-failed or a new media_uri.",
        ),
        (
            "archivist_pairs_to_do",
            "Research pairs neither researched nor failed (leased or not).",
        ),
        (
            "archivist_pairs_leased",
            "Research pairs held by a lease now.",
        ),
        (
            "archivist_matches",
            "Research pairs where the clip was found in the episode.",
        ),
        (
            "archivist_leases",
            "Leases now, by state: active, awaiting_late_results, expired.",
        ),
        (
            "archivist_queue_messages",
            "Messages in each queue, by state: waiting, in_flight.",
        ),
        (
            "archivist_queue_dead_letters",
            "Messages in each queue's dead-letter queue.",
        ),
    ] {
        metrics::describe_gauge!(name, help);
    }
}

/// `/metrics`: the counters, with the gauges read now.
pub(super) async fn scrape(State(app): State<Arc<App>>) -> impl IntoResponse {
    if let Err(why) = tokio::time::timeout(CHECK_TIMEOUT, refresh_gauges(&app))
        .await
        .unwrap_or_else(|_| Err("timed out".to_string()))
    {
        // The counters are still worth serving; the stale gauges say when they were read.
        tracing::debug!("metrics gauges not refreshed: {why}");
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.prometheus.render(),
    )
}

/// Reads the datastore's counts and the queues' depths into gauges.
async fn refresh_gauges(app: &App) -> Result<(), String> {
    let sources = &app.sources;
    let started = Instant::now();
    let status = sources.store.status(chrono::Utc::now()).await;
    metrics::histogram!("archivist_datastore_call_duration_seconds", "call" => "status")
        .record(started.elapsed().as_secs_f64());
    let status = status.map_err(|e| format!("datastore: {e}"))?;
    let pairs_to_do = status
        .research_pairs
        .saturating_sub(status.researched_pairs)
        .saturating_sub(status.failed_pairs);
    for (name, value) in [
        ("archivist_episodes", status.episodes),
        ("archivist_clips", status.clips),
        ("archivist_research_pairs", status.research_pairs),
        ("archivist_pairs_researched", status.researched_pairs),
        ("archivist_pairs_to_do", pairs_to_do),
        ("archivist_pairs_leased", status.leased_pairs),
        ("archivist_pairs_failed", status.failed_pairs),
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
    let Some(bus) = sources.bus.get().map_err(|why| format!("bus: {why}"))? else {
        return Ok(());
    };
    for queue in &sources.queues {
        let started = Instant::now();
        let stats = match bus.sender(queue).await {
            Ok(sender) => sender.inspect().await,
            // Not created yet: no depth to show, and the other queues still are.
            Err(messagebus::BusError::QueueNotFound(_)) => continue,
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
