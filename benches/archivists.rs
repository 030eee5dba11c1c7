//! The archivists end to end on the in-memory bus, at the sizes of `shared/SCALE.md`: what the
//! datastore benchmark cannot see (decoding, bus round trips, acknowledgements, lease updates).
//!
//! ```text
//! cargo bench -p archivist --bench archivists -- [small|reference]... [--no-postgres] [--batch N]
//! ```
//!
//! For each size and backend (SQLite in a temporary file; Postgres in a fresh database through
//! `ARCHIVIST_TEST_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`):
//! - load: every episode and clip sent to the bus, then both ingestion archivists (`once`,
//!   default batch size unless `--batch`) run at once until the queues are drained. Target:
//!   under 2 s at the reference size.
//! - assign: one pending-research run publishing 200 work items of 50 clips.
//! - record: the researchers' answers for those items (10,000 results, the last of each item
//!   revoking its lease) drained by the completed-research archivist (default batch size
//!   unless `--batch`).
//!
//! Prints one Markdown table.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use archivist::completed_research::{self, CompletedResearchConfig};
use archivist::ingest::{start_clips, start_episodes, IngestConfig};
use archivist::messages::{decode, encode, CompletedResearchItem, PendingResearchItem};
use archivist::pending_research::{self, PendingResearchConfig};
use archivist::{Ended, Report};
use chrono::Utc;
use datastore::testing::{clip, episode};
use datastore::{DataStore, SqliteDataStore};
use messagebus::{Bus, MemoryBus, MemoryBusConfig};
use tokio_util::sync::CancellationToken;

struct Size {
    name: &'static str,
    episodes: u32,
    clips: u32,
}

const SIZES: [Size; 2] = [
    Size {
        name: "small",
        episodes: 200,
        clips: 40,
    },
    Size {
        name: "reference",
        episodes: 4_000,
        clips: 1_000,
    },
];

const ITEMS: u64 = 200;
const CLIPS_PER_ITEM: u32 = 50;

async fn store(backend: &str) -> (Arc<dyn DataStore>, Box<dyn Any>) {
    match backend {
        "sqlite" => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("bench.sqlite").display());
            let store = SqliteDataStore::connect(&url).await.unwrap();
            store.migrate().await.unwrap();
            (Arc::new(store), Box::new(dir))
        }
        _ => {
            let (store, db) = datastore::testing_pg::fresh_pg_store().await;
            (Arc::new(store), Box::new(db))
        }
    }
}

fn ok(report: &Report) {
    assert!(matches!(report.ended, Ended::Finished), "{report:?}");
    assert_eq!(report.dead_lettered, 0, "{report:?}");
}

async fn bench(size: &Size, backend: &str, batch: Option<usize>) -> [String; 3] {
    let (store, _guard) = store(backend).await;
    let bus = MemoryBus::new(MemoryBusConfig::default());
    for q in [
        "curated_episodes",
        "curated_clips",
        "pending_research",
        "completed_research",
    ] {
        bus.create_queue(q).await.unwrap();
    }

    // Load.
    let episodes: Vec<_> = (0..size.episodes).map(|i| encode(&episode(i))).collect();
    let clips: Vec<_> = (0..size.clips).map(|i| encode(&clip(i))).collect();
    bus.sender("curated_episodes")
        .await
        .unwrap()
        .send_batch(episodes)
        .await
        .unwrap();
    bus.sender("curated_clips")
        .await
        .unwrap()
        .send_batch(clips)
        .await
        .unwrap();
    let defaults = IngestConfig::default();
    let config = IngestConfig {
        batch_size: batch.unwrap_or(defaults.batch_size),
        receive_wait: Duration::ZERO,
        once: true,
        ..defaults
    };
    let started = Instant::now();
    let e = start_episodes(
        CancellationToken::new(),
        bus.receiver("curated_episodes").await.unwrap(),
        store.clone(),
        config.clone(),
    );
    let c = start_clips(
        CancellationToken::new(),
        bus.receiver("curated_clips").await.unwrap(),
        store.clone(),
        config,
    );
    let (e, c) = (e.done.await.unwrap(), c.done.await.unwrap());
    let load = started.elapsed();
    ok(&e);
    ok(&c);
    assert_eq!(e.stored + c.stored, u64::from(size.episodes + size.clips));

    // Assign.
    let started = Instant::now();
    let report = pending_research::start(
        CancellationToken::new(),
        bus.sender("pending_research").await.unwrap(),
        store.clone(),
        PendingResearchConfig {
            max_clips: CLIPS_PER_ITEM,
            researchers: Some(ITEMS),
            start_jitter: Duration::ZERO,
            ..PendingResearchConfig::default()
        },
    )
    .done
    .await
    .unwrap();
    let assign = started.elapsed();
    ok(&report);
    assert_eq!(report.published, ITEMS);

    // Research (untimed): every clip of every item, the last revoking the lease.
    let rx = bus.receiver("pending_research").await.unwrap();
    let mut answers = Vec::new();
    loop {
        let batch = rx.receive(10, Duration::ZERO).await.unwrap();
        if batch.is_empty() {
            break;
        }
        for d in batch {
            let item: PendingResearchItem = decode(d.body()).unwrap();
            let n = item.clips.len();
            for (i, clip) in item.clips.iter().enumerate() {
                answers.push(encode(&CompletedResearchItem {
                    lease_id: item.lease_id,
                    revoke_lease: i + 1 == n,
                    research_date: Utc::now(),
                    episode: item.episode.clone(),
                    clip: clip.clone(),
                    episode_duration_ns: 3_600_000_000_000,
                    episode_hash: "sha256:e".into(),
                    clip_duration_ns: 4_000_000_000,
                    clip_hash: "sha256:c".into(),
                    clip_offsets_ns: if i % 7 == 0 { vec![1_000] } else { vec![] },
                    clip_match_scores: (i % 7 == 0).then(|| vec![0.9]),
                    failure: None,
                    clip_findability: None,
                }));
            }
            d.ack().await.unwrap();
        }
    }
    let results = answers.len();
    bus.sender("completed_research")
        .await
        .unwrap()
        .send_batch(answers)
        .await
        .unwrap();

    // Record.
    let started = Instant::now();
    let report = completed_research::start(
        CancellationToken::new(),
        bus.receiver("completed_research").await.unwrap(),
        store.clone(),
        CompletedResearchConfig {
            batch_size: batch.unwrap_or(CompletedResearchConfig::default().batch_size),
            receive_wait: Duration::ZERO,
            ..CompletedResearchConfig::default()
        },
    )
    .done
    .await
    .unwrap();
    let record = started.elapsed();
    ok(&report);
    assert_eq!(report.stored, results as u64);
    assert_eq!(report.leases_revoked, ITEMS);

    [
        format!("{:.2} s", load.as_secs_f64()),
        format!(
            "{:.0} ms ({:.1} ms/item)",
            assign.as_secs_f64() * 1e3,
            assign.as_secs_f64() * 1e3 / ITEMS as f64
        ),
        format!(
            "{:.0} results/s ({results} in {:.2} s)",
            results as f64 / record.as_secs_f64(),
            record.as_secs_f64()
        ),
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wanted: Vec<&Size> = SIZES
        .iter()
        .filter(|s| args.iter().any(|a| a == s.name))
        .collect();
    let sizes: Vec<&Size> = if wanted.is_empty() {
        SIZES.iter().collect()
    } else {
        wanted
    };
    let batch = args
        .iter()
        .position(|a| a == "--batch")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>().expect("--batch takes a number"));
    let mut backends = vec!["sqlite"];
    if !args.iter().any(|a| a == "--no-postgres") {
        backends.push("postgres");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let batches = batch.map_or_else(
        || "default batches".to_string(),
        |n| format!("batches of {n}"),
    );
    println!("| size | backend | load, {batches} (target < 2 s at reference) | assign 200 items × 50 clips | record, {batches} |");
    println!("| --- | --- | --- | --- | --- |");
    for size in sizes {
        for backend in &backends {
            let [load, assign, record] = rt.block_on(bench(size, backend, batch));
            println!(
                "| {} ({} × {}) | {backend} | {load} | {assign} | {record} |",
                size.name, size.episodes, size.clips
            );
        }
    }
}
