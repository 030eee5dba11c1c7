//! The archivists' counters, read as Prometheus renders them: each event counted once on
//! every path (work items published by lease-then-send on the in-memory bus, and by the one
//! transaction of the database bus in the datastore's own file), every counter present at 0
//! before its first event, and a `# HELP` line for each.
//!
//! One test in its own binary: the recorder is global to the process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use archivist::pending_research::{start, PendingResearchConfig};
use archivist::{Ended, RetryPolicy};
use datastore::testing::{clip, episode};
use datastore::{DataStore, SqliteDataStore};
use messagebus::sql::{SqlBusConfig, SqliteBus};
use messagebus::{Bus, MemoryBus, MemoryBusConfig};
use tokio_util::sync::CancellationToken;

const PENDING: &str = "pending_research";

/// The value of `series` (name and labels as rendered) in `scrape`.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn config() -> PendingResearchConfig {
    PendingResearchConfig {
        lease_duration: chrono::Duration::hours(1),
        max_clips: 2,
        researchers: Some(2),
        start_jitter: Duration::ZERO,
        retry: RetryPolicy::within(Duration::from_secs(5)),
        hold_back: None,
        presence_window: datastore::PRESENCE_WINDOW,
    }
}

async fn assign(bus: &dyn Bus, store: Arc<dyn DataStore>) {
    let sender = bus.sender(PENDING).await.unwrap();
    let mut handle = start(CancellationToken::new(), sender, store, config());
    let report = (&mut handle.done).await.unwrap();
    assert!(matches!(report.ended, Ended::Finished), "{report:?}");
    assert_eq!(report.published, 2, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_work_item_is_counted_once_on_every_path() {
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .unwrap();
    archivist::describe_metrics(&["pending-research", "completed-research", "episodes"]);
    let published = r#"archivist_work_items_published_total{archivist="pending-research"}"#;
    let created = r#"archivist_leases_total{event="created"}"#;
    let scrape = prometheus.render();
    for series in [
        published,
        created,
        r#"archivist_leases_total{event="renewed"}"#,
        r#"archivist_retries_total{archivist="pending-research"}"#,
        r#"archivist_messages_received_total{archivist="episodes"}"#,
        r#"archivist_messages_received_total{archivist="completed-research"}"#,
        r#"archivist_duplicates_total{archivist="completed-research"}"#,
        r#"archivist_messages_dead_lettered_total{archivist="completed-research",reason="unknown_episode_or_clip"}"#,
        r#"archivist_messages_dead_lettered_total{archivist="episodes",reason="invalid_message"}"#,
    ] {
        assert_eq!(sample(&scrape, series), Some(0.0), "{series}:\n{scrape}");
    }
    // Only what the named archivists can count.
    assert!(!scrape.contains(r#"archivist="clips""#), "{scrape}");
    for name in [
        "archivist_messages_received_total",
        "archivist_messages_stored_total",
        "archivist_duplicates_total",
        "archivist_messages_dead_lettered_total",
        "archivist_messages_released_total",
        "archivist_retries_total",
        "archivist_work_items_published_total",
        "archivist_leases_total",
    ] {
        assert!(
            scrape.contains(&format!("# HELP {name} ")),
            "{name}:\n{scrape}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("archive.sqlite").display());
    let store = SqliteDataStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let store: Arc<dyn DataStore> = Arc::new(store);
    let episodes: Vec<_> = (0..4).map(episode).collect();
    let clips: Vec<_> = (0..2).map(clip).collect();
    store.upsert_episodes(&episodes).await.unwrap();
    store.upsert_clips(&clips).await.unwrap();

    // Lease, then send: the in-memory bus.
    let memory = MemoryBus::new(MemoryBusConfig::default());
    memory.create_queue(PENDING).await.unwrap();
    assign(&memory, store.clone()).await;
    let scrape = prometheus.render();
    assert_eq!(sample(&scrape, published), Some(2.0), "{scrape}");
    assert_eq!(sample(&scrape, created), Some(2.0), "{scrape}");

    // Lease and send in one transaction: the database bus in the datastore's file.
    let sqlite = SqliteBus::connect(&url, SqlBusConfig::default())
        .await
        .unwrap();
    sqlite.create_queue(PENDING).await.unwrap();
    assign(&sqlite, store.clone()).await;
    let scrape = prometheus.render();
    assert_eq!(sample(&scrape, published), Some(4.0), "{scrape}");
    assert_eq!(sample(&scrape, created), Some(4.0), "{scrape}");
    assert_eq!(
        sample(
            &scrape,
            r#"archivist_retries_total{archivist="pending-research"}"#
        ),
        Some(0.0)
    );
}
